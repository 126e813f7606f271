"""The posting function's cost a call for a few postings, before a change and after it (issue 26:
a call of 2 to 8 p2p transfers, as the ledger's coalescer and wallet-api send at 8 clients).

    git archive <base> | tar -x -C /tmp/before
    .venv/bin/python bench/post_call_cost.py --before /tmp/before [--postings 1 2 4 8 --rounds 12]
    .venv/bin/python bench/post_call_cost.py --explain 200      # each statement's time in a call
    .venv/bin/python bench/post_call_cost.py --perf 10          # perf record of the backend

Two databases, one migrated by each tree's migrations (so a changed trigger is measured too),
each with ``--wallets`` funded wallets, then ``ANALYZE`` (over a thousand transactions: not the
tiny-table trap of docs/performance.md). Each round calls, for each size, ``--calls`` times
``SELECT ledger.post_batch($1)`` with new p2p transfers among the wallets, each call its own
statement in autocommit as the ledger's p2p path sends it, as the wallet database's app role,
on one session a side; the sides alternate within every round, and their answers are compared
(but posted_at). The figure is the backend's CPU a call from /proc/PID/schedstat (ns; the
server must run on this machine), commit included: on a shared, loaded machine the time measures
the neighbours, the CPU much less so. Without ``--before`` both sides run this tree (the noise).

``--explain N``: N warming calls of each size, then auto_explain (loaded in a superuser session
of this tool's own database only) logs every statement the function runs, nested, with its
duration, for ``--calls`` calls of each size: the sum a call of each statement is printed.
``--perf S``: ``perf record`` of the after side's backend for S seconds of calls of the first
size. ``--parts``: what a call of the first size is made of, on this tree's function: a call
committed alone; one, two and four calls in a transaction rolled back (what a transaction costs
beside its calls); a bare ``SELECT 1`` in one; and, on the other database, a call committed with
its balance trigger disabled and enabled again in turn (what the trigger costs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

import benchlog
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.ledger import rules
from hiwallet.ledger.store import LedgerStore, init_connection

HERE = Path(__file__).resolve().parent
STORE = LedgerStore(None, coalesce_writers=0)  # type: ignore[arg-type]  # only its encoding


def backend_cpu_s(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


class Side:
    def __init__(self, name: str, folder: Path) -> None:
        self.name, self.folder = name, folder
        self.database = f"hiwallet_bench_postcost_{name}_{os.getpid()}"
        self.conn: asyncpg.Connection
        self.pid = 0
        self.wallets: list[str] = []

    async def open(self, wallets: int) -> None:
        settings = get_settings()
        await db.migrate(
            "wallet",
            self.database,
            settings,
            folder=self.folder,
            services=databases.SERVICE_ROLES.get("wallet", ()),
        )
        owner = await asyncpg.connect(db.owner_dsn(self.database, settings))
        try:
            await init_connection(owner)
            self.wallets = [f"{1 + (i * 7919) % 1023:04d}:w:bench-{i:04d}" for i in range(wallets)]
            for w in self.wallets:
                b = int(w[:4])
                await owner.execute(
                    "SELECT ledger.ensure_system_accounts($1, 'TRY', ARRAY['stripe', 'bank'])", b
                )
                await owner.execute(
                    "SELECT ledger.open_account($1, $2, 'cash', 'TRY', 'bench')", b, f"{w}:cash"
                )
            fund = [
                rules.topup(f"fund-{i}", w, 10**12, "TRY", provider="bank", actor="bench", ref="f")
                for i, w in enumerate(self.wallets)
            ]
            for i in range(0, len(fund), 250):
                await owner.fetchval("SELECT ledger.post_batch($1)", STORE.batch_arguments(fund[i : i + 250]))
            await owner.execute("ANALYZE")
        finally:
            await owner.close()
        self.conn = await asyncpg.connect(db.service_dsn(self.database, db.app_role("wallet"), settings))
        await init_connection(self.conn)
        self.pid = await self.conn.fetchval("SELECT pg_backend_pid()")

    async def close(self) -> None:
        await self.conn.close()
        admin = await asyncpg.connect(db.owner_dsn("postgres", get_settings()))
        await admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        await admin.close()


def batches(wallets: list[str], size: int, calls: int, tag: str, rng: random.Random) -> list[list[Any]]:
    """``calls`` calls of ``size`` p2p transfers, no account twice in a call (the coalescer's
    parts never share one either)."""
    out = []
    for c in range(calls):
        picked = rng.sample(wallets, 2 * size)
        out.append(
            STORE.batch_arguments(
                [
                    rules.transfer(
                        f"{tag}-{c}-{k}",
                        picked[2 * k],
                        picked[2 * k + 1],
                        rng.randint(1, 10_000),
                        "TRY",
                        actor="bench",
                        ref="p2p",
                    )
                    for k in range(size)
                ]
            )
        )
    return out


def strip(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in a.items() if k != "posted_at"} for a in raw]


async def ab(args: argparse.Namespace, sides: list[Side]) -> dict[str, Any]:
    cpu: dict[int, dict[str, list[float]]] = {n: {s.name: [] for s in sides} for n in args.postings}
    rng = random.Random(26)
    for n in args.postings:  # warm: plans cached, catalogs read
        for side in sides:
            for call in batches(side.wallets, n, 20, f"warm{n}", random.Random(n)):
                await side.conn.fetchval("SELECT ledger.post_batch($1)", call)
    for r in range(args.rounds):
        for n in args.postings:
            calls = batches(sides[0].wallets, n, args.calls, f"r{r}n{n}", rng)
            answers = {}
            for side in sides if r % 2 == 0 else sides[::-1]:
                started = backend_cpu_s(side.pid)
                for call in calls:
                    answers[side.name] = await side.conn.fetchval("SELECT ledger.post_batch($1)", call)
                cpu[n][side.name].append((backend_cpu_s(side.pid) - started) / args.calls)
            if strip(answers[sides[0].name]) != strip(answers[sides[1].name]):
                raise SystemExit(f"round {r}, {n} a call: the two sides answered differently")
        print(
            f"round {r + 1}: "
            + "; ".join(
                f"{n}: {cpu[n][sides[0].name][-1] * 1e6:.0f} -> {cpu[n][sides[1].name][-1] * 1e6:.0f} us"
                for n in args.postings
            ),
            flush=True,
        )
    report: dict[str, Any] = {"load_avg": [round(x, 1) for x in os.getloadavg()], "sizes": {}}
    for n in args.postings:
        before, after = cpu[n][sides[0].name], cpu[n][sides[1].name]
        ratios = sorted(a / b for a, b in zip(after, before, strict=True))
        report["sizes"][n] = {
            "before_us_a_call": round(statistics.median(before) * 1e6),
            "after_us_a_call": round(statistics.median(after) * 1e6),
            "after_vs_before": round(statistics.median(ratios), 3),
            "spread": [round(ratios[0], 2), round(ratios[-1], 2)],
        }
    return report


_DURATION = re.compile(r"duration: ([0-9.]+) ms\s+plan:\s*\n?Query Text: (.*?)(?:\n|$)", re.S)


async def explain(args: argparse.Namespace, side: Side) -> dict[str, Any]:
    """Each statement's duration a call (auto_explain, nested), by its first line."""
    settings = get_settings()
    su = await asyncpg.connect(db.owner_dsn(side.database, settings))
    await init_connection(su)
    messages: list[str] = []
    su.add_log_listener(lambda _c, m: messages.append(m.message))
    rng = random.Random(5)
    report: dict[str, Any] = {}
    for n in args.postings:
        for call in batches(side.wallets, n, args.explain, f"xw{n}", rng):
            await su.fetchval("SELECT ledger.post_batch($1)", call)
        await su.execute("LOAD 'auto_explain'")
        for s in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_analyze = off",
            "auto_explain.log_level = notice",
            "client_min_messages = notice",
        ):
            await su.execute(f"SET {s}")
        messages.clear()
        for call in batches(side.wallets, n, args.calls, f"xe{n}", rng):
            await su.fetchval("SELECT ledger.post_batch($1)", call)
        await su.execute("SET auto_explain.log_min_duration = -1")
        per: dict[str, float] = defaultdict(float)
        count: dict[str, int] = defaultdict(int)
        for m in messages:
            hit = _DURATION.search(m)
            if hit:
                key = " ".join(hit.group(2).split())[:90]
                per[key] += float(hit.group(1))
                count[key] += 1
        report[n] = {
            k: {"ms_a_call": round(v / args.calls, 4), "runs_a_call": count[k] / args.calls}
            for k, v in sorted(per.items(), key=lambda kv: -kv[1])
        }
    await su.close()
    return report


