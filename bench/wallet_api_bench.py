"""wallet-api's benchmark: p2p transfers per second over HTTP with real tokens.

    .venv/bin/python bench/wallet_api_bench.py [--duration 10] [--concurrency 8 32]

``measure(concurrency, duration_s)`` starts the identity service (realm hiwallet) and wallet-api
as their own processes on free ports of 127.0.0.1, each on a fresh database, opens funded
customers (real users, real password-grant tokens fetched once), then runs p2p transfers through
``POST /v1/transfers`` at that concurrency for ``duration_s``. It returns transfers_per_s,
p50_ms, p99_ms, errors and the peak resident memory of the largest wallet-api process and of all
(sampled from /proc; wallet-api runs as `hiwallet run wallet-api` does, with its worker processes).
Everything it starts it stops, and it drops its databases. bench/ledger_bench.py calls it in
the same run as the ledger core's own figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import uvloop

import benchlog
import httpload
from cpu import machine_busy_s, pids_cpu_s, process_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

PASSWORD = "bench password 1"
FUNDING_MINOR = 10**12
AMOUNT_MINOR = 100
MAX_DURATION_S = 300.0
READY_TIMEOUT_S = 30.0
WALLETS = 1000
OPEN_CONCURRENCY = 8

_IDENTITY = """
import sys, uvicorn
from hiwallet.identity.app import create_identity_app
from hiwallet.identity.settings import IdentitySettings
port, database = int(sys.argv[1]), sys.argv[2]
settings = IdentitySettings(public_url=f"http://127.0.0.1:{port}", access_token_lifetime_s=3600,
                            argon2_time_cost=1, argon2_memory_kib=1024, argon2_parallelism=1,
                            smtp_enabled=False)
uvicorn.run(create_identity_app("hiwallet", settings, database=database), host="127.0.0.1", port=port,
            log_level="warning", access_log=False)
"""

# As `hiwallet run wallet-api` runs it: its settings from the environment (the workers it
# starts build their apps from it), with HIWALLET_WALLET_API_WORKERS worker processes.
_WALLET_API = """
import os, sys
port, database, idp = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ.update(HIWALLET_WALLET_API_PORT=port, HIWALLET_WALLET_API_DATABASE=database,
                  HIWALLET_WALLET_API_CUSTOMER_ISSUER_BASE=idp, HIWALLET_WALLET_API_STAFF_ISSUER_BASE=idp,
                  HIWALLET_WALLET_API_LIMIT_VERIFIED_TRANSFER_MINOR=str(10**15))
from hiwallet.wallet_api.app import run_wallet_api
run_wallet_api(int(port), "127.0.0.1")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def rss_tree_mb(pid: int) -> tuple[float, float]:
    """(the largest, the sum) of the resident memory of ``pid`` and its child processes: with
    workers, each worker is a wallet-api process, beside uvicorn's supervisor."""
    sizes = [rss_mb(p) for p in [pid, *_children(pid)]]
    return max(sizes), sum(sizes)


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _drop(*names: str) -> None:
    conn = await asyncpg.connect(db.owner_dsn("postgres", get_settings()))
    try:
        for name in names:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def _wait_ready(client: httpx.AsyncClient, url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}")
        with suppress(httpx.HTTPError):
            if (await client.get(f"{url}/ready")).status_code == 200:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} not ready in {READY_TIMEOUT_S} s")


# The services' log lines (wallet-api's access line on every request) go to a file, as under a
# supervisor or a container runtime: not to the terminal, whose speed would be measured too.
SERVICE_LOG = benchlog.LOG


