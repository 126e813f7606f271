"""The ledger core's benchmark: one command, every figure measured in the same run, against the
same PostgreSQL server, reported as ratios.

    make bench                    # or: .venv/bin/python bench/ledger_bench.py [--duration 15]

1. pgbench's tpcb-like script, prepared mode, 8 clients: the machine's limit of one commit per
   operation. Then interleaved rounds (``--rounds`` of ``--round-s`` seconds): the ledger's p2p
   at 8 clients, pgbench at 8 and the seed-004 shape (a plain asyncpg transfer: insert it once,
   lock both accounts in id order, check, update both rows) at 8, batched posting (against
   pgbench at 8), the hot account and p2p at 32 (against each other), in turn; the medians of
   the rounds' ratios and their spread.
2. p2p transfers among 1,000 wallets at concurrency 1, 8 and 32 (the spread runs). Each of the
   runs at 8 and 32 is followed at once by wallet-api's at the same concurrency, over HTTP with
   real tokens (bench/wallet_api_bench.py): the figures compared, minutes apart at most.
   ``--wallet-api-only`` runs only these four.
3. A hot-account run: top-ups, every one touching the card provider's clearing account (split
   into per-bucket sub-accounts), at concurrency 8 and 32; and, for contrast, the same with all
   wallets in one bucket, so every top-up hits one clearing row.
4. A batched run: many transfers per database transaction, a result for each.

Then ``verify`` over everything written, and the results as JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

import benchlog
import wallet_api_bench
from cpu import machine_busy_s, process_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.ledger import get_ledger_settings, rules
from hiwallet.ledger.accounts import new_wallet_id
from hiwallet.ledger.errors import InsufficientFunds
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

WALLETS = 1_000
FUNDING_MINOR = 10**12  # enough that no transfer is refused for funds
TARGETS = {
    "spread_c8_vs_pgbench_c8": 0.6,
    "hot_vs_spread_c32": 0.5,
    "hot_c32_p99_ms_max": 25.0,
    "batched_vs_pgbench_c8": 2.0,
    "peak_rss_mb_max": 250.0,
    "wallet_api_c8_vs_ledger_c8": 0.5,  # and c32 against c32
    "wallet_api_c8_p99_ms_max": 50.0,
    "wallet_api_rss_mb_max": 150.0,
    # issue 26: the medians of interleaved rounds
    "ledger_vs_pgbench_c8_rounds": 1.0,
    "ledger_vs_bare_c8": 0.8,
    "batched_vs_pgbench_c8_rounds": 3.5,
    "hot_vs_spread_c32_rounds": 1.2,
    "hot_c32_p99_ms_rounds_max": 8.0,
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------------------------------------
# pgbench
# ---------------------------------------------------------------------------------------------


class PgbenchDb:
    """pgbench's tpcb-like database, initialised once and run many times (the rounds)."""

    def __init__(self, scale: int) -> None:
        settings = get_settings()
        self.scale = scale
        self.name = f"hiwallet_bench_pgbench_rounds_{os.getpid()}"
        self.dsn = db.owner_dsn(self.name, settings)
        self._admin = db.owner_dsn("postgres", settings)

    def __enter__(self) -> PgbenchDb:
        subprocess.run(["psql", self._admin, "-qc", f'DROP DATABASE IF EXISTS "{self.name}"'], check=True)
        subprocess.run(["psql", self._admin, "-qc", f'CREATE DATABASE "{self.name}"'], check=True)
        subprocess.run(
            ["pgbench", "-i", "-q", "-s", str(self.scale), self.dsn], check=True, capture_output=True
        )
        return self

    def __exit__(self, *_: object) -> None:
        subprocess.run(
            ["psql", self._admin, "-qc", f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'], check=True
        )

    async def run(self, duration_s: float, clients: int) -> float:
        """Transactions per second of one run (whole seconds: pgbench's -T)."""
        proc = await asyncio.create_subprocess_exec(
            "pgbench",
            "-M",
            "prepared",
            "-c",
            str(clients),
            "-j",
            "2",
            "-T",
            str(max(1, round(duration_s))),
            self.dsn,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=duration_s + 120)
        if proc.returncode != 0:
            raise RuntimeError(f"pgbench failed with {proc.returncode}")
        return float(re.search(r"tps = ([\d.]+)", out.decode())[1])  # type: ignore[index]


# The seed-004 shape (the simplest ledger that could work): a transfer is one transaction that
# inserts the transfer's row once (ON CONFLICT: a replay), locks both accounts in id order,
# checks the balance and updates both rows; a CHECK keeps balances at zero or more.
BARE_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS bare;
CREATE TABLE IF NOT EXISTS bare.accounts (
    id text PRIMARY KEY,
    balance_cents bigint NOT NULL DEFAULT 0,
    balance_changed_at timestamptz NOT NULL DEFAULT now(),
    CHECK (id = 'external' OR balance_cents >= 0)
);
CREATE TABLE IF NOT EXISTS bare.transfers (
    id text PRIMARY KEY,
    from_account_id text NOT NULL REFERENCES bare.accounts (id) DEFERRABLE INITIALLY DEFERRED,
    to_account_id text NOT NULL REFERENCES bare.accounts (id) DEFERRABLE INITIALLY DEFERRED,
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (from_account_id <> to_account_id)
);
"""


class BareLedger:
    """The seed-004 Store's transfer, in asyncpg (in the bench database, schema ``bare``)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def setup(self, owner: asyncpg.Connection, count: int) -> list[str]:
        await owner.execute(BARE_SCHEMA)
        ids = [f"acc-{i:05d}" for i in range(count)]
        await owner.executemany(
            "INSERT INTO bare.accounts (id, balance_cents) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            [(i, FUNDING_MINOR) for i in ids],
        )
        await owner.execute(
            "GRANT USAGE ON SCHEMA bare TO PUBLIC; GRANT ALL ON ALL TABLES IN SCHEMA bare TO PUBLIC"
        )
        return ids

    async def transfer(self, transfer_id: str, source: str, target: str, amount: int) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "INSERT INTO bare.transfers (id, from_account_id, to_account_id, amount_cents)"
                " VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING RETURNING created_at",
                transfer_id,
                source,
                target,
                amount,
            )
            if row is None:
                return  # a replay (the bench never sends one)
            # both accounts locked in id order: two transfers between the same two never deadlock
            balances = dict(
                await conn.fetch(
                    "SELECT id, balance_cents FROM bare.accounts WHERE id IN ($1, $2) ORDER BY id FOR UPDATE",
                    source,
                    target,
                )
            )
            if balances[source] < amount:
                raise InsufficientFunds(f"{source} holds {balances[source]}")
            await conn.execute(
                "UPDATE bare.accounts SET balance_cents = balance_cents"
                " + CASE WHEN id = $1 THEN -$3::bigint ELSE $3::bigint END, balance_changed_at = $4"
                " WHERE id IN ($1, $2)",
                source,
                target,
                amount,
                row["created_at"],
            )


