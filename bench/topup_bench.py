"""The top-up path's benchmark (docs/performance.md): one command, every figure measured in the
same run on the same machine, reported as ratios and as targets met.

    make bench-topup              # or: .venv/bin/python bench/topup_bench.py [--duration 10]
    make bench                    # the ledger's benchmark, then this one

(a) Verified and stored webhooks per second at topup-webhook (``hiwallet run topup-webhook``,
    one process, its relay inside it publishing to RabbitMQ) at concurrency 16, beside a bare
    FastAPI endpoint (bench/bare_webhook.py) that only checks an HMAC over the raw body and
    inserts a row. Target: ≥ 0.7 × the bare shape. Both servers run side by side and are loaded
    in turn, in short rounds (``--rounds``, ABBA order: bare, topup, topup, bare, …), and the
    figure is the median of the rounds' ratios (with the spread). A measurement fix, not a
    change of target: run one after the other, ten seconds each, the machine's noise between
    the two runs moved the ratio by ±0.15 (the bare shape alone 2,119-2,745/s in three runs).
(b) From the provider's webhook to the line in the ledger: p50 and p99 at a fixed rate (1,000
    per second for 30 s by default; open loop: each request's latency counts from the moment it
    was due, not from when a connection was free, so a server falling behind shows as latency),
    through topup-webhook, its relay, RabbitMQ and wallet-consumer. The outbox's unsent rows and
    the queues' depth are sampled every second: flat means keeping up. Target: p99 < 250 ms.
(c) Peak resident memory (VmHWM) of each new process: topup-webhook, wallet-consumer,
    stripe-fake, bank-fake (the fakes after a few payments each). Target: < 150 MB.

The load client signs in the client (as the provider does) and speaks raw HTTP/1.1 on
keep-alive connections (bench/httpload.py). ``--only bare`` runs the bare shape alone.
Results as JSON in bench/results/topup-<time>.json. Everything it starts it stops; it makes
and drops its own databases and RabbitMQ virtual host.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import asyncpg
import httpx
import uvloop

import benchlog
import httpload
import pacing
from cpu import machine_busy_s, pids_cpu_s, process_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings

HERE = Path(__file__).parent
SECRET = "whsec_dev_stripe_fake_0123456789abcdef"
STRIPE_API_KEY = "sk_test_hiwallet_dev"
BANK_API_KEY = "bank_dev_key"
WEBHOOK_PATH = "/v1/webhooks/topup/stripe"
BARE_PATH = "/bare/stripe"
AMOUNT_MINOR = 1_000
WALLETS = 200
READY_TIMEOUT_S = 60.0
WARM_UP_S = 1.0  # each shape of (a), untimed, before its rounds
CALL_IDS = 100_000  # payment ids apart for each call of (a); (b)'s start at 10,000,000
DRAIN_TIMEOUT_S = 120.0
# (b)'s open loop sends on at most this many connections at once (--connections): a request
# due while all are busy waits for one, and its latency counts that wait. Past
# connections / (the server's answer time) per second the client, not the path, is the bound
# (2026-12-06: 64 connections at 47 ms answers capped 2,000/s at ~1,360/s).
CONNECTIONS_OPEN_LOOP = 64
PARTITIONS = tuple(f"hiwallet.topups.p{i}" for i in range(4))
TARGETS = {"topup_vs_bare_c16": 0.7, "latency_p99_ms_max": 250.0, "rss_mb_max": 150.0}
# The services' log lines go to the run's log file (bench/benchlog.py), not to the terminal.
SERVICE_LOG = benchlog.LOG


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the peak resident memory of ``pid`` so far (0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# ---------------------------------------------------------------------------------------------
# Requests: a Stripe-shaped event, signed in the client
# ---------------------------------------------------------------------------------------------


def signed_event(wallet: str, payment_intent: str, secret: bytes) -> tuple[dict[str, str], bytes]:
    """A ``payment_intent.succeeded`` event (CONTRACT-10's shape) and its headers."""
    now = int(time.time())
    body = json.dumps(
        {
            "id": f"evt_{uuid.uuid4().hex[:24]}",
            "object": "event",
            "api_version": "2024-06-20",
            "created": now,
            "livemode": False,
            "pending_webhooks": 1,
            "type": "payment_intent.succeeded",
            "data": {
                "object": {
                    "id": payment_intent,
                    "object": "payment_intent",
                    "status": "succeeded",
                    "amount": AMOUNT_MINOR,
                    "amount_received": AMOUNT_MINOR,
                    "currency": "try",
                    "metadata": {"wallet": wallet},
                    "created": now,
                }
            },
        },
        separators=(",", ":"),
    ).encode()
    digest = hmac.new(secret, f"{now}.".encode() + body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "Stripe-Signature": f"t={now},v1={digest}"}
    return headers, body


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


class Child:
    """A process of the benchmark in its own process group, its log appended to ``log_path``
    (bench/withdrawal_bench.py runs its services through this class too)."""

    def __init__(
        self,
        name: str,
        port: int,
        argv: list[str],
        env: dict[str, str],
        ready_path: str = "/ready",
        *,
        log_path: Path = SERVICE_LOG,
        ready_timeout_s: float = READY_TIMEOUT_S,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.name, self.port, self.ready_path = name, port, ready_path
        self.log_path, self.ready_timeout_s, self.stop_timeout_s = log_path, ready_timeout_s, stop_timeout_s
        with log_path.open("ab") as log:
            # Its own process group: whatever it starts goes with it.
            self.proc = subprocess.Popen(
                argv, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True
            )
        self.peak_mb = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        async with httpx.AsyncClient(timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode} (log: {self.log_path})"
                    )
                with suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}{self.ready_path}")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready in {self.ready_timeout_s} s (log: {self.log_path})")

    def sample(self) -> float:
        self.peak_mb = max(self.peak_mb, peak_rss_mb(self.proc.pid))
        return self.peak_mb

    def stop(self) -> None:
        self.sample()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def hiwallet(name: str, env: dict[str, str]) -> Child:
    port = free_port()
    argv = [sys.executable, "-m", "hiwallet.cli", "run", name, "--port", str(port)]
    return Child(name, port, argv, env)


