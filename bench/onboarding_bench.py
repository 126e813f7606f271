"""Onboarding's benchmark (docs/performance.md): registrations completed per second end
to end, the share of time each step takes, and onboarding's peak memory.

    make bench-onboarding         # or: .venv/bin/python bench/onboarding_bench.py [--duration 30]

The registration path as real processes, each ``hiwallet run NAME`` as it runs in production:
onboarding, the customer realm's identity service (its admin API creates each user, with the
password hashed at its production cost: argon2id t=2, 19 MiB), wallet-api (opens each personal
account), and the mail catcher (SMTP in, its HTTP API read for the codes), on databases of their
own (onboarding, wallet, identity) and a RabbitMQ virtual host of their own (onboarding's wires
consumer runs, idle).

(i) Registrations completed per second, saturating: ``--concurrency`` clients (4 by default),
    each in a loop, a new address each time: ``POST /v1/registrations`` -> the code's mail
    read from the mail catcher (polled every 20 ms) -> ``POST .../verify`` -> ``POST
    .../complete`` (201). The figure is completions per second after the warm-up (the first
    fifth of ``--duration``).
(ii) Where the time goes: each step's share of a registration's time as the client sees it
    (register, mail arrival, verify, complete), and the calls onboarding makes, from the access
    lines identity and wallet-api log (route, duration): identity's lookup of the address (in
    register), its user creation (the password hash, in complete), its token, wallet-api's
    account opening; each one's share of all the clients' registration time. Each process's CPU
    as a share of one core.
(iii) Peak resident memory (VmHWM) of each process. Target for onboarding: < 150 MB.

The targets are reported, not asserted. Results as JSON in bench/results/onboarding-<time>.json.
Everything it starts it stops; it makes and drops its own databases and virtual host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import httpx
import uvloop

import benchlog
from hiwallet.contracts import databases
from topup_bench import Child, drop, free_port, pct, rabbitmqctl
from withdrawal_bench import Cpu

# The services' log lines, their access lines read back below: the run's log file (bench/benchlog.py).
SERVICE_LOG = benchlog.LOG
READY_TIMEOUT_S = 90.0
PASSWORD = "bench onboarding pass 1"
MAIL_POLL_S = 0.02
TARGETS = {"onboarding_rss_mb_max": 150.0}
_CODE = re.compile(r"\b([0-9]{6})\b")
STEPS = ("register", "mail", "verify", "complete")
# The calls onboarding makes, from their access lines (service, method, route): finding the
# address happens in "register", the user and the account in "complete".
CALLS = {
    ("identity-hiwallet", "POST", "/admin/realms/{realm_name}/users"): "identity: create the user (complete)",
    ("identity-hiwallet", "GET", "/admin/realms/{realm_name}/users"): "identity: find the address (register)",
    ("identity-hiwallet", "POST", "/realms/{realm_name}/protocol/openid-connect/token"): "identity: token",
    ("wallet-api", "POST", "/v1/accounts/personal"): "wallet-api: open the account (complete)",
}


class Proc(Child):
    def __init__(self, name: str, port: int, env: dict[str, str], *extra: str, ready_path: str = "/ready"):
        argv = [sys.executable, "-m", "hiwallet.cli", "run", name, "--port", str(port), *extra]
        super().__init__(
            name,
            port,
            argv,
            env,
            ready_path,
            log_path=SERVICE_LOG,
            ready_timeout_s=READY_TIMEOUT_S,
            stop_timeout_s=15.0,
        )


class Registrations:
    """The load: ``concurrency`` clients registering new addresses until ``stop``; each
    completed registration's end time and its steps' times."""

    def __init__(self, onboarding_url: str, mail_url: str, run_id: str) -> None:
        self.onboarding_url, self.mail_url, self.run_id = onboarding_url, mail_url, run_id
        self.done: list[tuple[float, dict[str, float]]] = []
        self.failures: dict[str, int] = defaultdict(int)
        self.attempts_s = 0.0  # every attempt's time, completed or failed (the calls' denominator)
        self.stop = asyncio.Event()
        self._n = 0

    async def client(self) -> None:
        limits = httpx.Limits(max_connections=4)
        async with (
            httpx.AsyncClient(base_url=self.onboarding_url, timeout=60, limits=limits) as onb,
            httpx.AsyncClient(base_url=self.mail_url, timeout=30, limits=limits) as mail,
        ):
            while not self.stop.is_set():
                self._n += 1
                email = f"bench-{self.run_id}-{self._n}@example.com"
                began = time.monotonic()
                try:
                    steps = await self.one(onb, mail, email)
                except Exception as exc:
                    self.failures[type(exc).__name__ + ": " + str(exc)[:80]] += 1
                    continue
                finally:
                    self.attempts_s += time.monotonic() - began
                self.done.append((time.monotonic(), steps))

    async def one(self, onb: httpx.AsyncClient, mail: httpx.AsyncClient, email: str) -> dict[str, float]:
        steps: dict[str, float] = {}
        t0 = time.monotonic()
        registered = await onb.post("/v1/registrations", json={"email": email})
        if registered.status_code != 202:
            raise RuntimeError(f"register {registered.status_code}")
        registration_id = registered.json()["registration_id"]
        t1 = time.monotonic()
        code = await self.code(mail, email)
        t2 = time.monotonic()
        verified = await onb.post(f"/v1/registrations/{registration_id}/verify", json={"code": code})
        if verified.status_code != 200:
            raise RuntimeError(f"verify {verified.status_code}")
        t3 = time.monotonic()
        completed = await onb.post(
            f"/v1/registrations/{registration_id}/complete", json={"password": PASSWORD}
        )
        if completed.status_code != 201:
            raise RuntimeError(f"complete {completed.status_code} {completed.text[:80]}")
        t4 = time.monotonic()
        steps = {"register": t1 - t0, "mail": t2 - t1, "verify": t3 - t2, "complete": t4 - t3}
        return steps

    async def code(self, mail: httpx.AsyncClient, email: str) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = (await mail.get("/api/v1/search", params={"query": f"to:{email}"})).json()
            if found["messages"]:
                message = (await mail.get(f"/api/v1/message/{found['messages'][0]['ID']}")).json()
                match = _CODE.search(message["Text"])
                if match:
                    return match.group(1)
            await asyncio.sleep(MAIL_POLL_S)
        raise TimeoutError("no mail")


def step_figures(load: Registrations, step: str, totals: dict[str, float], whole: float) -> dict[str, Any]:
    times = [s[step] for _, s in load.done]
    if not times:
        return {"share": None, "mean_ms": None, "p99_ms": None}
    return {
        "share": round(totals[step] / whole, 3),
        "mean_ms": round(statistics.fmean(times) * 1000, 1),
        "p99_ms": round(pct(times, 0.99) * 1000, 1),
    }


def access_lines(since: str) -> list[dict[str, Any]]:
    """The access lines (event "request") the processes logged since ``since`` (ISO time)."""
    lines = []
    with SERVICE_LOG.open(errors="replace") as log:
        for line in log:
            if '"event":"request"' not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("timestamp", "") >= since:
                lines.append(entry)
    return lines


def calls(lines: list[dict[str, Any]], attempts_s: float) -> dict[str, Any]:
    """The calls onboarding made to identity and wallet-api during the load, from the access
    lines those processes logged: each kind's count, its mean time, and its share of all the
    clients' registration time (completed or not)."""
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for entry in lines:
        kind = CALLS.get((str(entry.get("service")), str(entry.get("method")), str(entry.get("route"))))
        if kind is not None:
            seconds[kind] += float(entry.get("duration_ms", 0.0)) / 1000
            counts[kind] += 1
    return {
        kind: {
            "calls": counts[kind],
            "mean_ms": round(seconds[kind] / counts[kind] * 1000, 1),
            "share_of_registration_time": round(seconds[kind] / attempts_s, 3) if attempts_s else None,
        }
        for kind in sorted(seconds)
    }


