"""The withdrawal saga's benchmark (docs/performance.md): one command, every figure measured in the
same run on the same machine.

    make bench-withdrawal         # or: .venv/bin/python bench/withdrawal_bench.py [--duration 30]
    make bench                    # the ledger's and the top-up path's benchmarks, then this one

The whole saga as real processes, each ``hiwallet run NAME`` as it runs in production:
withdrawal-orchestrator, wallet-consumer, bank-adapter, bank-webhook and bank-fake (the bank
deciding each transfer at once and calling back then: ``BANK_FAKE_TRANSFER_DECIDE_AFTER_S=0``,
``BANK_FAKE_NOTIFY_AFTER_S=0``), the customer realm's identity service for real tokens, on
databases of their own (wallet, withdrawal, bank, identity) and a RabbitMQ virtual host of
their own. ``--customers`` people (200 by default), each with a
personal Verified account funded in the ledger and a token from the password grant, withdraw
from their own wallets.

(i) Withdrawals completed per second, end to end (POST /v1/withdrawals -> debit at
    wallet-consumer -> bank-adapter -> bank-fake -> its callback at bank-webhook -> settle ->
    completed), saturating: the load keeps ``--window`` sagas unfinished at all times (a closed
    loop over whole sagas, not over requests: requests alone would pile an unbounded backlog
    into the queues). The figure is completions per second after the warm-up (the first fifth).
    Target: >= 400 per second (issue 26; 200 before it).
(ii) The time from the request to completed, p50 and p99, at a fixed rate of half of (i) (open
    loop: each request's time counts from the moment it was due; the completed time is the
    saga's ``state_changed_at``, PostgreSQL's clock on this machine). Every second the unsent
    rows of the three outboxes (withdrawal, wallet, bank) and the depth of the three queues
    (hiwallet.withdrawals.wallet, .bank, .orchestrator) are sampled: flat means keeping up.
    Target: p99 < 500 ms (issue 26; 1 s before it).
(iii) Peak resident memory (VmHWM) of each process. Target: < 150 MB for each new one
    (withdrawal-orchestrator, bank-adapter, bank-webhook).

Where the time goes: each process's CPU as a share of one core during (i) and (ii) (near 1.0:
that process is the bound, one core being all its event loop can use), PostgreSQL's and
RabbitMQ's too; each saga consumer's messages a second and its cycle (one message's
transaction to the next one's); the services' database sessions (pg_stat_activity, every 50 ms);
with py-spy (``--py-spy PATH``, found on the PATH or in the venv by default) a 5 s profile of
withdrawal-orchestrator and wallet-consumer in the middle of (i) (how much of the time their
event loop waited, and on what the rest went).

The targets are reported, not asserted. The run ends with ``ledger verify`` over the wallet
database and the sagas counted by state (every one completed, none twice at the bank). Results
as JSON in bench/results/withdrawal-<time>.json. Everything it starts it stops; it makes and
drops its own databases and RabbitMQ virtual host.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import sys
import time
import uuid
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
from cpu import pids_cpu_s
from hiwallet.contracts import databases
from hiwallet.contracts.withdrawals import BANK_QUEUE, ORCHESTRATOR_QUEUE, WALLET_QUEUE
from hiwallet.core import db
from topup_bench import Child, drop, free_port, pct, rabbitmqctl

SERVICE_LOG = benchlog.LOG  # the services' log lines: the run's log file (bench/benchlog.py)
READY_TIMEOUT_S = 90.0
DRAIN_TIMEOUT_S = 180.0
AMOUNT_MINOR = 1_000  # 10.00 TRY: far below the review threshold and the monthly limit
FUNDS_MINOR = 5_000_000_00  # each customer's money: many thousand withdrawals
PASSWORD = "bench-withdrawal-password"
ONBOARDING_SECRET = os.environ.get("HIWALLET_IDENTITY_SECRET_ONBOARDING", "dev-onboarding-secret")
DESTINATIONS = ("TR330006100519786457841326", "DE89370400440532013000", "GB29NWBK60161331926819")
QUEUES = (WALLET_QUEUE, BANK_QUEUE, ORCHESTRATOR_QUEUE)
OUTBOXES = {"withdrawal": "withdrawal.outbox", "wallet": "wallet.outbox", "bank": "bank.outbox"}
TERMINAL = ("completed", "failed", "rejected", "cancelled")
NEW_PROCESSES = ("withdrawal-orchestrator", "bank-adapter", "bank-webhook")
TARGETS = {"completed_per_s_min": 400.0, "latency_p99_ms_max": 500.0, "rss_mb_max": 150.0}  # issue 26
CONNECTIONS = 64  # HTTP connections to the orchestrator at most (open loop)


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


class Proc(Child):
    """``hiwallet run NAME --port PORT`` in its own process group, its log appended to
    SERVICE_LOG (topup_bench.Child: readiness, peak memory, stop)."""

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


def pids_named(*names: str) -> list[int]:
    """The pids of processes whose command name is one of ``names`` (PostgreSQL's backends,
    RabbitMQ's beam): their CPU, the machine's, includes other users' work."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                if (entry / "comm").read_text().strip() in names:
                    found.append(int(entry.name))
    return found


class Cpu:
    """Each process's CPU over a phase, as a share of one core."""

    def __init__(self, procs: list[Proc]) -> None:
        self.groups = {p.name: [p.pid] for p in procs}
        self.groups["postgresql (all)"] = pids_named("postgres")
        self.groups["rabbitmq"] = pids_named("beam.smp")
        self.groups["load client (this)"] = [os.getpid()]
        self.before = {pid: pids_cpu_s([pid]) for pids in self.groups.values() for pid in pids}
        self.started = time.monotonic()

    def shares(self) -> dict[str, float]:
        """A process that started meanwhile (a new PostgreSQL backend) counts all its CPU; one
        that ended meanwhile counts nothing (its CPU is lost with it: a lower bound)."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        out = {}
        for name, pids in self.groups.items():
            now = pids if name not in ("postgresql (all)", "rabbitmq") else pids_named(*self._comm(name))
            used = 0.0
            for pid in now:
                cpu = pids_cpu_s([pid])
                if cpu:
                    used += cpu - self.before.get(pid, 0.0)
            out[name] = round(used / elapsed, 2)
        return out

    @staticmethod
    def _comm(group: str) -> tuple[str, ...]:
        return ("postgres",) if group.startswith("postgresql") else ("beam.smp",)


# ---------------------------------------------------------------------------------------------
# Customers: identity users with tokens, personal Verified accounts, funded
# ---------------------------------------------------------------------------------------------


async def customers(identity_url: str, wallet_db: str, count: int) -> list[tuple[str, str]]:
    """``count`` customers: (token, wallet id) each."""
    from hiwallet.ledger import Ledger
    from hiwallet.wallet_api.cli import service_account_subject, wallet_service
    from hiwallet.wallet_api.domain import Caller, Tier
    from hiwallet.wallet_api.settings import WalletApiSettings

    realm = f"{identity_url}/realms/hiwallet"
    run = uuid.uuid4().hex[:8]
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=8)) as http:
        answer = await http.post(
            f"{realm}/protocol/openid-connect/token",
            auth=("onboarding", ONBOARDING_SECRET),
            data={"grant_type": "client_credentials"},
        )
        answer.raise_for_status()
        onboarding = {"Authorization": f"Bearer {answer.json()['access_token']}"}
        users = f"{identity_url}/admin/realms/hiwallet/users"
        limit = asyncio.Semaphore(8)

        async def person(i: int) -> tuple[str, str]:
            email = f"bench-{run}-{i}@hiwallet.dev"
            async with limit:
                made = await http.post(
                    users,
                    headers=onboarding,
                    json={
                        "username": email,
                        "email": email,
                        "enabled": True,
                        "emailVerified": True,
                        "credentials": [{"type": "password", "value": PASSWORD, "temporary": False}],
                    },
                )
                made.raise_for_status()
                subject = made.headers["Location"].rsplit("/", 1)[1]
                token = await http.post(
                    f"{realm}/protocol/openid-connect/token",
                    data={
                        "grant_type": "password",
                        "client_id": "personal-mobile-api",
                        "username": email,
                        "password": PASSWORD,
                    },
                )
                token.raise_for_status()
                return subject, token.json()["access_token"]

        people = await asyncio.gather(*(person(i) for i in range(count)))

    settings = WalletApiSettings(customer_issuer_base=identity_url)
    onboarder = Caller(
        settings.customer_issuer,
        service_account_subject(settings.customer_realm, settings.onboarding_client),
        settings.onboarding_client,
        True,
    )
    out: list[tuple[str, str]] = []
    async with wallet_service(wallet_db, settings) as service:
        ledger = Ledger(service.store, service.fees)
        for subject, token in people:
            account, _ = await service.open_personal(onboarder, subject)
            await service.raise_tier(onboarder, account["id"], Tier.VERIFIED)
            wallet = account["wallets"][0]["id"]
            await ledger.topup(
                f"bench-funds-{wallet[-12:]}",
                wallet,
                FUNDS_MINOR,
                provider="stripe",
                actor="operator:bench",
                ref="bench funds",
            )
            out.append((token, wallet))
    return out


def withdrawal_request(token: str, wallet: str, i: int) -> tuple[dict[str, str], bytes]:
    body = json.dumps(
        {
            "wallet": wallet,
            "amount_minor": AMOUNT_MINOR,
            "currency": "TRY",
            "destination_iban": DESTINATIONS[i % len(DESTINATIONS)],
        },
        separators=(",", ":"),
    ).encode()
    headers = {
        "Authorization": f"Bearer {token}",
        "Idempotency-Key": str(uuid.uuid4()),
        "Content-Type": "application/json",
    }
    return headers, body


# ---------------------------------------------------------------------------------------------
# What the system holds: sagas by state, outboxes, queues
# ---------------------------------------------------------------------------------------------


DB_COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted")


async def db_counters(dbs: dict[str, str]) -> dict[str, dict[str, int]]:
    """PostgreSQL's own counts for each database (pg_stat_database): with the sagas completed
    between two readings, what one saga costs each database in transactions and rows written,
    the measure that says where a saga's database work goes and what batching would save."""
    conn = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        rows = await conn.fetch(
            f"SELECT datname, {', '.join(DB_COUNTERS)} FROM pg_stat_database WHERE datname = ANY($1::text[])",
            list(dbs.values()),
        )
    finally:
        await conn.close()
    by_name = {r["datname"]: r for r in rows}
    return {
        key: {c: int(by_name[name][c]) for c in DB_COUNTERS} for key, name in dbs.items() if name in by_name
    }


def per_saga(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], sagas: int
) -> dict[str, Any]:
    return {
        key: {c: round((after[key][c] - before[key][c]) / max(1, sagas), 1) for c in DB_COUNTERS}
        for key in after
        if key in before
    }