def _start(
    code: str, *args: str, src: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    # Its own process group: wallet-api's worker processes go with it, however it ends.
    env = {**os.environ, **(env or {}), **({"PYTHONPATH": str(src)} if src is not None else {})}
    with SERVICE_LOG.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            env=env,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # any worker left behind


async def _customers(
    client: httpx.AsyncClient, idp: str, api: str, ledger: Ledger, count: int
) -> list[tuple[str, str, str]]:
    """(token, wallet id, wallet number) of ``count`` verified, funded customers (the bench's
    wallet-api lets verified send without a monthly limit to speak of)."""
    token_url = f"{idp}/realms/hiwallet/protocol/openid-connect/token"
    admin = await _onboarding_headers(client, idp)
    out = []
    for _ in range(count):
        name = f"bench-{uuid.uuid4().hex[:12]}"
        rep = {
            "username": name,
            "email": f"{name}@bench.hiwallet.dev",
            "enabled": True,
            "credentials": [{"type": "password", "value": PASSWORD, "temporary": False}],
        }
        (await client.post(f"{idp}/admin/realms/hiwallet/users", json=rep, headers=admin)).raise_for_status()
        grant = {
            "grant_type": "password",
            "client_id": "personal-mobile-api",
            "username": name,
            "password": PASSWORD,
        }
        token = (await client.post(token_url, data=grant)).json()["access_token"]
        users = (
            await client.get(
                f"{idp}/admin/realms/hiwallet/users",
                params={"username": name, "exact": "true"},
                headers=admin,
            )
        ).json()
        opened = await client.post(
            f"{api}/v1/accounts/personal", json={"subject": users[0]["id"]}, headers=admin
        )
        opened.raise_for_status()
        account = opened.json()
        raised = await client.put(
            f"{api}/v1/accounts/{account['id']}/tier", json={"tier": "verified"}, headers=admin
        )
        raised.raise_for_status()
        wallet = account["wallets"][0]
        await ledger.topup(
            f"bench-{uuid.uuid4().hex}",
            wallet["id"],
            FUNDING_MINOR,
            provider="stripe",
            actor="bench",
            ref="bench funds",
        )
        out.append((token, wallet["id"], wallet["number"]))
    return out


async def _onboarding_headers(client: httpx.AsyncClient, idp: str) -> dict[str, str]:
    token_url = f"{idp}/realms/hiwallet/protocol/openid-connect/token"
    answer = await client.post(
        token_url, auth=("onboarding", "dev-onboarding-secret"), data={"grant_type": "client_credentials"}
    )
    answer.raise_for_status()
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}


async def _receivers(client: httpx.AsyncClient, idp: str, api: str, count: int) -> list[str]:
    """Wallet numbers of ``count`` verified personal accounts, opened through onboarding."""
    admin = await _onboarding_headers(client, idp)
    numbers: list[str] = []
    todo = iter(range(count))

    async def opener() -> None:
        for _ in todo:
            subject = f"bench-receiver-{uuid.uuid4().hex}"
            opened = await client.post(
                f"{api}/v1/accounts/personal", json={"subject": subject}, headers=admin
            )
            opened.raise_for_status()
            account = opened.json()
            raised = await client.put(
                f"{api}/v1/accounts/{account['id']}/tier", json={"tier": "verified"}, headers=admin
            )
            raised.raise_for_status()
            numbers.append(account["wallets"][0]["number"])

    await asyncio.gather(*(opener() for _ in range(OPEN_CONCURRENCY)))
    return numbers


async def _businesses(pool: asyncpg.Pool, count: int) -> list[str]:
    """Wallet numbers of ``count`` business accounts (as an operator opens them): a payment to
    one writes its merchant event (payment.received) in the transfer's statement."""
    from hiwallet.wallet_api.service import WalletService
    from hiwallet.wallet_api.settings import WalletApiSettings

    service = WalletService(pool, LedgerStore.from_settings(pool), Fees.from_settings(), WalletApiSettings())
    numbers = []
    for i in range(count):
        account = await service.open_business(f"Bench shop {i}", operator="operator:bench")
        numbers.append(account["wallets"][0]["number"])
    return numbers


class Served:
    """identity and wallet-api running, with funded senders and their tokens: ``run`` as many
    timed runs as wanted (the interleaved rounds of bench/ledger_bench.py)."""

    def __init__(
        self,
        api: str,
        pid: int,
        client: httpx.AsyncClient,
        people: list[tuple[str, str, str]],
        receivers: list[str],
        pool: asyncpg.Pool,
        database: str,
    ) -> None:
        self.api, self.pid, self.client = api, pid, client
        self.people, self.receivers = people, receivers
        self.pool, self.database = pool, database

    async def _backends(self) -> list[int]:
        """wallet-api's database sessions (its pool's), for their CPU."""
        rows = await self.pool.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", self.database
        )
        return [r["pid"] for r in rows]

    async def run(self, concurrency: int, duration_s: float) -> dict[str, Any]:
        if not 1 <= concurrency <= len(self.people) or not 0 < duration_s <= MAX_DURATION_S:
            raise ValueError(f"concurrency must be 1..{len(self.people)} and duration 0..300 s")
        before = await _server_time(self.client, self.api)
        backends = await self._backends()
        db_before = pids_cpu_s(backends)
        report = await _run(self.api, self.people, self.receivers, concurrency, duration_s, self.pid)
        # PostgreSQL's CPU a transfer, in wallet-api's sessions (those open at the start)
        report["db_cpu_us"] = round((pids_cpu_s(backends) - db_before) / max(report["transfers"], 1) * 1e6)
        after = await _server_time(self.client, self.api)
        if after[1] > before[1]:
            # Time inside wallet-api (from its own histogram): the rest of the client's
            # latency is the HTTP client, the network stack and waiting for a CPU.
            report["server_mean_ms"] = round(1000 * (after[0] - before[0]) / (after[1] - before[1]), 2)
        return report


