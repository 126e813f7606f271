"""The personal web app's benchmark: its home page (the person's wallets, balances and promo
batches, server-rendered) under load, beside wallet-api's own GET /v1/accounts, in one run, with
real sign-ins and real processes.

    .venv/bin/python bench/bff_bench.py [--duration 10] [--concurrency 8] [--rounds 2]

It starts the identity service (its realm's personal-web-bff client redirecting to this run's
port), wallet-api and personal-web-bff as their own processes on fresh databases, opens funded
customers as bench/wallet_api_bench.py does and signs each in through the BFF as a browser does
(/login, identity's login form, the callback: a sealed session cookie, the tokens kept by the
BFF). Then it alternates ``rounds`` times: GET /v1/accounts straight from wallet-api with each
customer's token, then GET / from the BFF with each customer's cookie, each for ``duration``
seconds at ``concurrency``. It reports pages/s, p50 and p99 of both, their ratio, and the BFF's
peak RSS, and the CPU milliseconds per answer each process spent (the BFF, wallet-api, the
wallet database's PostgreSQL backends). A home page is two of wallet-api's answers (the
accounts, then each wallet's overview) and a template: the ratio says what a page costs in
wallet-api calls.
Results: bench/results/bff-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvloop

import benchlog
import httpload
import wallet_api_bench as wb
from cpu import pids_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.identity.settings import REALMS_DIR
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

# The identity service with a realms directory of this run's (the BFF's callback on its port).
_IDENTITY = """
import sys, uvicorn
from pathlib import Path
from hiwallet.identity.app import create_identity_app
from hiwallet.identity.settings import IdentitySettings
port, database, realms = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
settings = IdentitySettings(public_url=f"http://127.0.0.1:{port}", access_token_lifetime_s=3600,
                            argon2_time_cost=1, argon2_memory_kib=1024, argon2_parallelism=1,
                            smtp_enabled=False, realms_dir=realms)
uvicorn.run(create_identity_app("hiwallet", settings, database=database), host="127.0.0.1", port=port,
            log_level="warning", access_log=False)
"""

# As `hiwallet run personal-web-bff` runs it, pointed at this run's identity and wallet-api.
_BFF = """
import os, sys
port, idp, api = sys.argv[1], sys.argv[2], sys.argv[3]
prefix = "HIWALLET_PERSONAL_WEB_BFF_"
os.environ.update({prefix + "PORT": port, prefix + "PUBLIC_URL": f"http://127.0.0.1:{port}",
                   prefix + "ISSUER": f"{idp}/realms/hiwallet", prefix + "WALLET_API_URL": api})
from hiwallet.personal_web_bff.app import run_personal_web_bff
run_personal_web_bff(int(port), "127.0.0.1")
"""

_INPUT = re.compile(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"')
_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


def _realms(directory: Path, bff_port: int) -> Path:
    """The repository's realms, the personal-web-bff client redirecting to ``bff_port``."""
    for source in REALMS_DIR.glob("*.json"):
        realm = json.loads(source.read_text())
        for client in realm.get("clients", []):
            if client["clientId"] == "personal-web-bff":
                client["redirectUris"] = [f"http://127.0.0.1:{bff_port}/auth/callback"]
        (directory / source.name).write_text(json.dumps(realm))
    return directory


async def _people(
    client: httpx.AsyncClient, idp: str, api: str, ledger: Ledger, count: int
) -> list[tuple[str, str]]:
    """(user name, token) of ``count`` funded customers, as wallet_api_bench opens them."""
    admin = await wb._onboarding_headers(client, idp)
    token_url = f"{idp}/realms/hiwallet/protocol/openid-connect/token"
    out = []
    for _ in range(count):
        name = f"bench-{uuid.uuid4().hex[:12]}"
        rep = {
            "username": name,
            "email": f"{name}@bench.hiwallet.dev",
            "enabled": True,
            "credentials": [{"type": "password", "value": wb.PASSWORD, "temporary": False}],
        }
        (await client.post(f"{idp}/admin/realms/hiwallet/users", json=rep, headers=admin)).raise_for_status()
        [user] = (
            await client.get(
                f"{idp}/admin/realms/hiwallet/users",
                params={"username": name, "exact": "true"},
                headers=admin,
            )
        ).json()
        opened = await client.post(f"{api}/v1/accounts/personal", json={"subject": user["id"]}, headers=admin)
        opened.raise_for_status()
        wallet = opened.json()["wallets"][0]
        await ledger.topup(
            f"bench-{uuid.uuid4().hex}",
            wallet["id"],
            1_000_000,
            provider="stripe",
            actor="bench",
            ref="bench",
        )
        grant = {"grant_type": "password", "client_id": "personal-mobile-api", "username": name}
        answer = await client.post(token_url, data={**grant, "password": wb.PASSWORD})
        answer.raise_for_status()
        out.append((name, answer.json()["access_token"]))
    return out