class Observer:
    """Owner connections to the three databases and a channel to the vhost."""

    def __init__(self, dbs: dict[str, str], amqp: str) -> None:
        self.dbs, self.amqp = dbs, amqp
        self.conns: dict[str, asyncpg.Connection] = {}
        self.broker: aio_pika.abc.AbstractConnection | None = None
        self.channel: aio_pika.abc.AbstractChannel | None = None
        # One query at a time on a connection: the samplers and the load's watcher share them.
        self.lock = asyncio.Lock()

    async def open(self) -> None:
        for key in OUTBOXES:
            self.conns[key] = await asyncpg.connect(db.owner_dsn(self.dbs[key]))
        self.broker = await aio_pika.connect(self.amqp, timeout=10)
        self.channel = await self.broker.channel()

    async def close(self) -> None:
        for conn in self.conns.values():
            await conn.close()
        if self.broker is not None:
            await self.broker.close()

    async def by_state(self) -> dict[str, int]:
        async with self.lock:
            return await self._by_state()

    async def depths(self) -> dict[str, int]:
        async with self.lock:
            return await self._depths()

    async def unfinished(self) -> int:
        """Sagas not yet in a final state."""
        async with self.lock:
            return await self._unfinished()

    async def _by_state(self) -> dict[str, int]:
        rows = await self.conns["withdrawal"].fetch(
            "SELECT state, count(*)::int AS n FROM withdrawal.sagas GROUP BY state"
        )
        return {r["state"]: r["n"] for r in rows}

    async def _depths(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, table in OUTBOXES.items():
            out[f"outbox_{key}"] = await self.conns[key].fetchval(
                f"SELECT count(*)::int FROM {table} WHERE sent_at IS NULL"
            )
        assert self.channel is not None
        for name in QUEUES:
            queue = await self.channel.declare_queue(name, passive=True)
            out[f"queue_{name.rsplit('.', 1)[1]}"] = int(queue.declaration_result.message_count or 0)
        return out

    async def _unfinished(self) -> int:
        value = await self.conns["withdrawal"].fetchval(
            "SELECT count(*)::int FROM withdrawal.sagas WHERE state <> ALL($1::text[])", list(TERMINAL)
        )
        return int(value)

    async def drained(self, timeout_s: float = DRAIN_TIMEOUT_S) -> float:
        """Wait until every saga is final; the seconds it took."""
        started = time.monotonic()
        while await self.unfinished():
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"sagas still unfinished after {timeout_s} s: {await self.by_state()}")
            await asyncio.sleep(0.2)  # the polling interval
        return time.monotonic() - started