# ---------------------------------------------------------------------------------------------
# Load
# ---------------------------------------------------------------------------------------------


async def closed_loop(
    port: int,
    path: str,
    concurrency: int,
    duration_s: float,
    request: Callable[[int], tuple[dict[str, str], bytes]],
    latencies: list[float] | None = None,
) -> dict[str, Any]:
    """``concurrency`` connections, one request in flight each, as fast as answered;
    ``latencies`` (ms) are appended to the list given, for merging rounds."""
    latencies = [] if latencies is None else latencies
    first = len(latencies)
    statuses: dict[int, int] = {}
    deadline = time.perf_counter() + duration_s
    counter = 0

    async def worker() -> None:
        nonlocal counter
        conn = httpload.Connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                counter += 1
                headers, body = request(counter)
                start = time.perf_counter()
                status, _ = await conn.request("POST", path, headers, body)
                latencies.append((time.perf_counter() - start) * 1000)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            conn.close()

    cpu_before, busy_before = process_cpu_s(), machine_busy_s()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    ok = statuses.get(202, 0) + statuses.get(200, 0)
    return {
        "concurrency": concurrency,
        "requests_per_s": round(ok / elapsed, 1),
        "ok": ok,
        "elapsed_s": round(elapsed, 3),
        "p50_ms": round(pct(latencies[first:], 0.5), 2),
        "p99_ms": round(pct(latencies[first:], 0.99), 2),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "client_cpu_share": round(
            (process_cpu_s() - cpu_before) / max(machine_busy_s() - busy_before, 1e-9), 2
        ),
    }