def pgbench(duration_s: int, clients: int, scale: int) -> dict[str, Any]:
    settings = get_settings()
    name = f"hiwallet_bench_pgbench_{os.getpid()}"
    dsn = db.owner_dsn(name, settings)
    admin = db.owner_dsn("postgres", settings)
    subprocess.run(["psql", admin, "-qc", f'DROP DATABASE IF EXISTS "{name}"'], check=True)
    subprocess.run(["psql", admin, "-qc", f'CREATE DATABASE "{name}"'], check=True)
    try:
        subprocess.run(["pgbench", "-i", "-q", "-s", str(scale), dsn], check=True, capture_output=True)
        out = subprocess.run(
            ["pgbench", "-M", "prepared", "-c", str(clients), "-j", "2", "-T", str(duration_s), "-r", dsn],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run(["psql", admin, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True)
    tps = float(re.search(r"tps = ([\d.]+)", out)[1])  # type: ignore[index]
    latency = float(re.search(r"latency average = ([\d.]+) ms", out)[1])  # type: ignore[index]
    return {"tps": round(tps, 1), "latency_avg_ms": latency, "clients": clients, "scale": scale}


# ---------------------------------------------------------------------------------------------
# Load loops
# ---------------------------------------------------------------------------------------------


async def run_load(
    concurrency: int, duration_s: float, op: Callable[[int, int], Awaitable[int]]
) -> dict[str, Any]:
    """``concurrency`` workers call ``op(worker, n)`` until the time is up; ``op`` returns how
    many transfers it made. Latency is per call."""
    latencies: list[float] = []
    done = 0
    errors = 0
    deadline = time.perf_counter() + duration_s

    async def worker(w: int) -> None:
        nonlocal done, errors
        n = 0
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            try:
                # `done += await op()` would read `done` before the await and lose the other
                # workers' increments made meanwhile.
                made = await op(w, n)
                done += made
            except InsufficientFunds:
                errors += 1
            latencies.append((time.perf_counter() - start) * 1000)
            n += 1

    cpu_before, busy_before = process_cpu_s(), machine_busy_s()
    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    client_cpu_s, busy_s = process_cpu_s() - cpu_before, machine_busy_s() - busy_before
    per = max(done, 1)
    return {
        "concurrency": concurrency,
        "transfers": done,
        "transfers_per_s": round(done / elapsed, 1),
        "p50_ms": round(pct(latencies, 0.50), 2),
        "p99_ms": round(pct(latencies, 0.99), 2),
        "mean_ms": round(statistics.fmean(latencies), 2) if latencies else 0.0,
        "errors": errors,
        # where the CPU went, per transfer: this (client) process, and the whole machine
        "client_cpu_us": round(client_cpu_s / per * 1e6),
        "machine_cpu_us": round(busy_s / per * 1e6),
    }


class Bench:
    def __init__(self, pool: asyncpg.Pool, ledger: Ledger, run_id: str) -> None:
        self.pool = pool
        self.ledger = ledger
        self.run_id = run_id

    async def open_wallets(self, count: int, bucket: int | None = None) -> list[str]:
        wallets = [new_wallet_id(bucket or 1 + (i * 7919) % 1023) for i in range(count)]
        for w in wallets:
            await self.ledger.store.open_wallet(w, "TRY", owner="bench")
        postings = [
            rules.topup(
                f"fund-{self.run_id}-{i}", w, FUNDING_MINOR, "TRY", provider="bank", actor="bench", ref="f"
            )
            for i, w in enumerate(wallets)
        ]
        for i in range(0, len(postings), 500):
            await self.ledger.store.post_batch(postings[i : i + 500])
        return wallets

    async def spread(
        self, wallets: list[str], concurrency: int, duration_s: float, tag: str
    ) -> dict[str, Any]:
        rng = random.Random(concurrency)

        async def op(w: int, n: int) -> int:
            a, b = rng.sample(wallets, 2)
            await self.ledger.transfer(
                f"{tag}-{self.run_id}-{w}-{n}", a, b, rng.randint(1, 10_000), actor="bench", ref="p2p"
            )
            return 1

        return await run_load(concurrency, duration_s, op)

    async def topups(
        self, wallets: list[str], concurrency: int, duration_s: float, tag: str
    ) -> dict[str, Any]:
        rng = random.Random(concurrency + 1)

        async def op(w: int, n: int) -> int:
            await self.ledger.topup(
                f"{tag}-{self.run_id}-{w}-{n}",
                rng.choice(wallets),
                rng.randint(1, 10_000),
                provider="stripe",
                actor="bench",
                ref="pi",
            )
            return 1

        return await run_load(concurrency, duration_s, op)

    async def batched(
        self, wallets: list[str], concurrency: int, duration_s: float, batch: int, tag: str
    ) -> dict[str, Any]:
        # Each writer moves money only among its own wallets: batches of two writers never wait
        # on each other's locks in opposite orders.
        groups = [wallets[i::concurrency] for i in range(concurrency)]
        rng = random.Random(7)

        async def op(w: int, n: int) -> int:
            mine = groups[w]
            postings = []
            for k in range(batch):
                a, b = rng.sample(mine, 2)
                postings.append(
                    rules.transfer(
                        f"{tag}-{self.run_id}-{w}-{n}-{k}",
                        a,
                        b,
                        rng.randint(1, 10_000),
                        "TRY",
                        actor="bench",
                        ref="batch",
                    )
                )
            results = await self.ledger.store.post_batch(postings)
            return sum(1 for r in results if not isinstance(r, Exception))

        result = await run_load(concurrency, duration_s, op)
        result["batch_size"] = batch
        return result


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    database = f"hiwallet_bench_ledger_{os.getpid()}"
    admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
    await admin.execute(f'DROP DATABASE IF EXISTS "{database}"')
    await admin.close()
    await databases.migrate("wallet", database=database, settings=settings)
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": args.duration,
        "machine": {"cores": os.cpu_count()},
        "transit_legs": get_ledger_settings().transit_legs,
    }

    full = not (args.wallet_api_only or args.only)
    if full:
        print(f"pgbench tpcb-like, prepared, 8 clients, {args.duration} s ...", flush=True)
        with benchlog.phase("pgbench, 8 clients", args.duration):
            report["pgbench_c8"] = pgbench(args.duration, 8, args.pgbench_scale)
        print(f"  {report['pgbench_c8']}", flush=True)

    # Measured as the services run: as the application role, through the posting functions
    # (SECURITY DEFINER). The owner's connection vacuums, analyzes and checkpoints.
    pool = await db.create_pool(
        database, role=db.app_role("wallet"), settings=settings, min_size=4, max_size=34, init=init_connection
    )
    owner = await asyncpg.connect(db.owner_dsn(database, settings))
    try:
        ledger = Ledger(LedgerStore.from_settings(pool), Fees.from_settings())
        bench = Bench(pool, ledger, datetime.now(UTC).strftime("%H%M%S"))
        print(f"opening and funding {WALLETS} wallets ...", flush=True)
        wallets = await bench.open_wallets(WALLETS)
        await owner.execute("ANALYZE")

        if args.only == "wallet":
            report["wallet_rounds"] = await wallet_rounds(bench, wallets, owner, args)
            report["peak_rss_mb"] = round(peak_rss_mb(), 1)
            report["ratios"] = {"wallet_rounds": wallet_summary(report["wallet_rounds"])}
            report["verify"] = await verify(ledger)
            return report

        if full and args.rounds:
            report["interleaved"] = await interleaved(bench, wallets, owner, pool, args)

        for c in (1, 8, 32) if full else (8, 32):
            print(f"p2p among {WALLETS} wallets, concurrency {c} ...", flush=True)
            await quiesce(owner)
            with benchlog.phase(f"p2p, concurrency {c}", args.duration):
                report[f"spread_c{c}"] = await bench.spread(wallets, c, args.duration, f"s{c}")
            print(f"  {report[f'spread_c{c}']}", flush=True)
            if c > 1 and not args.skip_wallet_api:
                # Right after the ledger core's own run at this concurrency, so that the two
                # figures compared are measured minutes apart at most (the machine's speed
                # drifts), and before the batched run writes 100,000 transactions that the
                # server then checkpoints and vacuums.
                await quiesce(owner)
                await wallet_api(report, c, args.duration)
        for c in (8, 32) if full else ():
            print(f"hot account: top-ups through one provider's clearing, concurrency {c} ...", flush=True)
            await quiesce(owner)
            with benchlog.phase(f"hot account, concurrency {c}", args.duration):
                report[f"hot_c{c}"] = await bench.topups(wallets, c, args.duration, f"h{c}")
            print(f"  {report[f'hot_c{c}']}", flush=True)
        if full:
            print(
                "contrast: the same top-ups with every wallet in one bucket (one clearing row) ...",
                flush=True,
            )
            one_bucket = await bench.open_wallets(100, bucket=1023)
            await quiesce(owner)
            with benchlog.phase("one clearing row, concurrency 32", args.duration):
                report["hot_single_row_c32"] = await bench.topups(one_bucket, 32, args.duration, "h1")
            print(f"  {report['hot_single_row_c32']}", flush=True)
            print(f"batched: {args.batch} transfers per database transaction, 2 writers ...", flush=True)
            await quiesce(owner)
            with benchlog.phase("batched, 2 writers", args.duration):
                report["batched"] = await bench.batched(wallets, 2, args.duration, args.batch, "b")
            print(f"  {report['batched']}", flush=True)

        report["verify"] = await verify(ledger)
    finally:
        await pool.close()
        await owner.close()
        if not args.keep:
            admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            await admin.close()

    report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    report["ratios"] = ratios(report)
    return report


async def verify(ledger: Ledger) -> dict[str, Any]:
    print("verify ...", flush=True)
    started = time.perf_counter()
    verified = await ledger.store.verify()
    return {
        "ok": verified.ok,
        "problems": verified.problems[:20],
        "lines": verified.lines,
        "transactions": verified.transactions,
        "seconds": round(time.perf_counter() - started, 1),
    }


async def wallet_rounds(
    bench: Bench, wallets: list[str], owner: asyncpg.Connection, args: argparse.Namespace
) -> dict[str, Any]:
    """wallet-api over HTTP against the ledger's in-process p2p, at each of ``--concurrency``, in
    short rounds taken in turn (the order rotates each round), each side right after a
    checkpoint: each ratio compares figures seconds apart. With ``--baseline SRC``, wallet-api
    from that tree too (the code before, e.g. ``git archive main``), in the same rounds: its
    ratio to the ledger and the after's to it. The medians of the rounds' ratios, with the
    spread (min, max)."""
    levels: list[int] = args.concurrency
    round_s = args.round_s
    async with contextlib.AsyncExitStack() as stack:
        after_env, before_env = _env(args.after_env), _env(args.baseline_env)
        served = {
            "wallet": await stack.enter_async_context(wallet_api_bench.serving(max(levels), env=after_env))
        }
        if args.baseline or before_env:
            served["before"] = await stack.enter_async_context(
                wallet_api_bench.serving(
                    max(levels), src=Path(args.baseline) if args.baseline else None, env=before_env
                )
            )
        # Warm, as a wallet-api that has run a while: each side's first transfers to each of the
        # 1,000 receivers read the parties with a statement of their own (the party cache's
        # misses), which a cold run's p99 would count.
        for side in served.values():
            await side.run(max(levels), round_s)
        order = ["ledger", *served]
        runs: dict[int, dict[str, list[dict[str, Any]]]] = {c: {k: [] for k in order} for c in levels}
        print(
            f"wallet rounds: {args.rounds} of {round_s:g} s a side, {' / '.join(order)}, c{levels} ...",
            flush=True,
        )
        with benchlog.phase("wallet rounds", args.rounds * round_s * len(order) * len(levels)):
            for n in range(args.rounds):
                for c in levels:
                    for side in order[n % len(order) :] + order[: n % len(order)]:
                        await owner.execute("CHECKPOINT", timeout=600)
                        if side == "ledger":
                            run = await bench.spread(wallets, c, round_s, f"w{n}c{c}")
                        else:
                            run = await served[side].run(c, round_s)
                        runs[c][side].append(run)
                print(
                    f"  round {n + 1}: "
                    + "; ".join(
                        f"c{c} " + " ".join(f"{k} {runs[c][k][-1]['transfers_per_s']:.0f}" for k in order)
                        for c in levels
                    ),
                    flush=True,
                )
    return {"rounds": args.rounds, "round_s": round_s, "sides": order, "runs": runs}


def _env(pairs: list[str] | None) -> dict[str, str] | None:
    """``KEY=VALUE`` arguments as wallet-api's extra environment (None: none)."""
    if not pairs:
        return None
    return dict(pair.split("=", 1) for pair in pairs)


def wallet_summary(rounds: dict[str, Any]) -> dict[str, Any]:
    """Per concurrency: the medians and spreads of wallet/ledger (and before/ledger, after/before),
    p99 (median of the rounds'), wallet-api's CPU a transfer (median)."""

    def ratio(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
        rs = sorted(x["transfers_per_s"] / max(y["transfers_per_s"], 1e-9) for x, y in zip(a, b, strict=True))
        return {"median": round(statistics.median(rs), 3), "spread": [round(rs[0], 3), round(rs[-1], 3)]}

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return round(statistics.median(r.get(key, 0) for r in runs), 2)

    out: dict[str, Any] = {}
    for c, sides in rounds["runs"].items():
        row: dict[str, Any] = {"wallet_vs_ledger": ratio(sides["wallet"], sides["ledger"])}
        for side in (s for s in sides if s != "ledger"):
            row[side] = {
                "transfers_per_s": med(sides[side], "transfers_per_s"),
                "p50_ms": med(sides[side], "p50_ms"),
                "p99_ms": med(sides[side], "p99_ms"),
                "server_cpu_us": med(sides[side], "server_cpu_us"),
                "db_cpu_us": med(sides[side], "db_cpu_us"),
                "machine_cpu_us": med(sides[side], "machine_cpu_us"),
                "errors": sum(r["errors"] for r in sides[side]),
            }
        row["ledger"] = {"transfers_per_s": med(sides["ledger"], "transfers_per_s")}
        if "before" in sides:
            row["before_vs_ledger"] = ratio(sides["before"], sides["ledger"])
            row["after_vs_before"] = ratio(sides["wallet"], sides["before"])
        out[f"c{c}"] = row
    return out


async def interleaved(
    bench: Bench, wallets: list[str], owner: asyncpg.Connection, pool: asyncpg.Pool, args: argparse.Namespace
) -> dict[str, Any]:
    """The ledger's p2p at 8 clients against pgbench at 8 and against the seed-004 shape at 8,
    in short rounds taken in turn (ABBA-like: the order rotates each round), so that each ratio
    compares figures seconds apart: this machine's speed drifts by a third within minutes. The
    figure is the median of the rounds' ratios, with the spread (min, max)."""
    bare = BareLedger(pool)
    accounts = await bare.setup(owner, WALLETS)
    rng = random.Random(11)
    round_s = args.round_s
    sides: dict[str, list[float]] = {
        "ledger": [],
        "pgbench": [],
        "bare": [],
        "batched": [],
        "hot_c32": [],
        "spread_c32": [],
    }
    hot_p99: list[float] = []

    async def bare_op(w: int, n: int) -> int:
        a, b = rng.sample(accounts, 2)
        await bare.transfer(f"bare-{bench.run_id}-{len(sides['bare'])}-{w}-{n}", a, b, rng.randint(1, 10_000))
        return 1

    order = list(sides)
    print(
        f"interleaved: {args.rounds} rounds of {round_s:g} s each, ledger / pgbench / seed-004 shape at 8,"
        " batched, hot account and p2p at 32 ...",
        flush=True,
    )
    with (
        PgbenchDb(args.pgbench_scale) as pg,
        benchlog.phase("interleaved rounds", args.rounds * round_s * len(order)),
    ):
        for n in range(args.rounds):
            k = n % len(order)
            for side in order[k:] + order[:k]:
                if side == "pgbench":
                    sides[side].append(await pg.run(round_s, 8))
                elif side == "ledger":
                    sides[side].append((await bench.spread(wallets, 8, round_s, f"i{n}"))["transfers_per_s"])
                elif side == "bare":
                    sides[side].append((await run_load(8, round_s, bare_op))["transfers_per_s"])
                elif side == "batched":
                    result = await bench.batched(wallets, 2, round_s, args.batch, f"ib{n}")
                    sides[side].append(result["transfers_per_s"])
                elif side == "hot_c32":
                    result = await bench.topups(wallets, 32, round_s, f"ih{n}")
                    sides[side].append(result["transfers_per_s"])
                    hot_p99.append(result["p99_ms"])
                else:
                    sides[side].append(
                        (await bench.spread(wallets, 32, round_s, f"is{n}"))["transfers_per_s"]
                    )
    versus_pg = sorted(lg / pg for lg, pg in zip(sides["ledger"], sides["pgbench"], strict=True))
    versus_bare = sorted(lg / b for lg, b in zip(sides["ledger"], sides["bare"], strict=True))
    batched = sorted(b / pg for b, pg in zip(sides["batched"], sides["pgbench"], strict=True))
    hot = sorted(h / s for h, s in zip(sides["hot_c32"], sides["spread_c32"], strict=True))
    result = {
        "rounds": args.rounds,
        "round_s": round_s,
        "per_s": {k: [round(v, 1) for v in vs] for k, vs in sides.items()},
        "ledger_vs_pgbench_c8": round(statistics.median(versus_pg), 2),
        "ledger_vs_pgbench_c8_spread": [round(versus_pg[0], 2), round(versus_pg[-1], 2)],
        "ledger_vs_bare_c8": round(statistics.median(versus_bare), 2),
        "ledger_vs_bare_c8_spread": [round(versus_bare[0], 2), round(versus_bare[-1], 2)],
        "batched_vs_pgbench_c8": round(statistics.median(batched), 2),
        "batched_vs_pgbench_c8_spread": [round(batched[0], 2), round(batched[-1], 2)],
        "hot_vs_spread_c32": round(statistics.median(hot), 2),
        "hot_vs_spread_c32_spread": [round(hot[0], 2), round(hot[-1], 2)],
        "hot_c32_p99_ms": round(statistics.median(hot_p99), 2),
    }
    print(f"  {result}", flush=True)
    return result


async def quiesce(owner: asyncpg.Connection) -> None:
    """Before each measured run, as pgbench does before its own (it vacuums its tables): vacuum
    what the previous runs wrote and checkpoint, so that no run pays for an earlier one's
    autovacuum or checkpoint."""
    await owner.execute("VACUUM (ANALYZE) ledger.accounts, ledger.transactions, ledger.lines", timeout=600)
    await owner.execute("CHECKPOINT", timeout=600)


async def wallet_api(report: dict[str, Any], concurrency: int, duration_s: float) -> None:
    """wallet-api over HTTP with real tokens (bench/wallet_api_bench.py) at this concurrency, in
    a process of its own: its load client then starts as fresh as when run alone, not in this
    process with the ledger runs' heap behind it."""
    script = Path(__file__).parent / "wallet_api_bench.py"
    print(f"wallet-api over HTTP, concurrency {concurrency} ...", flush=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        "--duration",
        str(duration_s),
        "--concurrency",
        str(concurrency),
        stdout=asyncio.subprocess.PIPE,
    )
    # Its own start (identity, wallet-api, funded wallets) comes before the timed run.
    with benchlog.phase(f"wallet-api, concurrency {concurrency}", duration_s):
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"wallet-api bench failed with {proc.returncode}")
    key = f"wallet_api_c{concurrency}"
    report[key] = json.loads(out.decode().strip().splitlines()[-1])
    print(f"  {report[key]}", flush=True)


def ratios(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"peak_rss_mb": r["peak_rss_mb"]}
    checks: dict[str, bool] = {}
    if "pgbench_c8" in r:
        pg = r["pgbench_c8"]["tps"]
        spread_c32 = r["spread_c32"]["transfers_per_s"]
        out |= {
            "spread_c8_vs_pgbench_c8": round(r["spread_c8"]["transfers_per_s"] / pg, 2),
            "hot_vs_spread_c32": round(r["hot_c32"]["transfers_per_s"] / spread_c32, 2),
            "hot_c32_p99_ms": r["hot_c32"]["p99_ms"],
            "hot_single_row_vs_spread_c32": round(r["hot_single_row_c32"]["transfers_per_s"] / spread_c32, 2),
            "batched_vs_pgbench_c8": round(r["batched"]["transfers_per_s"] / pg, 2),
        }
        checks |= {
            "spread_c8_vs_pgbench_c8": out["spread_c8_vs_pgbench_c8"] >= TARGETS["spread_c8_vs_pgbench_c8"],
            "hot_vs_spread_c32": out["hot_vs_spread_c32"] >= TARGETS["hot_vs_spread_c32"],
            "hot_c32_p99_ms": out["hot_c32_p99_ms"] < TARGETS["hot_c32_p99_ms_max"],
            "batched_vs_pgbench_c8": out["batched_vs_pgbench_c8"] >= TARGETS["batched_vs_pgbench_c8"],
        }
    if "interleaved" in r:
        i = r["interleaved"]
        out |= {
            k: i[k]
            for k in (
                "ledger_vs_pgbench_c8",
                "ledger_vs_pgbench_c8_spread",
                "ledger_vs_bare_c8",
                "ledger_vs_bare_c8_spread",
            )
        } | {
            f"{k}_rounds": i[k]
            for k in (
                "batched_vs_pgbench_c8",
                "batched_vs_pgbench_c8_spread",
                "hot_vs_spread_c32",
                "hot_vs_spread_c32_spread",
                "hot_c32_p99_ms",
            )
        }
        checks["ledger_vs_pgbench_c8_rounds"] = (
            i["ledger_vs_pgbench_c8"] >= TARGETS["ledger_vs_pgbench_c8_rounds"]
        )
        checks["ledger_vs_bare_c8"] = i["ledger_vs_bare_c8"] >= TARGETS["ledger_vs_bare_c8"]
        checks["batched_vs_pgbench_c8_rounds"] = (
            i["batched_vs_pgbench_c8"] >= TARGETS["batched_vs_pgbench_c8_rounds"]
        )
        checks["hot_vs_spread_c32_rounds"] = i["hot_vs_spread_c32"] >= TARGETS["hot_vs_spread_c32_rounds"]
        checks["hot_c32_p99_ms_rounds"] = i["hot_c32_p99_ms"] < TARGETS["hot_c32_p99_ms_rounds_max"]
    checks["peak_rss_mb"] = out["peak_rss_mb"] < TARGETS["peak_rss_mb_max"]
    if isinstance(r.get("wallet_api_c8"), dict):
        out["wallet_api_c8_vs_ledger_c8"] = round(
            r["wallet_api_c8"]["transfers_per_s"] / r["spread_c8"]["transfers_per_s"], 2
        )
        out["wallet_api_c32_vs_ledger_c32"] = round(
            r["wallet_api_c32"]["transfers_per_s"] / r["spread_c32"]["transfers_per_s"], 2
        )
        out["wallet_api_c8_p99_ms"] = r["wallet_api_c8"]["p99_ms"]
        out["wallet_api_rss_mb"] = max(
            r["wallet_api_c8"].get("rss_mb", 0), r["wallet_api_c32"].get("rss_mb", 0)
        )
        out["wallet_api_rss_total_mb"] = max(
            r["wallet_api_c8"].get("rss_total_mb", 0), r["wallet_api_c32"].get("rss_total_mb", 0)
        )
    if "wallet_api_c8_vs_ledger_c8" in out:
        checks["wallet_api_c8_vs_ledger_c8"] = (
            out["wallet_api_c8_vs_ledger_c8"] >= TARGETS["wallet_api_c8_vs_ledger_c8"]
        )
        checks["wallet_api_c32_vs_ledger_c32"] = (
            out["wallet_api_c32_vs_ledger_c32"] >= TARGETS["wallet_api_c8_vs_ledger_c8"]
        )
        checks["wallet_api_c8_p99_ms"] = out["wallet_api_c8_p99_ms"] < TARGETS["wallet_api_c8_p99_ms_max"]
        checks["wallet_api_rss_mb"] = out["wallet_api_rss_mb"] < TARGETS["wallet_api_rss_mb_max"]
    out["targets_met"] = checks
    return out


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=15, help="seconds per run (default 15)")
    parser.add_argument("--batch", type=int, default=1000, help="transfers per batched transaction")
    parser.add_argument("--pgbench-scale", type=int, default=10)
    parser.add_argument("--skip-wallet-api", action="store_true")
    parser.add_argument(
        "--wallet-api-only",
        action="store_true",
        help="only the ledger core's p2p runs at 8 and 32, each followed by wallet-api's",
    )
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (0: none)")
    parser.add_argument("--round-s", type=float, default=4.0, help="seconds of each side in a round")
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    parser.add_argument(
        "--only",
        choices=["wallet"],
        help="wallet: only wallet-api against the ledger's p2p, in --rounds interleaved rounds",
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[8, 32], help="with --only wallet (default 8 32)"
    )
    parser.add_argument(
        "--baseline",
        help="with --only wallet: the src folder of the code before (git archive), in the same rounds",
    )
    parser.add_argument(
        "--after-env",
        nargs="+",
        metavar="KEY=VALUE",
        help="with --only wallet: more of wallet-api's environment (a setting), e.g. "
        "HIWALLET_WALLET_API_TRANSFER_PARTS=2",
    )
    parser.add_argument(
        "--baseline-env",
        nargs="+",
        metavar="KEY=VALUE",
        help="with --only wallet: the before side's environment; without --baseline, the before "
        "side is this tree with it (a setting against another, in the same rounds)",
    )
    args = parser.parse_args()
    benchlog.to_file()
    # uvloop, as the services run (uvicorn picks it): the client's own loop overhead is part of
    # every latency here, and at concurrency 8 the machine waits on latency, not on its CPUs.
    report = uvloop.run(main(args))
    path = benchlog.save("ledger", report)
    print(json.dumps(report["ratios"], indent=2))
    if args.only == "wallet":
        print(f"results: {path}")
        sys.exit(0 if report["verify"]["ok"] else 1)
    print(f"verify: {'clean' if report['verify']['ok'] else report['verify']['problems']}")
    print(f"results: {path}")
    sys.exit(0 if report["verify"]["ok"] else 1)


if __name__ == "__main__":
    cli()