async def _migrate_wallet(database: str, src: Path | None) -> None:
    """The wallet database, migrated by the code that will serve it: ``src`` (another tree's
    ``src``, e.g. ``git archive main``'s, with its own migrations folder beside) or this one."""
    if src is None:
        await databases.migrate("wallet", database=database)
        return
    code = "import asyncio, sys; from hiwallet.contracts import databases; "
    code += "asyncio.run(databases.migrate('wallet', database=sys.argv[1]))"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, database, env={**os.environ, "PYTHONPATH": str(src)}
    )
    if await proc.wait() != 0:
        raise RuntimeError(f"migrating {database} with {src} failed")


@asynccontextmanager
async def serving(
    senders: int,
    *,
    to_businesses: bool = False,
    src: Path | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Served]:
    """identity and wallet-api (from ``src`` when given: the code before, for a comparison in
    the same run; ``env``: more of wallet-api's environment, e.g. a setting) on fresh databases,
    ``senders`` funded customers; everything stopped and dropped at the end."""
    tag = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
    wallet_db, identity_db = f"hiwallet_bench_wapi_{tag}", f"hiwallet_bench_wapi_idp_{tag}"
    await _migrate_wallet(wallet_db, src)
    await databases.migrate("identity", database=identity_db)
    idp_port, api_port = free_port(), free_port()
    idp, api = f"http://127.0.0.1:{idp_port}", f"http://127.0.0.1:{api_port}"
    procs = [_start(_IDENTITY, str(idp_port), identity_db)]
    pool = await db.create_pool(
        wallet_db, role=db.app_role("wallet"), min_size=1, max_size=2, init=init_connection
    )
    limits = httpx.Limits(max_connections=senders + 4, max_keepalive_connections=senders + 4)
    try:
        async with httpx.AsyncClient(timeout=30.0, limits=limits) as client:
            await _wait_ready(client, idp, procs[0])
            procs.append(_start(_WALLET_API, str(api_port), wallet_db, idp, src=src, env=env))
            await _wait_ready(client, api, procs[1])
            ledger = Ledger(LedgerStore.from_settings(pool), Fees.from_settings())
            people = await _customers(client, idp, api, ledger, senders)
            # As in the ledger core's spread run, money goes among 1,000 wallets: the senders
            # and receivers opened through onboarding (no login needed to receive).
            receivers = [w for _, _, w in people] + await _receivers(client, idp, api, WALLETS - len(people))
            if to_businesses:
                receivers = await _businesses(pool, 100)
            # Warm up: every sender's token is verified once (JWKS fetched, plans prepared).
            for token, wallet, _ in people:
                headers = {"Authorization": f"Bearer {token}"}
                (await client.get(f"{api}/v1/wallets/{wallet}", headers=headers)).raise_for_status()
            yield Served(api, procs[1].pid, client, people, receivers, pool, wallet_db)
            verified = await ledger.store.verify()
            if not verified.ok:
                raise RuntimeError(f"wallet-api's ledger does not verify: {verified.problems[:5]}")
    finally:
        await pool.close()
        for proc in reversed(procs):
            _stop(proc)
        await _drop(wallet_db, identity_db)


async def measure(concurrency: int, duration_s: float, *, to_businesses: bool = False) -> dict[str, Any]:
    """Transfers per second through wallet-api over HTTP at ``concurrency``, for ``duration_s``;
    ``to_businesses``: payments to 100 businesses instead of p2p (each writes its event)."""
    if not 1 <= concurrency <= 256 or not 0 < duration_s <= MAX_DURATION_S:
        raise ValueError("concurrency must be 1..256 and duration 0..300 s")
    async with serving(concurrency, to_businesses=to_businesses) as served:
        with benchlog.phase(f"wallet-api, concurrency {concurrency}", duration_s):
            report = await served.run(concurrency, duration_s)
    report["ledger_verified"] = True  # serving raises when it does not verify
    return report