async def system(args: argparse.Namespace, report: dict[str, Any]) -> None:
    pid = os.getpid()
    dbs = {key: f"hiwallet_bench_onb_{key}_{pid}" for key in ("onboarding", "wallet", "identity")}
    vhost = f"hiwallet-bench-onb-{pid}"
    amqp = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    await drop(*dbs.values())
    for key, name in dbs.items():
        await databases.migrate(key, database=name)
    await rabbitmqctl("add_vhost", vhost)
    await rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    ports = {name: free_port() for name in ("identity", "wallet-api", "onboarding", "mail-catcher", "smtp")}
    identity_url = f"http://127.0.0.1:{ports['identity']}"
    base = {
        **os.environ,
        "HIWALLET_AMQP_URL": amqp,
        "HIWALLET_IDENTITY_PUBLIC_URL": identity_url,
        "HIWALLET_IDENTITY_DATABASE": dbs["identity"],
        "HIWALLET_IDENTITY_SMTP_ENABLED": "false",
        "HIWALLET_WALLET_API_DATABASE": dbs["wallet"],
        "HIWALLET_WALLET_API_CUSTOMER_ISSUER_BASE": identity_url,
        "HIWALLET_ONBOARDING_DATABASE": dbs["onboarding"],
        "HIWALLET_ONBOARDING_CUSTOMER_ISSUER_BASE": identity_url,
        "HIWALLET_ONBOARDING_WALLET_API_URL": f"http://127.0.0.1:{ports['wallet-api']}",
        "HIWALLET_ONBOARDING_SMTP_PORT": str(ports["smtp"]),
        # one client address for the whole load: the per-IP limit is not what is measured
        "HIWALLET_ONBOARDING_RATE_PER_IP": "100000000",
        "MAIL_CATCHER_SMTP_PORT": str(ports["smtp"]),
    }
    if args.cheap_hashes:
        base |= {
            "HIWALLET_IDENTITY_ARGON2_TIME_COST": "1",
            "HIWALLET_IDENTITY_ARGON2_MEMORY_KIB": "1024",
            "HIWALLET_IDENTITY_ARGON2_PARALLELISM": "1",
        }
    report["identity_password_hash"] = (
        "cheap (t=1, 1 MiB)" if args.cheap_hashes else "production (t=2, 19 MiB, p=1)"
    )
    procs: list[Proc] = []
    try:
        procs.append(Proc("identity", ports["identity"], base, "--realm", "hiwallet"))
        procs.append(Proc("mail-catcher", ports["mail-catcher"], base, ready_path="/health"))
        await asyncio.gather(*(p.ready() for p in procs))
        procs.append(Proc("wallet-api", ports["wallet-api"], base))
        procs.append(Proc("onboarding", ports["onboarding"], base))
        await asyncio.gather(*(p.ready() for p in procs))
        onboarding = next(p for p in procs if p.name == "onboarding")
        load = Registrations(
            onboarding.url, f"http://127.0.0.1:{ports['mail-catcher']}", uuid.uuid4().hex[:8]
        )

        print("warm-up: 5 registrations ...", flush=True)
        for _ in range(5):
            async with (
                httpx.AsyncClient(base_url=load.onboarding_url, timeout=60) as onb,
                httpx.AsyncClient(base_url=load.mail_url, timeout=30) as mail,
            ):
                await load.one(onb, mail, f"warm-{uuid.uuid4().hex[:10]}@example.com")

        print(f"(i) {args.concurrency} clients registering for {args.duration} s ...", flush=True)
        cpu = Cpu(procs)
        since = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        started = time.monotonic()
        clients = [asyncio.create_task(load.client()) for _ in range(args.concurrency)]
        sampling_until = started + args.duration
        with benchlog.phase("(i) registering", args.duration):
            while time.monotonic() < sampling_until:
                for p in procs:
                    p.sample()
                await asyncio.sleep(0.5)
        load.stop.set()
        await asyncio.gather(*clients)
        ended = time.monotonic()
        shares = cpu.shares()
        measured_from = started + args.duration / 5
        counted = [t for t, _ in load.done if measured_from <= t <= started + args.duration]
        throughput = {
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "completed": len(load.done),
            "completed_per_s": round(len(counted) / (args.duration * 4 / 5), 2),
            "failures": dict(load.failures),
            "wall_incl_last_s": round(ended - started, 1),
            "cpu_share_of_a_core": shares,
        }
        report["throughput"] = throughput
        print(f"  {throughput}", flush=True)

        totals = {step: sum(s[step] for _, s in load.done) for step in STEPS}
        whole = sum(totals.values())
        per_registration = [sum(s.values()) for _, s in load.done]
        report["steps"] = {step: step_figures(load, step, totals, whole) for step in STEPS}
        report["registration_ms"] = {
            "p50": round(pct(per_registration, 0.5) * 1000, 1) if per_registration else None,
            "p99": round(pct(per_registration, 0.99) * 1000, 1) if per_registration else None,
        }
        await asyncio.sleep(1.0)  # the last access lines written
        report["calls"] = calls(access_lines(since), load.attempts_s)
        print(f"(ii) steps: {report['steps']}", flush=True)
        print(f"     calls: {report['calls']}", flush=True)
        report["rss_mb"] = {p.name: round(p.sample(), 1) for p in procs}
        print(f"(iii) peak RSS: {report['rss_mb']}", flush=True)
    finally:
        for proc in reversed(procs):
            proc.stop()
        try:
            await rabbitmqctl("delete_vhost", vhost)
        except Exception as exc:
            print(f"vhost not deleted: {exc}")
        await drop(*dbs.values())