async def open_loop(
    port: int,
    rate: int,
    duration_s: float,
    request: Callable[[int], tuple[dict[str, str], bytes]],
    connections: int = CONNECTIONS_OPEN_LOOP,
) -> tuple[dict[int, float], dict[int, int]]:
    """Request ``i`` is due at start + i/rate, sent on one of ``connections`` connections.
    Returns {i: the wall time it was due} of those answered 2xx, and the count per status."""
    free: asyncio.Queue[httpload.Connection] = asyncio.Queue()
    for _ in range(connections):
        free.put_nowait(httpload.Connection("127.0.0.1", port))
    due: dict[int, float] = {}
    statuses: dict[int, int] = {}

    async def send(i: int, due_wall: float) -> None:
        conn = await free.get()
        try:
            headers, body = request(i)
            status, _ = await conn.request("POST", WEBHOOK_PATH, headers, body)
        except httpload.HttpLoadError:
            status = 0
        finally:
            free.put_nowait(conn)
        statuses[status] = statuses.get(status, 0) + 1
        if 200 <= status < 300:
            due[i] = due_wall

    await pacing.open_loop(rate, duration_s, send)
    while not free.empty():
        free.get_nowait().close()
    return due, statuses


# ---------------------------------------------------------------------------------------------
# Set-up
# ---------------------------------------------------------------------------------------------