async def _server_time(client: httpx.AsyncClient, api: str) -> tuple[float, float]:
    """(sum of seconds, count) of POST /v1/transfers from wallet-api's /metrics."""
    total = count = 0.0
    for line in (await client.get(f"{api}/metrics")).text.splitlines():
        if 'route="/v1/transfers"' in line and 'method="POST"' in line:
            if line.startswith("http_request_duration_seconds_sum"):
                total = float(line.rsplit(" ", 1)[1])
            elif line.startswith("http_request_duration_seconds_count"):
                count = float(line.rsplit(" ", 1)[1])
    return total, count


async def _run(
    api: str,
    people: list[tuple[str, str, str]],
    receivers: list[str],
    concurrency: int,
    duration_s: float,
    pid: int,
) -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    peak, peak_total = rss_tree_mb(pid)
    deadline = time.monotonic() + duration_s
    rng = random.Random(7)

    host, port = api.removeprefix("http://").rsplit(":", 1)

    async def worker(i: int) -> None:
        # Each worker sends from its own customer (no two requests lock one sender), to anyone,
        # over its own keep-alive connection, with the lean client (bench/httpload.py): httpx
        # costs the client more CPU per request than wallet-api spends, on the same 2 cores.
        token, wallet, _ = people[i]
        conn = httpload.Connection(host, int(port))
        try:
            while time.monotonic() < deadline:
                receiver = receivers[rng.randrange(len(receivers))]
                if receiver == people[i][2]:
                    continue
                transfer = {"from_wallet": wallet, "to_wallet_number": receiver, "amount": AMOUNT_MINOR}
                body = json.dumps(transfer)
                headers = {
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/json",
                    "Idempotency-Key": str(uuid.uuid4()),
                }
                started = time.perf_counter()
                try:
                    status, answer = await conn.request("POST", "/v1/transfers", headers, body.encode())
                    ok = status == 201 and json.loads(answer)["status"] == "posted"
                    reason = str(status)
                except (httpload.HttpLoadError, OSError, TimeoutError) as exc:
                    ok, reason = False, type(exc).__name__
                if ok:
                    latencies.append((time.perf_counter() - started) * 1000)
                else:
                    errors[reason] = errors.get(reason, 0) + 1
        finally:
            conn.close()

    async def sample() -> None:
        nonlocal peak, peak_total
        while time.monotonic() < deadline:
            largest, total = rss_tree_mb(pid)
            peak, peak_total = max(peak, largest), max(peak_total, total)
            await asyncio.sleep(0.2)

    server = [pid, *_children(pid)]

    def cpu_now() -> tuple[float, float, float]:
        return process_cpu_s(), pids_cpu_s(server), machine_busy_s()

    cpu_before = cpu_now()
    started = time.monotonic()
    await asyncio.gather(sample(), *(worker(i) for i in range(concurrency)))
    elapsed = time.monotonic() - started
    client_s, server_s, machine_s = (
        after - before for after, before in zip(cpu_now(), cpu_before, strict=True)
    )
    per = max(len(latencies), 1)
    largest, total = rss_tree_mb(pid)
    peak, peak_total = max(peak, largest), max(peak_total, total)
    return {
        "concurrency": concurrency,
        "transfers": len(latencies),
        "transfers_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(pct(latencies, 0.50), 2),
        "p99_ms": round(pct(latencies, 0.99), 2),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "rss_mb": round(peak, 1),  # the largest wallet-api process
        "rss_total_mb": round(peak_total, 1),  # all of them, with uvicorn's supervisor
        # where the CPU went, per transfer: wallet-api's processes, this (client) process, and
        # the whole machine (the rest is mostly PostgreSQL)
        "server_cpu_us": round(server_s / per * 1e6),
        "client_cpu_us": round(client_s / per * 1e6),
        "machine_cpu_us": round(machine_s / per * 1e6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument(
        "--to-businesses", action="store_true", help="payments to businesses (each with its merchant event)"
    )
    args = parser.parse_args()
    benchlog.to_file()
    for c in args.concurrency:
        result = uvloop.run(measure(c, args.duration, to_businesses=args.to_businesses))
        print(json.dumps({**result, "to_businesses": args.to_businesses}), flush=True)


if __name__ == "__main__":
    main()