class Sampler:
    """Outbox and queue depths and unfinished sagas, every second."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.samples: list[dict[str, float]] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set():
            sample: dict[str, float] = {"t_s": round(time.monotonic() - started, 1)}
            sample |= await self.observer.depths()
            sample["unfinished_sagas"] = await self.observer.unfinished()
            self.samples.append(sample)
            with suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 1.0)


class Sessions:
    """What the services' database sessions are doing, sampled every 50 ms (pg_stat_activity):
    per database, the mean number of sessions active (with what they wait on) and idle in a
    transaction. A service whose sessions are mostly idle while its queue holds a backlog waits
    on something else than its database (the broker's round trip, its own loop)."""

    def __init__(self, dbs: dict[str, str]) -> None:
        self.dsn = db.owner_dsn(dbs["withdrawal"])
        self.names = {dbs[k]: k for k in OUTBOXES}
        self.counts: dict[str, dict[str, int]] = {k: {} for k in OUTBOXES}
        self.rounds = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await self._sample(conn)
        finally:
            await conn.close()

    async def _sample(self, conn: asyncpg.Connection) -> None:
        while not self.stop.is_set():
            rows = await conn.fetch(
                "SELECT datname, state, coalesce(wait_event_type || ':' || wait_event, 'cpu') AS wait,"
                " regexp_replace(left(query, 60), '\\s+', ' ', 'g') AS query"
                " FROM pg_stat_activity WHERE datname = ANY($1::text[]) AND pid <> pg_backend_pid()"
                " AND state IN ('active', 'idle in transaction')",
                list(self.names),
            )
            self.rounds += 1
            for r in rows:
                # idle in a transaction: the service holds it open while it does something else
                # (its own code, a broker round trip); the last statement says where it is.
                if r["state"] != "active":
                    what = f"idle in transaction after: {r['query']}"
                else:
                    what = f"active ({r['wait']})"
                counts = self.counts[self.names[r["datname"]]]
                counts[what] = counts.get(what, 0) + 1
            with suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.05)

    def report(self) -> dict[str, dict[str, float]]:
        rounds = max(self.rounds, 1)
        return {
            key: {
                what: round(n / rounds, 2)
                for what, n in sorted(counts.items(), key=lambda kv: -kv[1])[:8]
                if n / rounds >= 0.01
            }
            for key, counts in self.counts.items()
        }