async def _sign_in(bff: str, idp: str, name: str) -> str:
    """The BFF's session cookie(s) of ``name``, signed in as a browser does."""
    async with httpx.AsyncClient(timeout=30.0, follow_redirects=False) as browser:
        to_idp = await browser.get(f"{bff}/login")
        page = await browser.get(to_idp.headers["location"])
        action = _ACTION.search(page.text)
        if action is None:
            raise RuntimeError(f"no login form: {page.status_code}")
        form = {**dict(_INPUT.findall(page.text)), "username": name, "password": wb.PASSWORD}
        back = await browser.post(idp + action[1], data=form)
        done = await browser.get(back.headers["location"])
        if done.status_code != 303:
            raise RuntimeError(f"the callback answered {done.status_code}")
        return "; ".join(f"{k}={v}" for k, v in browser.cookies.items())


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (wallet-api's workers, say), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo.extend(children.get(out[-1], []))
    return out


class Cpu:
    """CPU seconds the BFF, wallet-api (each with its children) and the wallet database's
    PostgreSQL backends spent between :meth:`start` and :meth:`stop`: the machine is shared, so a
    page's cost is read as CPU per page rather than from latencies alone."""

    def __init__(self, pool: Any, database: str, bff_pid: int, api_pid: int) -> None:
        self.pool, self.database = pool, database
        self.pids = {"bff": bff_pid, "wallet_api": api_pid}
        self.before: dict[str, float] = {}
        self.backends: dict[int, float] = {}

    async def _backends(self) -> list[int]:
        rows = await self.pool.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", self.database)
        return [r["pid"] for r in rows]

    async def start(self) -> None:
        self.backends = {pid: pids_cpu_s([pid]) for pid in await self._backends()}
        self.before = {k: pids_cpu_s(_tree(pid)) for k, pid in self.pids.items()}

    async def stop(self) -> dict[str, float]:
        spent = {k: pids_cpu_s(_tree(pid)) - self.before[k] for k, pid in self.pids.items()}
        # Those of the start, and the whole of those opened since (a pool that reconnects under
        # load pays for it: a backend's start and its TLS handshake are counted too); one that
        # ended meanwhile counts nothing, its last CPU cannot be read. The bench's own backend
        # (this query, the funding) is among them: a few microseconds a page.
        spent["postgres"] = sum(
            pids_cpu_s([pid]) - self.backends.get(pid, 0.0) for pid in await self._backends()
        )
        return spent


async def _load(
    url: str,
    requests: list[tuple[str, dict[str, str]]],
    concurrency: int,
    duration_s: float,
    pid: int,
    cpu: Cpu,
) -> dict[str, Any]:
    """GET each (path, headers) of ``requests`` round robin from ``concurrency`` keep-alive
    connections for ``duration_s``; 200s counted, their latencies kept, and the CPU milliseconds
    each process spent per answer."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    peak = wb.rss_mb(pid)
    deadline = time.monotonic() + duration_s
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def worker(i: int) -> None:
        path, headers = requests[i % len(requests)]
        conn = httpload.Connection(host, int(port))
        try:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    status, _ = await conn.request("GET", path, headers)
                    reason = str(status)
                except (httpload.HttpLoadError, OSError, TimeoutError) as exc:
                    status, reason = 0, type(exc).__name__
                if status == 200:
                    latencies.append((time.perf_counter() - started) * 1000)
                else:
                    errors[reason] = errors.get(reason, 0) + 1
        finally:
            conn.close()

    async def sample() -> None:
        nonlocal peak
        while time.monotonic() < deadline:
            peak = max(peak, wb.rss_mb(pid))
            await asyncio.sleep(0.5)

    await cpu.start()
    started = time.monotonic()
    await asyncio.gather(sample(), *(worker(i) for i in range(concurrency)))
    elapsed_s = time.monotonic() - started
    spent = await cpu.stop()
    latencies.sort()

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 2) if latencies else 0.0

    return {
        "per_s": round(len(latencies) / elapsed_s, 1),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "errors": errors,
        "rss_mb": round(peak, 1),
        "cpu_ms_per_answer": {
            k: round(1000 * v / len(latencies), 2) if latencies else None for k, v in spent.items()
        },
    }


async def measure(concurrency: int, duration_s: float, rounds: int) -> dict[str, Any]:
    tag = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
    wallet_db, identity_db = f"hiwallet_bench_bff_{tag}", f"hiwallet_bench_bff_idp_{tag}"
    await databases.migrate("wallet", database=wallet_db)
    await databases.migrate("identity", database=identity_db)
    idp_port, api_port, bff_port = (wb.free_port() for _ in range(3))
    idp, api, bff = (f"http://127.0.0.1:{p}" for p in (idp_port, api_port, bff_port))
    realms = _realms(Path(tempfile.mkdtemp(prefix="hiwallet-bench-realms-")), bff_port)
    procs = [wb._start(_IDENTITY, str(idp_port), identity_db, str(realms))]
    pool = await db.create_pool(
        wallet_db, role=db.app_role("wallet"), min_size=1, max_size=2, init=init_connection
    )
    try:
        async with httpx.AsyncClient(timeout=30.0) as client:
            await wb._wait_ready(client, idp, procs[0])
            procs.append(wb._start(wb._WALLET_API, str(api_port), wallet_db, idp))
            await wb._wait_ready(client, api, procs[1])
            procs.append(wb._start(_BFF, str(bff_port), idp, api))
            await wb._wait_ready(client, bff, procs[2])
            ledger = Ledger(LedgerStore.from_settings(pool), Fees.from_settings())
            people = await _people(client, idp, api, ledger, concurrency)
            cookies = [await _sign_in(bff, idp, name) for name, _ in people]
            direct_requests = [("/v1/accounts", {"Authorization": f"Bearer {t}"}) for _, t in people]
            page_requests = [("/", {"Cookie": c, "Accept-Language": "tr"}) for c in cookies]
            for path, headers in page_requests:  # warm: each session's first page
                (await client.get(f"{bff}{path}", headers=headers)).raise_for_status()
            cpu = Cpu(pool, wallet_db, procs[2].pid, procs[1].pid)
            direct, pages = [], []
            for r in range(rounds):
                with benchlog.phase(f"wallet-api GET /v1/accounts, round {r + 1}", duration_s):
                    direct.append(
                        await _load(api, direct_requests, concurrency, duration_s, procs[1].pid, cpu)
                    )
                with benchlog.phase(f"personal-web-bff GET /, round {r + 1}", duration_s):
                    pages.append(await _load(bff, page_requests, concurrency, duration_s, procs[2].pid, cpu))
        return _summary(concurrency, direct, pages)
    finally:
        await pool.close()
        for proc in reversed(procs):
            wb._stop(proc)
        await wb._drop(wallet_db, identity_db)


def _mean(runs: list[dict[str, Any]], key: str) -> float:
    return round(sum(r[key] for r in runs) / len(runs), 2)


def _cpu(runs: list[dict[str, Any]]) -> dict[str, float]:
    """CPU ms per answer of each process, the rounds' mean, and their total."""
    names = runs[0]["cpu_ms_per_answer"].keys()
    out = {k: round(sum(r["cpu_ms_per_answer"][k] or 0.0 for r in runs) / len(runs), 2) for k in names}
    return {**out, "total": round(sum(out.values()), 2)}


def _summary(concurrency: int, direct: list[dict[str, Any]], pages: list[dict[str, Any]]) -> dict[str, Any]:
    d, p = _mean(direct, "per_s"), _mean(pages, "per_s")
    return {
        "concurrency": concurrency,
        "wallet_api_accounts": {
            "per_s": d,
            "p50_ms": _mean(direct, "p50_ms"),
            "p99_ms": _mean(direct, "p99_ms"),
            "cpu_ms_per_answer": _cpu(direct),
        },
        "home_page": {
            "per_s": p,
            "p50_ms": _mean(pages, "p50_ms"),
            "p99_ms": _mean(pages, "p99_ms"),
            "bff_rss_mb": max(r["rss_mb"] for r in pages),
            "cpu_ms_per_page": _cpu(pages),
        },
        "ratio_pages_to_accounts": round(p / d, 3) if d else None,
        "errors": {"direct": [r["errors"] for r in direct], "pages": [r["errors"] for r in pages]},
        "rounds": {"direct": direct, "pages": pages},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    benchlog.to_file()
    started = datetime.now(UTC)
    results = [uvloop.run(measure(c, args.duration, args.rounds)) for c in args.concurrency]
    result = {
        "bench": "bff",
        "started": started.isoformat(),
        "duration_s": args.duration,
        "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count()},
        "results": results,
    }
    path = benchlog.save("bff", result, at=started)
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "rounds"}), flush=True)
    print(f"results: {path}")


if __name__ == "__main__":
    sys.exit(main())