async def rabbitmqctl(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec("rabbitmqctl", "-q", *args, stdout=asyncio.subprocess.DEVNULL)
    if await asyncio.wait_for(proc.wait(), 60) != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed")


async def drop(*names: str) -> None:
    conn = await asyncpg.connect(db.owner_dsn("postgres", get_settings()))
    try:
        for name in names:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def open_wallets(database: str, count: int) -> list[str]:
    from hiwallet.ledger import Fees, LedgerStore, init_connection
    from hiwallet.wallet_api.service import WalletService
    from hiwallet.wallet_api.settings import WalletApiSettings

    pool = await db.create_pool(
        database, role=db.app_role("wallet"), min_size=1, max_size=8, init=init_connection
    )
    try:
        store = LedgerStore.from_settings(pool)
        service = WalletService(pool, store, Fees.from_settings(), WalletApiSettings())
        wallets: list[str] = []

        async def opener(n: int) -> None:
            for _ in range(n):
                account = await service.open_business("Bench Kahve", operator="operator:bench")
                wallets.append(account["wallets"][0]["id"])

        await asyncio.gather(*(opener(count // 8) for _ in range(8)))
        return wallets
    finally:
        await pool.close()


# ---------------------------------------------------------------------------------------------
# The runs
# ---------------------------------------------------------------------------------------------


class Shape:
    """One shape of (a), loaded in rounds; its rounds merged into one closed-loop result."""

    def __init__(
        self,
        port: int,
        path: str,
        request: Callable[[int], tuple[dict[str, str], bytes]],
        pid: int,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.port, self.path, self.request, self.pid = port, path, request, pid
        # After each round, untimed: what the round left to do in the background (topup-webhook's
        # relay publishing what it stored) would otherwise load the other shape's next round.
        self.settle = settle
        self.calls = 0  # each call's requests get ids of their own: a repeat is a cheaper duplicate
        self.rounds: list[dict[str, Any]] = []
        self.latencies: list[float] = []
        self.cpu_s = 0.0

    def ids(self) -> Callable[[int], tuple[dict[str, str], bytes]]:
        base, self.calls = self.calls * CALL_IDS, self.calls + 1
        return lambda i: self.request(base + i)

    async def round(self, args: argparse.Namespace) -> dict[str, Any]:
        before = pids_cpu_s([self.pid])
        result = await closed_loop(
            self.port, self.path, args.concurrency, args.duration / args.rounds, self.ids(), self.latencies
        )
        self.cpu_s += pids_cpu_s([self.pid]) - before
        self.rounds.append(result)
        if self.settle is not None:
            await self.settle()
        return result

    async def warm_up(self, args: argparse.Namespace) -> None:
        """One untimed round: the first round's ratio was the lowest in every run (0.68, 0.74,
        0.93 against medians 0.83-1.13), the servers' pools and caches still filling."""
        await closed_loop(self.port, self.path, args.concurrency, WARM_UP_S, self.ids())
        if self.settle is not None:
            await self.settle()

    def merged(self) -> dict[str, Any]:
        ok, elapsed = sum(r["ok"] for r in self.rounds), sum(r["elapsed_s"] for r in self.rounds)
        statuses: dict[str, int] = {}
        for r in self.rounds:
            for k, v in r["statuses"].items():
                statuses[k] = statuses.get(k, 0) + v
        return {
            "concurrency": self.rounds[0]["concurrency"],
            "requests_per_s": round(ok / max(elapsed, 1e-9), 1),
            "p50_ms": round(pct(self.latencies, 0.5), 2),
            "p99_ms": round(pct(self.latencies, 0.99), 2),
            "statuses": dict(sorted(statuses.items())),
            "client_cpu_share": round(sum(r["client_cpu_share"] for r in self.rounds) / len(self.rounds), 2),
            "cpu_s_server": round(self.cpu_s, 1),
            "rounds_requests_per_s": [r["requests_per_s"] for r in self.rounds],
        }


class Bare:
    """The bare shape's server (bench/bare_webhook.py), up for the whole of (a)."""

    def __init__(self) -> None:
        self.name = f"hiwallet_bench_bare_{os.getpid()}"
        self.child: Child | None = None
        self.shape: Shape | None = None

    async def start(self) -> Shape:
        await drop(self.name)
        await db.ensure_database(self.name)
        port = free_port()
        self.child = Child(
            "bare",
            port,
            [sys.executable, str(HERE / "bare_webhook.py"), str(port), db.owner_dsn(self.name), SECRET],
            dict(os.environ),
        )
        await self.child.ready()
        secret = SECRET.encode()
        self.shape = Shape(
            port, BARE_PATH, lambda i: signed_event("w", f"pi_{i}", secret), self.child.proc.pid
        )
        return self.shape

    async def stop(self, report: dict[str, Any]) -> None:
        """Idempotent: the bare shape's merged result into the report, the server and its database gone."""
        if self.child is None:
            return
        child, self.child = self.child, None
        if self.shape is not None and self.shape.rounds:
            report["bare_c16"] = self.shape.merged() | {"rss_mb": round(child.sample(), 1)}
        child.stop()
        await drop(self.name)


async def interleaved(
    args: argparse.Namespace,
    report: dict[str, Any],
    bare: Shape,
    topup: Shape | None,
    after: Shape | None = None,
) -> None:
    """(a) in rounds, ABBA (bare, topup, topup, bare, …) so that neither shape always runs
    first after the other; a round's ratio is its topup over the bare round beside it. With
    ``after`` (a second topup-webhook, ``--after-env``), three shapes whose order rotates each
    round, and its ratios to the bare shape and to the first topup-webhook too."""
    if topup is not None and after is not None:
        await three_shapes(args, report, bare, topup, after)
        return
    label = "bare FastAPI alone" if topup is None else "bare FastAPI and topup-webhook in turn"
    print(
        f"(a) {label}, {args.rounds} rounds of {args.duration / args.rounds:g} s, c{args.concurrency} ...",
        flush=True,
    )
    ratios: list[float] = []
    shapes = (bare,) if topup is None else (bare, topup)
    with benchlog.phase("(a)", len(shapes) * (WARM_UP_S + args.duration)):
        for shape in shapes:
            await shape.warm_up(args)
        for n in range(args.rounds):
            if topup is None:
                await bare.round(args)
                continue
            if n % 2 == 0:
                b, t = await bare.round(args), await topup.round(args)
            else:
                t, b = await topup.round(args), await bare.round(args)
            ratios.append(round(t["requests_per_s"] / max(b["requests_per_s"], 1e-9), 3))
            print(f"  round {n + 1}: bare {b['requests_per_s']}/s, topup {t['requests_per_s']}/s", flush=True)
    if topup is not None:
        report["topup_webhook_c16"] = topup.merged()
        report["a_rounds"] = {"rounds": args.rounds, "round_s": args.duration / args.rounds, "ratios": ratios}


async def three_shapes(
    args: argparse.Namespace, report: dict[str, Any], bare: Shape, topup: Shape, after: Shape
) -> None:
    """(a) with a second topup-webhook (a setting against another): bare, topup, after, the
    order rotating each round; per round after/bare, topup/bare and after/topup."""
    print(
        f"(a) bare, topup-webhook and after in turn, {args.rounds} rounds, c{args.concurrency} ...",
        flush=True,
    )
    shapes = {"bare": bare, "topup": topup, "after": after}
    names = list(shapes)
    rounds: dict[str, list[float]] = {"topup_vs_bare": [], "after_vs_bare": [], "after_vs_topup": []}
    with benchlog.phase("(a)", len(shapes) * (WARM_UP_S + args.duration)):
        for shape in shapes.values():
            await shape.warm_up(args)
        for n in range(args.rounds):
            got = {}
            for name in names[n % 3 :] + names[: n % 3]:
                got[name] = (await shapes[name].round(args))["requests_per_s"]
            rounds["topup_vs_bare"].append(round(got["topup"] / max(got["bare"], 1e-9), 3))
            rounds["after_vs_bare"].append(round(got["after"] / max(got["bare"], 1e-9), 3))
            rounds["after_vs_topup"].append(round(got["after"] / max(got["topup"], 1e-9), 3))
            print(f"  round {n + 1}: " + ", ".join(f"{k} {v}/s" for k, v in got.items()), flush=True)
    report["topup_webhook_c16"] = topup.merged()
    report["after_c16"] = after.merged() | {"env": args.after_env}
    report["a_rounds"] = {
        "rounds": args.rounds,
        "round_s": args.duration / args.rounds,
        "ratios": rounds["topup_vs_bare"],
        "after": {
            k: {
                "median": round(statistics.median(v), 3),
                "spread": [min(v), max(v)],
                "rounds": v,
            }
            for k, v in rounds.items()
        },
    }


class Sampler:
    """The outbox's unsent rows and the queues' depth, every second."""

    def __init__(self, topup_db: str, amqp: str) -> None:
        self.topup_db, self.amqp = topup_db, amqp
        self.samples: list[dict[str, float]] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        conn = await asyncpg.connect(db.owner_dsn(self.topup_db))
        broker = await aio_pika.connect(self.amqp, timeout=10)
        channel = await broker.channel()
        started = time.monotonic()
        try:
            while not self.stop.is_set():
                unsent = await conn.fetchval("SELECT count(*) FROM topup.outbox WHERE sent_at IS NULL")
                depth = 0
                for name in PARTITIONS:
                    queue = await channel.declare_queue(name, passive=True)
                    depth += int(queue.declaration_result.message_count or 0)
                self.samples.append(
                    {
                        "t_s": round(time.monotonic() - started, 1),
                        "outbox_unsent": unsent,
                        "queue_depth": depth,
                    }
                )
                with suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), 1.0)
        finally:
            await broker.close()
            await conn.close()


async def services(args: argparse.Namespace, report: dict[str, Any], bare: Bare) -> None:
    pid = os.getpid()
    topup_db, wallet_db = f"hiwallet_bench_topup_{pid}", f"hiwallet_bench_wallet_{pid}"
    after_db = f"hiwallet_bench_topup_after_{pid}"
    vhost = f"hiwallet-bench-{pid}"
    amqp = f"amqp://guest:guest@127.0.0.1:{args.amqp_port}/{vhost}"
    await drop(topup_db, wallet_db, after_db)
    await databases.migrate("topup", database=topup_db)
    await databases.migrate("wallet", database=wallet_db)
    await rabbitmqctl("add_vhost", vhost)
    await rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    base = {**os.environ, "HIWALLET_AMQP_URL": amqp}
    children: list[Child] = []
    secret = SECRET.encode()
    try:
        print(f"opening {WALLETS} wallets ...", flush=True)
        wallets = await open_wallets(wallet_db, WALLETS)
        stripe_port, bank_port = free_port(), free_port()
        webhook_env = {
            **base,
            "HIWALLET_TOPUP_DATABASE": topup_db,
            "HIWALLET_TOPUP_STRIPE_URL": f"http://127.0.0.1:{stripe_port}",
            "HIWALLET_TOPUP_BANK_URL": f"http://127.0.0.1:{bank_port}",
        }
        webhook = hiwallet(
            "topup-webhook", {**webhook_env, **dict(kv.split("=", 1) for kv in args.before_env or [])}
        )
        children.append(webhook)
        await webhook.ready()

        def request(i: int) -> tuple[dict[str, str], bytes]:
            return signed_event(wallets[i % len(wallets)], f"pi_bench_{pid}_{i}", secret)

        def relay_sent(database: str) -> Callable[[], Awaitable[None]]:
            return lambda: _relay_sent(database)

        async def _relay_sent(database: str) -> None:
            conn = await asyncpg.connect(db.owner_dsn(database))
            try:
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while await conn.fetchval("SELECT count(*) FROM topup.outbox WHERE sent_at IS NULL"):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the relay did not send (a)'s messages")
                    await asyncio.sleep(0.1)
            finally:
                await conn.close()

        topup = Shape(webhook.port, WEBHOOK_PATH, request, webhook.proc.pid, settle=relay_sent(topup_db))
        after = None
        if args.after_env:  # a second topup-webhook, on a database of its own, with the setting
            await databases.migrate("topup", database=after_db)
            second = hiwallet(
                "topup-webhook",
                {
                    **webhook_env,
                    "HIWALLET_TOPUP_DATABASE": after_db,
                    **dict(kv.split("=", 1) for kv in args.after_env),
                },
            )
            children.append(second)
            await second.ready()
            after = Shape(second.port, WEBHOOK_PATH, request, second.proc.pid, settle=relay_sent(after_db))
        await interleaved(args, report, await bare.start(), topup, after)
        await bare.stop(report)  # not idle beside (b)
        print(f"  bare {report['bare_c16']}\n  topup-webhook {report['topup_webhook_c16']}", flush=True)
        if args.only == "a" or args.after_env:
            report["rss_mb"] = {webhook.name: round(webhook.sample(), 1)}
            return

        # The relay sent what (a) stored (each round settled); no consumer ran, so the queues
        # hold it: drop it, so that (b) measures its own messages only.
        broker = await aio_pika.connect(amqp, timeout=10)
        try:
            channel = await broker.channel()
            for name in PARTITIONS:
                await (await channel.declare_queue(name, passive=True)).purge()
        finally:
            await broker.close()

        consumer = hiwallet("wallet-consumer", {**base, "HIWALLET_WALLET_CONSUMER_DATABASE": wallet_db})
        children.append(consumer)
        await consumer.ready()

        offset = 10_000_000  # payment ids apart from (a)'s
        print(f"(b) webhook -> ledger line at {args.rate}/s for {args.latency_duration} s ...", flush=True)
        sampler = Sampler(topup_db, amqp)
        sampling = asyncio.create_task(sampler.run())
        # Where the CPU went: each service's share of one core over the whole of (b), its
        # drain included (near 1.0: that process is the bound, one core being all it can use).
        cpu_before = {c.name: pids_cpu_s([c.proc.pid]) for c in (webhook, consumer)}
        started = time.monotonic()
        with benchlog.phase("(b)", args.latency_duration):
            due, statuses = await open_loop(
                webhook.port,
                args.rate,
                args.latency_duration,
                lambda i: request(offset + i),
                args.connections,
            )
        sent_done = time.monotonic()
        latency = await ledger_latencies(
            wallet_db, {f"pi_bench_{pid}_{offset + i}": t for i, t in due.items()}
        )
        sampler.stop.set()
        await sampling
        latency["statuses"] = {str(k): v for k, v in sorted(statuses.items())}
        latency["drain_after_load_s"] = round(time.monotonic() - sent_done, 1)
        elapsed_s = time.monotonic() - started
        latency["cpu_share_of_a_core"] = {
            c.name: round((pids_cpu_s([c.proc.pid]) - cpu_before[c.name]) / elapsed_s, 2)
            for c in (webhook, consumer)
        }
        latency["samples"] = sampler.samples
        report["latency"] = latency
        print(f"  { {k: v for k, v in latency.items() if k != 'samples'} }", flush=True)
        flat = [(s["outbox_unsent"], s["queue_depth"]) for s in sampler.samples]
        print(f"  outbox unsent / queue depth each second: {flat}", flush=True)

        print("(c) the fakes: a few payments through each ...", flush=True)
        stripe = Child(
            "stripe-fake",
            stripe_port,
            [sys.executable, "-m", "hiwallet.cli", "run", "stripe-fake", "--port", str(stripe_port)],
            {**os.environ, "STRIPE_FAKE_WEBHOOK_URL": f"{webhook.url}/v1/webhooks/topup/stripe"},
            "/health",  # the fakes have nothing to be ready for
        )
        bank = Child(
            "bank-fake",
            bank_port,
            [sys.executable, "-m", "hiwallet.cli", "run", "bank-fake", "--port", str(bank_port)],
            {**os.environ, "BANK_FAKE_WEBHOOK_URL": f"{webhook.url}/v1/webhooks/topup/bank"},
            "/health",
        )
        children += [stripe, bank]
        await asyncio.gather(stripe.ready(), bank.ready())
        async with httpx.AsyncClient(timeout=10) as client:
            for i in range(args.fake_payments):
                wallet = wallets[i % len(wallets)]
                paid = await client.post(
                    f"{stripe.url}/v1/topups",
                    data={"wallet": wallet, "amount": str(AMOUNT_MINOR), "currency": "try"},
                    headers={"Authorization": f"Bearer {STRIPE_API_KEY}"},
                )
                paid.raise_for_status()
                wired = await client.post(
                    f"{bank.url}/v1/topups",
                    json={
                        "sender_name": "Bench Sender",
                        "sender_iban": "TR330006100519786457841326",
                        "reference": f"HiWallet {wallet}",
                        "amount_minor": AMOUNT_MINOR,
                        "currency": "TRY",
                    },
                    headers={"Authorization": f"Bearer {BANK_API_KEY}"},
                )
                wired.raise_for_status()
        await asyncio.sleep(2)  # the fakes' notifications go out moments after the payments
        report["rss_mb"] = {child.name: round(child.sample(), 1) for child in children}
        print(f"(c) peak RSS: {report['rss_mb']}", flush=True)
    finally:
        for child in children:
            child.stop()
        with suppress(Exception):
            await rabbitmqctl("delete_vhost", vhost)
        await drop(topup_db, wallet_db, after_db)


async def ledger_latencies(wallet_db: str, due: dict[str, float]) -> dict[str, Any]:
    """Wait until every answered payment has its ledger line (or the bound), then each one's
    latency: the ledger transaction's posted_at (PostgreSQL's clock, this machine's) minus the
    moment its webhook was due."""
    conn = await asyncpg.connect(db.owner_dsn(wallet_db))
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        rows: list[asyncpg.Record] = []
        while time.monotonic() < deadline:
            rows = await conn.fetch(
                "SELECT ref, extract(epoch FROM posted_at)::float8 AS at FROM ledger.transactions"
                " WHERE type = 'topup' AND ref LIKE 'pi_bench_%'"
            )
            if sum(1 for r in rows if r["ref"] in due) >= len(due):
                break
            await asyncio.sleep(0.5)
    finally:
        await conn.close()
    latencies = [(r["at"] - due[r["ref"]]) * 1000 for r in rows if r["ref"] in due]
    refs = [r["ref"] for r in rows if r["ref"] in due]
    posted_at = [r["at"] for r in rows if r["ref"] in due]
    # What the path sustained end to end: lines posted per second, from the first due webhook
    # to the last line (below the offered rate = falling behind).
    span_s = (max(posted_at) - min(due.values())) if posted_at and due else 0.0
    return {
        "rate_per_s": len(due) and round(len(due) / (max(due.values()) - min(due.values()) + 1e-9), 1),
        "answered": len(due),
        "posted": len(latencies),
        "posted_twice": len(refs) - len(set(refs)),
        "posted_per_s": round(len(posted_at) / span_s, 1) if span_s > 0 else 0.0,
        "p50_ms": round(pct(latencies, 0.5), 1),
        "p99_ms": round(pct(latencies, 0.99), 1),
        "max_ms": round(max(latencies, default=0.0), 1),
    }


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    checks: dict[str, bool] = {}
    if "topup_webhook_c16" in report and "bare_c16" in report:
        # The figure: the median of the rounds' ratios; the ratio of the totals beside it.
        rounds = sorted(report.get("a_rounds", {}).get("ratios", []))
        totals = report["topup_webhook_c16"]["requests_per_s"] / report["bare_c16"]["requests_per_s"]
        out["topup_vs_bare_c16"] = round(statistics.median(rounds) if rounds else totals, 2)
        out["topup_vs_bare_c16_of_totals"] = round(totals, 2)
        if rounds:
            out["topup_vs_bare_c16_spread"] = [round(rounds[0], 2), round(rounds[-1], 2)]
        checks["topup_vs_bare_c16"] = out["topup_vs_bare_c16"] >= TARGETS["topup_vs_bare_c16"]
    if "latency" in report:
        latency = report["latency"]
        out |= {"latency_p50_ms": latency["p50_ms"], "latency_p99_ms": latency["p99_ms"]}
        checks["latency_p99_ms"] = latency["p99_ms"] < TARGETS["latency_p99_ms_max"] and (
            latency["posted"] == latency["answered"]
        )
        checks["posted_once"] = latency["posted_twice"] == 0
    if "after" in report.get("a_rounds", {}):
        out["after"] = {k: v["median"] for k, v in report["a_rounds"]["after"].items()} | {
            k + "_spread": v["spread"] for k, v in report["a_rounds"]["after"].items()
        }
    if "rss_mb" in report:
        out["rss_mb_max"] = max(report["rss_mb"].values())
        checks["rss_mb"] = out["rss_mb_max"] < TARGETS["rss_mb_max"]
    out["targets_met"] = checks
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": args.duration,
        "machine": {"cores": os.cpu_count(), "load_before": os.getloadavg()},
        "note": "one machine shared by the load client, the services, PostgreSQL and RabbitMQ",
    }
    bare = Bare()
    try:
        if args.only == "bare":
            await interleaved(args, report, await bare.start(), None)
        else:  # "a": both shapes of (a), nothing more
            await services(args, report, bare)
    except Exception as exc:  # the figures measured so far are kept, with what stopped the run
        report["failed"] = f"{type(exc).__name__}: {exc}"
    finally:
        await bare.stop(report)
    report["ratios"] = ratios(report)
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--duration", type=float, default=10, help="seconds of each shape in (a), all rounds (default 10)"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="(a)'s rounds of each shape, in turn, --duration split among them",
    )
    parser.add_argument("--rate", type=int, default=1000, help="webhooks per second in (b) (default 1000)")
    parser.add_argument("--latency-duration", type=float, default=30, help="seconds of (b) (default 30)")
    parser.add_argument(
        "--connections",
        type=int,
        default=CONNECTIONS_OPEN_LOOP,
        help=f"(b)'s connections at most (default {CONNECTIONS_OPEN_LOOP}); at 2,000/s more than the"
        " default, or the client's own wait for a free one is what is measured",
    )
    parser.add_argument("--fake-payments", type=int, default=50, help="payments through each fake in (c)")
    parser.add_argument(
        "--only", choices=["bare", "a"], help="only the bare shape of (a), or only (a) (both shapes)"
    )
    parser.add_argument(
        "--amqp-port",
        type=int,
        default=5672,
        help="the RabbitMQ to run on (default 5672, the machine's); with --rabbit-node, a node of its own"
        " (one with the consistent-hash exchange plugin, when the machine's has not got it enabled)",
    )
    parser.add_argument(
        "--rabbit-node", help="that node's name for rabbitmqctl, e.g. hiwallet-saga@localhost"
    )
    parser.add_argument(
        "--after-env",
        nargs="+",
        metavar="KEY=VALUE",
        help="(a) only, with a second topup-webhook given this environment (a setting) in the same"
        " rounds, e.g. HIWALLET_TOPUP_INGEST_PARTS=2",
    )
    parser.add_argument(
        "--before-env", nargs="+", metavar="KEY=VALUE", help="the first topup-webhook's extra environment"
    )
    args = parser.parse_args()
    if args.rabbit_node:
        os.environ["RABBITMQ_NODENAME"] = args.rabbit_node  # rabbitmqctl's node, as -n says
    benchlog.to_file()
    report = uvloop.run(main(args))
    path = benchlog.save("topup", report)
    print(json.dumps(report["ratios"], indent=2))
    print(f"results: {path}")
    if "failed" in report:
        print(f"the run stopped early: {report['failed']}")
        sys.exit(1)


if __name__ == "__main__":
    cli()
