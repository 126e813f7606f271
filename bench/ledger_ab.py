"""The ledger's code before a change and after it, in interleaved rounds of one run (issue 26):
batched posting, the hot account, p2p at 8 and 32, each side against pgbench's tpcb-like at 8
clients measured in the same round.

    git archive <base> | tar -x -C /tmp/before     # the code before (its src/ and migrations/)
    .venv/bin/python bench/ledger_ab.py --before /tmp/before [--rounds 6 --round-s 4]

Each side is a process of its own (this script with ``--worker``) that imports ``hiwallet`` from
its tree (``PYTHONPATH``) and migrates a database of its own from that tree's migrations, opens
and funds 1,000 wallets, then runs what it is told: the same load loops as
bench/ledger_bench.py. A round runs pgbench at 8 for ``--round-s`` and then each scenario on
both sides in turn (the order alternates each round), so every ratio compares figures seconds
apart on this shared machine. The figures are the medians of the rounds' ratios, with their
spread; the results as JSON in bench/results/ (``ledger-ab-…``); ``verify`` on both databases
at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCENARIOS = ("batched", "hot_c32", "spread_c32", "spread_c8")
# A worker's database: <prefix>_<side>_<pid>, and its database settings ("name=value;..."):
# bench/db_setting_ab.py's sides.
DB_PREFIX_ENV = "HIWALLET_BENCH_AB_PREFIX"
DB_SET_ENV = "HIWALLET_BENCH_AB_DB_SET"


# ---------------------------------------------------------------------------------------------
# A side: one tree's code, one database
# ---------------------------------------------------------------------------------------------


async def worker(side: str, batch: int) -> None:
    import asyncpg

    from hiwallet.contracts import databases
    from hiwallet.core import db
    from hiwallet.core.settings import get_settings
    from hiwallet.ledger.service import Fees, Ledger
    from hiwallet.ledger.store import LedgerStore, init_connection
    from ledger_bench import WALLETS, Bench

    settings = get_settings()
    prefix = os.environ.get(DB_PREFIX_ENV) or "hiwallet_bench_ab"
    database = f"{prefix}_{side}_{os.getpid()}"
    await databases.migrate("wallet", database=database, settings=settings)
    # A side's database settings (bench/db_setting_ab.py): set as the superuser after migrate,
    # before the pool opens, so every session of the side starts with them.
    db_set = [kv.split("=", 1) for kv in os.environ.get(DB_SET_ENV, "").split(";") if kv]
    if db_set:
        admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
        try:
            for name, value in db_set:
                await admin.execute(f'ALTER DATABASE "{database}" SET {name} = {value}')
        finally:
            await admin.close()
    pool = await db.create_pool(
        database, role=db.app_role("wallet"), settings=settings, min_size=4, max_size=34, init=init_connection
    )
    owner = await asyncpg.connect(db.owner_dsn(database, settings))
    try:
        ledger = Ledger(LedgerStore.from_settings(pool), Fees.from_settings())
        bench = Bench(pool, ledger, f"{side}{datetime.now(UTC):%H%M%S}")
        wallets = await bench.open_wallets(WALLETS)
        await owner.execute("ANALYZE")
        # what the application role's sessions see (the proof that the setting reached them)
        shown = {
            name: await pool.fetchval("SELECT current_setting($1)", name)
            for name in ("wal_compression", "commit_delay", "commit_siblings")
        }
        reply({"ready": True, "settings": shown, "database": database})
        loop = asyncio.get_running_loop()
        n = 0
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            what, seconds = line.split()
            s = float(seconds)
            n += 1
            if what == "batched":
                result = await bench.batched(wallets, 2, s, batch, f"b{n}")
            elif what.startswith("hot_c"):
                result = await bench.topups(wallets, int(what.removeprefix("hot_c")), s, f"h{n}")
            elif what == "wal":
                # right after a checkpoint of its own, so every side's sample meets the same
                # state: each page's first change logs the whole page
                await owner.execute("CHECKPOINT", timeout=120)
                result = await wal_sample(pool, ledger, wallets, int(s), f"w{n}{side}")
            elif what.startswith("spread_c"):
                result = await bench.spread(wallets, int(what.removeprefix("spread_c")), s, f"s{n}")
            elif what == "verify":
                report = await ledger.store.verify()
                result = {"ok": report.ok, "problems": report.problems[:5], "lines": report.lines}
            else:
                raise SystemExit(f"unknown command {what!r}")
            reply(result)
    finally:
        await pool.close()
        await owner.close()
        admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()


async def wal_sample(pool: Any, ledger: Any, wallets: list[str], count: int, tag: str) -> dict[str, Any]:
    """``count`` p2p transfers and ``count`` hot-account top-ups posted one at a time (after a
    CHECKPOINT: the caller's), each under EXPLAIN (ANALYZE, WAL): what a posting writes to the
    WAL (records, full-page images, bytes, its nested statements' included). Sums, divided by
    the postings."""
    import json as _json
    import random

    from hiwallet.ledger import rules
    from hiwallet.ledger.store import Q

    rng = random.Random(tag)
    out: dict[str, Any] = {}
    for shape in ("p2p", "hot"):
        sums = {"wal_records": 0.0, "wal_fpi": 0.0, "wal_bytes": 0.0, "ms": 0.0}
        for k in range(count):
            if shape == "p2p":
                a, b = rng.sample(wallets, 2)
                posting = rules.transfer(f"{tag}p{k}", a, b, rng.randint(1, 100), "TRY", actor="b", ref="p2p")
            else:
                posting = rules.topup(
                    f"{tag}h{k}",
                    rng.choice(wallets),
                    rng.randint(1, 100),
                    "TRY",
                    provider="stripe",
                    actor="b",
                    ref="pi",
                )
            batch = ledger.store.batch_arguments([posting])
            async with pool.acquire() as conn:
                plan = _json.loads(
                    await conn.fetchval("EXPLAIN (ANALYZE, WAL, FORMAT JSON) " + Q["post_batch"], batch)
                )[0]
            top = plan["Plan"]
            sums["wal_records"] += top.get("WAL Records", 0)
            sums["wal_fpi"] += top.get("WAL FPI", 0)
            sums["wal_bytes"] += top.get("WAL Bytes", 0)
            sums["ms"] += plan["Execution Time"]
        out[shape] = {k: round(v / max(count, 1), 3) for k, v in sums.items()}
    return out


def reply(value: dict[str, Any]) -> None:
    sys.stdout.write("@@ " + json.dumps(value) + "\n")
    sys.stdout.flush()


class Side:
    def __init__(self, name: str, tree: Path, batch: int, env: dict[str, str] | None = None) -> None:
        self.name, self.tree, self.batch, self.env = name, tree, batch, env or {}
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(self.tree / "src")) | self.env
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "ledger_ab.py"),
            "--worker",
            self.name,
            "--batch",
            str(self.batch),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            limit=2**20,
        )

    async def answer(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=900)
            if not line:
                raise RuntimeError(
                    f"side {self.name} stopped (its log: {os.environ.get('HIWALLET_BENCH_LOG')})"
                )
            if line.startswith(b"@@ "):
                result: dict[str, Any] = json.loads(line[3:])
                return result

    async def run(self, what: str, seconds: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"{what} {seconds}\n".encode())
        await self.proc.stdin.drain()
        return await self.answer()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            await asyncio.wait_for(self.proc.wait(), timeout=120)


def summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 2),
        "spread": [round(ordered[0], 2), round(ordered[-1], 2)],
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import benchlog
    from ledger_bench import PgbenchDb

    sides = {
        "before": Side("before", Path(args.before), args.batch),
        "after": Side("after", HERE.parent, args.batch, dict(e.split("=", 1) for e in args.after_env)),
    }
    for side in sides.values():
        await side.start()
    for side in sides.values():
        await side.answer()  # ready: migrated, wallets funded
    per_s: dict[str, dict[str, list[float]]] = {s: {k: [] for k in SCENARIOS} for s in sides}
    p99: dict[str, dict[str, list[float]]] = {s: {k: [] for k in SCENARIOS} for s in sides}
    pgbench: list[float] = []
    order = ["before", "after"]
    print(
        f"{args.rounds} rounds of {args.round_s:g} s a run: pgbench c8, then "
        f"{', '.join(SCENARIOS)} on each side",
        flush=True,
    )
    with PgbenchDb(args.pgbench_scale) as pg, benchlog.phase("rounds", args.rounds * args.round_s * 9):
        for n in range(args.rounds):
            pgbench.append(await pg.run(args.round_s, 8))
            for what in SCENARIOS:
                for name in order if n % 2 == 0 else order[::-1]:
                    result = await sides[name].run(what, args.round_s)
                    per_s[name][what].append(result["transfers_per_s"])
                    p99[name][what].append(result["p99_ms"])
            print(
                f"  round {n + 1}: pgbench {pgbench[-1]:.0f} tps; "
                + "; ".join(
                    f"{w} {per_s['before'][w][-1]:.0f} -> {per_s['after'][w][-1]:.0f}" for w in SCENARIOS
                ),
                flush=True,
            )
    verified = {name: await side.run("verify", 0) for name, side in sides.items()}
    for side in sides.values():
        await side.stop()
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "before": args.before,
        "after_env": args.after_env,
        "rounds": args.rounds,
        "round_s": args.round_s,
        "load_avg": os.getloadavg(),
        "pgbench_c8": pgbench,
        "per_s": per_s,
        "p99_ms": p99,
        "verify": verified,
    }
    ratios: dict[str, Any] = {}
    for name in sides:
        s = per_s[name]
        ratios[name] = {
            "batched_vs_pgbench_c8": summary([b / p for b, p in zip(s["batched"], pgbench, strict=True)]),
            "hot_vs_spread_c32": summary([h / x for h, x in zip(s["hot_c32"], s["spread_c32"], strict=True)]),
            "hot_c32_p99_ms": summary(p99[name]["hot_c32"]),
            "spread_c8_vs_pgbench_c8": summary([x / p for x, p in zip(s["spread_c8"], pgbench, strict=True)]),
        }
    ratios["after_vs_before"] = {
        w: summary([a / b for a, b in zip(per_s["after"][w], per_s["before"][w], strict=True)])
        for w in SCENARIOS
    }
    report["ratios"] = ratios
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", help="a tree of the code before (its src/ and migrations/)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=float, default=4.0)
    parser.add_argument("--batch", type=int, default=1000, help="transfers per batched transaction")
    parser.add_argument("--pgbench-scale", type=int, default=10)
    parser.add_argument(
        "--after-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the after side only (e.g. HIWALLET_LEDGER_COALESCE_WRITERS=2): a setting's A/B",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import uvloop

    if args.worker:
        uvloop.run(worker(args.worker, args.batch))
        return
    if not args.before:
        parser.error("--before is required")
    args.before = str(Path(args.before).resolve())
    import benchlog

    benchlog.to_file()
    report = uvloop.run(main(args))
    path = benchlog.save("ledger-ab", report)
    print(json.dumps(report["ratios"], indent=2))
    ok = all(v["ok"] for v in report["verify"].values())
    print(f"verify: {'clean' if ok else report['verify']}")
    print(f"results: {path}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    cli()