def flatness(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Per series: its maximum, the mean of its first and last thirds, and flat (the last third
    no higher than twice the first third plus 5: a backlog that grows while the load is steady
    is not flat; a handful of messages in passage is)."""
    out: dict[str, Any] = {}
    if len(samples) < 3:
        return out
    third = len(samples) // 3
    for key in samples[0]:
        if key == "t_s":
            continue
        series = [s[key] for s in samples]
        first = sum(series[:third]) / third
        last = sum(series[-third:]) / third
        out[key] = {
            "max": max(series),
            "first_third_mean": round(first, 1),
            "last_third_mean": round(last, 1),
            "flat": last <= 2 * first + 5,
        }
    return out


# ---------------------------------------------------------------------------------------------
# The load
# ---------------------------------------------------------------------------------------------


async def saturate(
    port: int, people: list[tuple[str, str]], observer: Observer, window: int, duration_s: float
) -> dict[str, Any]:
    """(i): requests as fast as answered while fewer than ``window`` sagas are unfinished;
    completions counted every 0.25 s."""
    statuses: dict[int, int] = {}
    sent = 0
    unfinished = 0
    deadline = time.monotonic() + duration_s
    room = asyncio.Event()
    room.set()
    timeline: list[tuple[float, int]] = []

    async def watch() -> None:
        nonlocal unfinished
        started = time.monotonic()
        while time.monotonic() < deadline:
            states = await observer.by_state()
            unfinished = sum(n for s, n in states.items() if s not in TERMINAL)
            timeline.append((time.monotonic() - started, states.get("completed", 0)))
            if unfinished < window:
                room.set()
            else:
                room.clear()
            await asyncio.sleep(0.25)  # the sampling interval

    async def worker(w: int) -> None:
        nonlocal sent, unfinished
        conn = httpload.Connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                if not room.is_set():
                    # Bounded: the watcher stops at the deadline and may leave the room shut.
                    with suppress(TimeoutError):
                        await asyncio.wait_for(room.wait(), 0.25)
                    continue
                i = sent
                sent += 1
                unfinished += 1  # counted at once: the watcher's next look corrects it
                if unfinished >= window:
                    room.clear()
                token, wallet = people[i % len(people)]
                headers, body = withdrawal_request(token, wallet, i)
                status, _ = await conn.request("POST", "/v1/withdrawals", headers, body)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            conn.close()

    before = (await observer.by_state()).get("completed", 0)
    watcher = asyncio.create_task(watch())
    await asyncio.gather(*(worker(w) for w in range(16)))
    await watcher
    warm = duration_s / 5
    steady = [(t, n) for t, n in timeline if t >= warm]
    rate = (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) if len(steady) > 1 else 0.0
    return {
        "window_unfinished": window,
        "duration_s": duration_s,
        "requests": sent,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "completed_during": (timeline[-1][1] if timeline else before) - before,
        "completed_per_s": round(rate, 1),
        "completed_each_second": [b[1] - a[1] for a, b in zip(timeline[::4], timeline[4::4], strict=False)],
    }


async def fixed_rate(
    port: int, people: list[tuple[str, str]], rate: float, duration_s: float
) -> tuple[dict[str, float], dict[int, int]]:
    """(ii): request ``i`` is due at start + i/rate. Returns {saga id: the wall time its request
    was due} of those answered 202, and the count per status."""
    free: asyncio.Queue[httpload.Connection] = asyncio.Queue()
    for _ in range(CONNECTIONS):
        free.put_nowait(httpload.Connection("127.0.0.1", port))
    due: dict[str, float] = {}
    statuses: dict[int, int] = {}

    async def send(i: int, due_wall: float) -> None:
        conn = await free.get()
        token, wallet = people[i % len(people)]
        try:
            headers, body = withdrawal_request(token, wallet, i)
            status, answer = await conn.request("POST", "/v1/withdrawals", headers, body)
        except httpload.HttpLoadError:
            status, answer = 0, b""
        finally:
            free.put_nowait(conn)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 202:
            due[json.loads(answer)["id"]] = due_wall

    await pacing.open_loop(rate, duration_s, send)
    while not free.empty():
        free.get_nowait().close()
    return due, statuses


async def latencies(observer: Observer, due: dict[str, float]) -> dict[str, Any]:
    await observer.drained()  # the sampler has stopped: the connection is ours
    rows = await observer.conns["withdrawal"].fetch(
        "SELECT id, state, extract(epoch FROM state_changed_at)::float8 AS at"
        " FROM withdrawal.sagas WHERE id = ANY($1::text[])",
        list(due),
    )
    done = [(r["at"] - due[r["id"]]) * 1000 for r in rows if r["state"] == "completed"]
    states: dict[str, int] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
    span = max(due.values()) - min(due.values()) if due else 0.0
    # Where a saga's time goes: each step's share, from the history (PostgreSQL's clock).
    steps = await observer.conns["withdrawal"].fetch(
        """
        SELECT to_state, percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY wait_s) AS q
          FROM (SELECT to_state,
                       extract(epoch FROM at - lag(at) OVER (PARTITION BY saga_id ORDER BY id))::float8
                       AS wait_s
                  FROM withdrawal.transitions WHERE saga_id = ANY($1::text[])) waits
         WHERE wait_s IS NOT NULL
         GROUP BY to_state
        """,
        list(due),
    )
    return {
        "offered_per_s": round(len(due) / span, 1) if span else 0.0,
        "answered_202": len(due),
        "states": states,
        "p50_ms": round(pct(done, 0.5), 1),
        "p90_ms": round(pct(done, 0.9), 1),
        "p99_ms": round(pct(done, 0.99), 1),
        "max_ms": round(max(done, default=0.0), 1),
        # from the previous state to this one: p50 and p99, ms (debited -> bank_transfer_pending
        # is the same transaction: ~0)
        "step_ms": {r["to_state"]: [round(q * 1000, 1) for q in r["q"]] for r in steps},
    }


CONSUMERS = {
    "withdrawal-orchestrator (results)": (
        "withdrawal",
        "withdrawal.processed_events",
        "withdrawal-orchestrator",
    ),
    "wallet-consumer (commands)": ("wallet", "public.processed_events", "wallet-consumer-withdrawals"),
    "bank-adapter (commands)": ("bank", "bank.processed_events", "bank-adapter"),
}


async def consumer_rates(observer: Observer, since: float, until: float) -> dict[str, dict[str, float]]:
    """Each saga consumer's messages between two wall times (their transactions' start,
    processed_at): how many a second, and the time from one message's transaction to the next
    one's, p50 and p90 (one message at a time: its whole cycle, the broker's round trip
    included). A consumer whose queue held a backlog all along ran at its capacity."""
    out: dict[str, dict[str, float]] = {}
    async with observer.lock:
        for name, (key, table, consumer) in CONSUMERS.items():
            rows = await observer.conns[key].fetch(
                f"SELECT extract(epoch FROM processed_at)::float8 AS at FROM {table}"
                " WHERE consumer = $1 AND processed_at BETWEEN to_timestamp($2) AND to_timestamp($3)"
                " ORDER BY processed_at",
                consumer,
                since,
                until,
            )
            times = [r["at"] for r in rows]
            gaps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
            out[name] = {
                "messages_per_s": round(len(times) / max(until - since, 1e-9), 1),
                "cycle_ms_p50": round(pct(gaps, 0.5), 1),
                "cycle_ms_p90": round(pct(gaps, 0.9), 1),
            }
    return out


SPY_S = 5.0


async def py_spy_profile(
    py_spy: str, proc: Proc, seconds: float = SPY_S, keep: str | None = None
) -> dict[str, Any]:
    """``py-spy record`` of ``proc`` for ``seconds`` at 100 Hz, idle samples included: the share
    of samples its event loop waited (the stack ending in the loop's run: nothing to do but
    wait for the database, the broker or a client), and where the other samples were: the
    leaf functions (self) and our own functions (inclusive), the first 12 of each."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"hiwallet-bench-spy-{proc.pid}.txt"
    try:
        child = await asyncio.create_subprocess_exec(
            py_spy,
            "record",
            "--pid",
            str(proc.pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "100",
            "--nonblocking",
            "--idle",
            "--format",
            "raw",
            "--output",
            str(out),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.wait_for(child.wait(), seconds + 30)
        lines = out.read_text().splitlines()
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copyfile(out, os.path.join(keep, f"{proc.name}.txt"))
    except (OSError, TimeoutError) as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"}
    finally:
        out.unlink(missing_ok=True)
    total = idle = 0
    leaves: dict[str, int] = {}
    ours: dict[str, int] = {}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        total += count
        if frames[-1].startswith(("Runner.run (asyncio/runners.py", "asyncio_run (uvicorn")):
            idle += count
            continue
        leaves[frames[-1]] = leaves.get(frames[-1], 0) + count
        for frame in {
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0] + ")" for f in frames if "hiwallet/" in f
        }:
            ours[frame] = ours.get(frame, 0) + count

    def top(counts: dict[str, int]) -> dict[str, float]:
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:12]
        return {name: round(n / max(total, 1), 3) for name, n in ranked}

    return {
        "process": proc.name,
        "samples": total,
        "idle_share": round(idle / max(total, 1), 3),
        "self_share": top(leaves),
        "ours_inclusive_share": top(ours),
    }


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