def summary(report: dict[str, Any]) -> dict[str, Any]:
    rss = report.get("rss_mb", {}).get("onboarding")
    return {
        "registrations_completed_per_s": report.get("throughput", {}).get("completed_per_s"),
        "step_shares": {k: v["share"] for k, v in report.get("steps", {}).items()},
        "registration_ms": report.get("registration_ms"),
        "onboarding_peak_rss_mb": rss,
        "onboarding_rss_within_target": None if rss is None else rss < TARGETS["onboarding_rss_mb_max"],
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "load_before": os.getloadavg()},
        "targets": TARGETS,
        "note": "one machine shared by the load client, the services, PostgreSQL and RabbitMQ"
        " (and, today, other developers' work): indicative figures",
    }
    try:
        await system(args, report)
    except Exception as exc:  # the figures measured so far are kept, with what stopped the run
        report["failed"] = f"{type(exc).__name__}: {exc}"
    report["machine"]["load_after"] = os.getloadavg()
    report["summary"] = summary(report)
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=30, help="seconds of (i) (default 30)")
    parser.add_argument("--concurrency", type=int, default=4, help="clients registering at once (default 4)")
    parser.add_argument(
        "--cheap-hashes",
        action="store_true",
        help="identity hashes passwords at a test's cost (what onboarding itself costs, without argon2)",
    )
    args = parser.parse_args()
    benchlog.to_file()
    report = uvloop.run(main(args))
    benchlog.finish("onboarding", report)


if __name__ == "__main__":
    cli()