async def perf(args: argparse.Namespace, side: Side) -> str:
    out = f"/tmp/perf-postcost-{os.getpid()}.data"
    proc = await asyncio.create_subprocess_exec(
        "perf",
        "record",
        "-F",
        "2000",
        "-g",
        "-p",
        str(side.pid),
        "-o",
        out,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    rng = random.Random(7)
    await asyncio.sleep(0.5)
    deadline = time.monotonic() + args.perf
    k = 0
    while time.monotonic() < deadline:
        for call in batches(side.wallets, args.postings[0], 50, f"perf{k}", rng):
            await side.conn.fetchval("SELECT ledger.post_batch($1)", call)
        k += 1
    proc.send_signal(signal.SIGINT)
    await proc.wait()
    return out


async def parts(args: argparse.Namespace, sides: list[Side]) -> dict[str, Any]:
    """A call's parts (see the module's text): backend CPU a transaction, medians of rounds."""
    main_side, other = sides[1], sides[0]
    settings = get_settings()
    owner = await asyncpg.connect(db.owner_dsn(other.database, settings))
    n = args.postings[0]
    rng = random.Random(11)
    out: dict[str, list[float]] = defaultdict(list)

    async def run(side: Side, label: str, per_tx: int | None) -> None:
        calls = batches(
            side.wallets, n, args.calls * (per_tx or 1), f"parts{sum(map(len, out.values()))}", rng
        )
        started = backend_cpu_s(side.pid)
        if per_tx is None:
            for call in calls:
                await side.conn.fetchval("SELECT ledger.post_batch($1)", call)
        else:
            for k in range(args.calls):
                tx = side.conn.transaction()
                await tx.start()
                for call in calls[k * per_tx : (k + 1) * per_tx] if per_tx else []:
                    await side.conn.fetchval("SELECT ledger.post_batch($1)", call)
                if not per_tx:
                    await side.conn.fetchval("SELECT 1")
                await tx.rollback()
        out[label].append((backend_cpu_s(side.pid) - started) / args.calls * 1e6)

    for _ in range(args.rounds):
        await run(main_side, "a call committed", None)
        for per_tx in (0, 1, 2, 4):
            await run(main_side, f"{per_tx} calls in a transaction rolled back", per_tx)
        await run(main_side, "a call committed, with the trigger", None)
        await owner.execute("ALTER TABLE ledger.lines DISABLE TRIGGER lines_balanced")
        await run(other, "a call committed, no balance trigger", None)
        await owner.execute("ALTER TABLE ledger.lines ENABLE TRIGGER lines_balanced")
        await run(other, "a call committed, the trigger back on", None)
    await owner.close()
    return {
        "postings_a_call": n,
        "load_avg": [round(x, 1) for x in os.getloadavg()],
        "us_a_transaction": {k: round(statistics.median(v)) for k, v in out.items()},
    }


async def main(args: argparse.Namespace) -> None:
    here = HERE.parent / "migrations" / "wallet"
    sides = [
        Side("before", Path(args.before) / "migrations" / "wallet" if args.before else here),
        Side("after", here),
    ]
    try:
        for side in sides:
            await side.open(args.wallets)
        if args.explain:
            print(json.dumps(await explain(args, sides[1]), indent=1))
        elif args.perf:
            print("perf data:", await perf(args, sides[1]))
        elif args.parts:
            report = await parts(args, sides)
            print(json.dumps(report, indent=1))
            print(f"results: {benchlog.save('post-call-parts', report)}")
        else:
            report = await ab(args, sides)
            report |= {"before": args.before, "rounds": args.rounds, "calls": args.calls}
            print(json.dumps(report, indent=1))
            print(f"results: {benchlog.save('post-call', report)}")
    finally:
        for side in sides:
            if side.pid:
                await side.close()


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", help="a tree of the code before (its migrations/)")
    parser.add_argument("--postings", type=int, nargs="+", default=[1, 2, 4, 8], help="transfers a call")
    parser.add_argument("--wallets", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=100, help="calls a side, a size and a round")
    parser.add_argument("--explain", type=int, default=0, help="warming calls, then statements' durations")
    parser.add_argument("--perf", type=float, default=0, help="seconds of perf record of the after side")
    parser.add_argument("--parts", action="store_true", help="what a call of the first size is made of")
    uvloop.run(main(parser.parse_args()))
    sys.exit(0)


if __name__ == "__main__":
    cli()