async def system(args: argparse.Namespace, report: dict[str, Any]) -> None:
    pid = os.getpid()
    dbs = {key: f"hiwallet_bench_wd_{key}_{pid}" for key in ("wallet", "withdrawal", "bank", "identity")}
    vhost = f"hiwallet-bench-wd-{pid}"
    amqp = f"amqp://guest:guest@127.0.0.1:{args.amqp_port}/{vhost}"
    await drop(*dbs.values())
    for key, name in dbs.items():
        await databases.migrate(key, database=name)
    await rabbitmqctl("add_vhost", vhost)
    await rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    ports = {
        name: free_port()
        for name in ("identity", "withdrawal-orchestrator", "wallet-consumer", "bank-adapter", "bank-webhook")
    }
    ports["bank-fake"] = free_port()
    ports["wallet-api (not started)"] = free_port()
    identity_url = f"http://127.0.0.1:{ports['identity']}"
    bank_url = f"http://127.0.0.1:{ports['bank-fake']}"
    base = {
        **os.environ,
        "HIWALLET_AMQP_URL": amqp,
        "HIWALLET_IDENTITY_PUBLIC_URL": identity_url,
        "HIWALLET_IDENTITY_DATABASE": dbs["identity"],
        "HIWALLET_IDENTITY_SMTP_ENABLED": "false",
        # Cheap password hashes: the bench's users sign in once each; not what it measures.
        "HIWALLET_IDENTITY_ARGON2_TIME_COST": "1",
        "HIWALLET_IDENTITY_ARGON2_MEMORY_KIB": "1024",
        "HIWALLET_IDENTITY_ARGON2_PARALLELISM": "1",
        "HIWALLET_IDENTITY_ACCESS_TOKEN_LIFETIME_S": "3600",
        "HIWALLET_WITHDRAWAL_DATABASE": dbs["withdrawal"],
        "HIWALLET_WITHDRAWAL_CUSTOMER_ISSUER_BASE": identity_url,
        # Only a GET by someone other than the requester asks wallet-api: the bench never does.
        "HIWALLET_WITHDRAWAL_WALLET_API_URL": f"http://127.0.0.1:{ports['wallet-api (not started)']}",
        "HIWALLET_WALLET_CONSUMER_DATABASE": dbs["wallet"],
        "HIWALLET_BANK_DATABASE": dbs["bank"],
        "HIWALLET_BANK_BANK_URL": bank_url,
        "BANK_FAKE_TRANSFER_CALLBACK_URL": f"http://127.0.0.1:{ports['bank-webhook']}/v1/webhooks/bank",
        # The bank answering at once: the outcome decided when the transfer is accepted, and its
        # callback sent then (not 0.1 s later, the fake's default "moments later").
        "BANK_FAKE_TRANSFER_DECIDE_AFTER_S": "0",
        "BANK_FAKE_NOTIFY_AFTER_S": "0",
    }
    procs: list[Proc] = []
    observer = Observer(dbs, amqp)
    try:
        identity = Proc("identity", ports["identity"], base, "--realm", "hiwallet")
        procs.append(identity)
        await identity.ready()
        print(f"{args.customers} customers: users, tokens, Verified accounts, funds ...", flush=True)
        people = await customers(identity_url, dbs["wallet"], args.customers)

        for name in ("withdrawal-orchestrator", "wallet-consumer", "bank-adapter", "bank-webhook"):
            procs.append(Proc(name, ports[name], base))
        procs.append(Proc("bank-fake", ports["bank-fake"], base, ready_path="/health"))
        await asyncio.gather(*(p.ready() for p in procs))
        await observer.open()
        orchestrator = next(p for p in procs if p.name == "withdrawal-orchestrator")
        services = [p for p in procs if p.name != "identity"]

        # A few sagas first: every process's first messages (connections, caches) out of the way.
        print("warm-up ...", flush=True)
        await fixed_rate(orchestrator.port, people, 20, 2)
        await observer.drained()

        print(
            f"(i) saturating: {args.window} sagas unfinished at all times for {args.duration} s ...",
            flush=True,
        )
        cpu = Cpu(services)
        spying = None
        if args.py_spy:

            async def spy_later() -> list[dict[str, Any]]:
                # In the middle of (i), the two saga consumers that carry most messages at once.
                await asyncio.sleep(max(0.0, args.duration / 2 - args.py_spy_seconds / 2))
                names = args.py_spy_processes.split(",")
                chosen = [p for p in services if p.name in names]
                return list(
                    await asyncio.gather(
                        *(
                            py_spy_profile(args.py_spy, p, args.py_spy_seconds, args.py_spy_keep)
                            for p in chosen
                        )
                    )
                )

            spying = asyncio.create_task(spy_later())
        completed_before = (await observer.by_state()).get("completed", 0)
        counters_before = await db_counters(dbs)
        sessions, depth_sampler = Sessions(dbs), Sampler(observer)
        watching = [asyncio.create_task(sessions.run()), asyncio.create_task(depth_sampler.run())]
        load_started = time.time()
        try:
            with benchlog.phase("(i) saturating", args.duration):
                throughput = await saturate(orchestrator.port, people, observer, args.window, args.duration)
            throughput["cpu_share_of_a_core"] = cpu.shares()
        finally:
            sessions.stop.set()
            depth_sampler.stop.set()
            await asyncio.gather(*watching)
        throughput["consumers"] = await consumer_rates(
            observer, load_started + args.duration / 5, time.time()
        )
        throughput["db_sessions_busy_mean"] = sessions.report()
        throughput["samples"] = depth_sampler.samples
        throughput["drain_after_load_s"] = round(await observer.drained(), 1)
        # The same run's whole: every saga (i) started, completed, over its load and its drain.
        completed = (await observer.by_state()).get("completed", 0) - completed_before
        throughput["completed_incl_drain_per_s"] = round(
            completed / (args.duration + throughput["drain_after_load_s"]), 1
        )
        # the statistics are flushed by each backend within a second of its transactions
        await asyncio.sleep(1.5)
        throughput["db_work_per_saga"] = per_saga(counters_before, await db_counters(dbs), completed)
        if spying is not None:
            throughput["py_spy"] = await spying
        report["throughput"] = throughput
        print(f"  { {k: v for k, v in throughput.items() if k not in ('py_spy', 'samples')} }", flush=True)
        depths = [
            (s["queue_wallet"], s["queue_bank"], s["queue_orchestrator"]) for s in throughput["samples"]
        ]
        print(f"  queue depths (wallet, bank, orchestrator) each second: {depths}", flush=True)

        rate = args.rate or max(1.0, round(throughput["completed_per_s"] / 2, 1))
        print(f"(ii) request -> completed at {rate}/s for {args.latency_duration} s ...", flush=True)
        sampler = Sampler(observer)
        sampling = asyncio.create_task(sampler.run())
        cpu = Cpu(services)
        latency: dict[str, Any] = {"rate_per_s": rate, "duration_s": args.latency_duration}
        try:
            with benchlog.phase("(ii) at half that rate", args.latency_duration):
                due, statuses = await fixed_rate(orchestrator.port, people, rate, args.latency_duration)
            sent_done = time.monotonic()
            latency["drain_after_load_s"] = round(await observer.drained(), 1)
            latency["cpu_share_of_a_core"] = cpu.shares()
        finally:
            sampler.stop.set()
            await sampling
        latency |= await latencies(observer, due)
        latency["statuses"] = {str(k): v for k, v in sorted(statuses.items())}
        latency["wall_after_load_s"] = round(time.monotonic() - sent_done, 1)
        latency["depths"] = flatness(sampler.samples)
        latency["all_flat"] = all(v["flat"] for v in latency["depths"].values())
        latency["samples"] = sampler.samples
        report["latency"] = latency
        print(f"  { {k: v for k, v in latency.items() if k not in ('samples', 'depths')} }", flush=True)
        for key, v in latency["depths"].items():
            print(f"  {key}: {v}", flush=True)

        report["rss_mb"] = {p.name: round(p.sample(), 1) for p in procs}
        print(f"(iii) peak RSS: {report['rss_mb']}", flush=True)
        report["checks"] = await checks(observer, dbs)
        print(f"checks: {report['checks']}", flush=True)
    finally:
        await observer.close()
        for proc in reversed(procs):
            proc.stop()
        with suppress(Exception):
            await rabbitmqctl("delete_vhost", vhost)
        await drop(*dbs.values())


async def checks(observer: Observer, dbs: dict[str, str]) -> dict[str, Any]:
    """Every saga final and completed, one bank transfer per saga, the ledger verified."""
    from hiwallet.ledger import LedgerStore, init_connection

    states = await observer.by_state()
    bank = await observer.conns["bank"].fetchrow(
        "SELECT count(*)::int AS transfers, count(DISTINCT saga_id)::int AS sagas,"
        " count(*) FILTER (WHERE state = 'succeeded')::int AS succeeded FROM bank.transfers"
    )
    pool = await db.create_pool(
        dbs["wallet"], role=db.app_role("wallet"), min_size=1, max_size=2, init=init_connection
    )
    try:
        verified = await LedgerStore.from_settings(pool).verify()
    finally:
        await pool.close()
    return {
        "sagas_by_state": states,
        "bank_transfers": dict(bank),
        "one_transfer_per_saga": bank["transfers"] == bank["sagas"] == states.get("completed", 0),
        "ledger_verified": verified.ok,
        "ledger_problems": verified.problems[:5],
    }


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    met: dict[str, bool] = {}
    if "throughput" in report:
        out["completed_per_s"] = report["throughput"]["completed_per_s"]
        met["completed_per_s"] = out["completed_per_s"] >= TARGETS["completed_per_s_min"]
    if "latency" in report:
        latency = report["latency"]
        out |= {"latency_p50_ms": latency["p50_ms"], "latency_p99_ms": latency["p99_ms"]}
        out["at_rate_per_s"] = latency["rate_per_s"]
        met["latency_p99_ms"] = latency["p99_ms"] < TARGETS["latency_p99_ms_max"]
        met["depths_flat"] = latency["all_flat"]
    if "rss_mb" in report:
        new = {k: v for k, v in report["rss_mb"].items() if k in NEW_PROCESSES}
        out["rss_mb_new_processes"] = new
        met["rss_mb"] = bool(new) and max(new.values()) < TARGETS["rss_mb_max"]
    if "checks" in report:
        met["every_saga_completed_once"] = report["checks"]["one_transfer_per_saga"]
        met["ledger_verified"] = report["checks"]["ledger_verified"]
    out["targets"] = TARGETS
    out["targets_met"] = met
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "load_before": os.getloadavg()},
        "customers": args.customers,
        "amount_minor": AMOUNT_MINOR,
        "note": "one machine shared by the load client, the services, PostgreSQL and RabbitMQ"
        " (and, today, other developers' work): indicative figures",
    }
    try:
        await system(args, report)
    except Exception as exc:  # the figures measured so far are kept, with what stopped the run
        report["failed"] = f"{type(exc).__name__}: {exc}"
    report["machine"]["load_after"] = os.getloadavg()
    report["summary"] = ratios(report)
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=200)
    parser.add_argument(
        "--py-spy-processes",
        default="withdrawal-orchestrator,wallet-consumer",
        help="the processes py-spy profiles, comma-separated (default: the two saga consumers"
        " that carry most messages)",
    )
    parser.add_argument("--py-spy-seconds", type=float, default=SPY_S, help="each profile's length")
    parser.add_argument(
        "--py-spy-keep",
        help="a directory: keep each profile's raw folded stacks there (<process>.txt)",
    )
    parser.add_argument(
        "--amqp-port",
        type=int,
        default=5672,
        help="the RabbitMQ to run on (default 5672, the machine's); with --rabbit-node, a node of its own"
        " (one with the consistent-hash exchange plugin, when the machine's has not got it enabled)",
    )
    parser.add_argument(
        "--rabbit-node",
        help="that node's name for rabbitmqctl (its vhost made and dropped there),"
        " e.g. hiwallet-saga@localhost",
    )
    parser.add_argument("--duration", type=float, default=30, help="seconds of (i) (default 30)")
    parser.add_argument("--window", type=int, default=200, help="unfinished sagas kept in (i) (default 200)")
    parser.add_argument("--rate", type=float, help="withdrawals per second in (ii) (default: half of (i))")
    parser.add_argument("--latency-duration", type=float, default=30, help="seconds of (ii) (default 30)")
    beside = Path(sys.executable).parent / "py-spy"
    parser.add_argument(
        "--py-spy",
        default=shutil.which("py-spy") or (str(beside) if beside.exists() else None),
        help="a py-spy binary: profile withdrawal-orchestrator and wallet-consumer during (i)"
        " (default: py-spy on the PATH or beside this Python, if there is one; none: no profile)",
    )
    args = parser.parse_args()
    if args.rabbit_node:
        os.environ["RABBITMQ_NODENAME"] = args.rabbit_node  # rabbitmqctl's node, as -n says
    benchlog.to_file()
    report = uvloop.run(main(args))
    benchlog.finish("withdrawal", report)


if __name__ == "__main__":
    cli()
