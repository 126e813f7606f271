"""Per-database settings of the wallet database, A/B in interleaved rounds of one run (issue 26):
the same code on every side, each side a database of its own with its own ``ALTER DATABASE ...
SET`` (wal_compression, commit_delay, ...), the ledger's hot account and p2p at 8 and 32 clients
and pgbench's tpcb-like at 8 (its own database, no setting) in the same rounds.

    .venv/bin/python bench/db_setting_ab.py --side off:wal_compression=off \\
        --side lz4:wal_compression=lz4 [--side zstd:wal_compression=zstd] \\
        [--checkpoint-every 2] [--rounds 6 --round-s 4 --wal-sample 100]

A ``--side`` is NAME:SETTING=VALUE[,SETTING=VALUE...] (NAME alone: the database as migrate makes
it). Each side is bench/ledger_ab.py's worker (this tree's code, a database of its own, 1,000
funded wallets) with its settings set by the superuser before its pool opens; its ``ready``
answer carries what the application role's sessions show for them. A round runs pgbench at 8,
then each scenario on every side in turn (the order rotating each round), then ``--wal-sample``
p2p transfers and hot top-ups per side, each posted alone under EXPLAIN (ANALYZE, WAL): records,
full-page images and bytes a posting. ``--checkpoint-every S``: a CHECKPOINT every S seconds
from a side connection for the whole run, as this shared server meets while tests and benches
drop databases. Figures: each side's medians and spread of the rounds' ratios against the first
side, the hot ÷ spread ratio at 32 and the p99s; JSON in bench/results/ (``db-setting-ab-…``);
``verify`` on every side at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCENARIOS = ("hot_c32", "spread_c32", "hot_c8", "spread_c8")


def summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 3),
        "spread": [round(ordered[0], 3), round(ordered[-1], 3)],
    }


async def checkpoints(every_s: float, stop: asyncio.Event, count: list[int]) -> None:
    import asyncpg

    from hiwallet.core import db
    from hiwallet.core.settings import get_settings

    conn = await asyncpg.connect(db.owner_dsn("postgres", get_settings()))
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            if not stop.is_set():
                await conn.execute("CHECKPOINT", timeout=120)
                count[0] += 1
    finally:
        await conn.close()


async def checkpoints_req() -> int:
    """The server's requested checkpoints so far (everyone's: the tests' DROP DATABASEs too)."""
    import asyncpg

    from hiwallet.core import db
    from hiwallet.core.settings import get_settings

    conn = await asyncpg.connect(db.owner_dsn("postgres", get_settings()))
    try:
        value: int = await conn.fetchval("SELECT checkpoints_req FROM pg_stat_bgwriter")
        return value
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import benchlog
    import ledger_ab
    from ledger_bench import PgbenchDb

    sides: dict[str, ledger_ab.Side] = {}
    for spec in args.side:
        name, _, settings = spec.partition(":")
        env = {
            ledger_ab.DB_PREFIX_ENV: "wal_ab",
            ledger_ab.DB_SET_ENV: ";".join(s for s in settings.split(",") if s),
        }
        sides[name] = ledger_ab.Side(name, HERE.parent, 1000, env)
    for side in sides.values():
        await side.start()
    shown = {name: await side.answer() for name, side in sides.items()}
    print(f"sides: {json.dumps(shown)}", flush=True)
    names = list(sides)
    per_s: dict[str, dict[str, list[float]]] = {s: {k: [] for k in SCENARIOS} for s in names}
    p99: dict[str, dict[str, list[float]]] = {s: {k: [] for k in SCENARIOS} for s in names}
    wal: dict[str, list[dict[str, Any]]] = {s: [] for s in names}
    pgbench: list[float] = []
    loads: list[float] = []
    stop = asyncio.Event()
    forced = [0]
    ticker = (
        asyncio.create_task(checkpoints(args.checkpoint_every, stop, forced))
        if args.checkpoint_every
        else None
    )
    pg = PgbenchDb(args.pgbench_scale)
    pg.name = f"wal_ab_pgbench_{os.getpid()}"
    from hiwallet.core import db
    from hiwallet.core.settings import get_settings

    pg.dsn = db.owner_dsn(pg.name, get_settings())
    ckpt_before = await checkpoints_req()
    try:
        with pg, benchlog.phase("rounds", args.rounds * args.round_s * (1 + len(SCENARIOS) * len(names))):
            for n in range(args.rounds):
                loads.append(os.getloadavg()[0])
                pgbench.append(await pg.run(args.round_s, 8))
                order = names[n % len(names) :] + names[: n % len(names)]
                for what in SCENARIOS:
                    for name in order:
                        result = await sides[name].run(what, args.round_s)
                        per_s[name][what].append(result["transfers_per_s"])
                        p99[name][what].append(result["p99_ms"])
                if args.wal_sample:
                    for name in order:
                        wal[name].append(await sides[name].run("wal", args.wal_sample))
                print(
                    f"  round {n + 1} (load {loads[-1]:.1f}): pgbench {pgbench[-1]:.0f}; "
                    + "; ".join(
                        f"{w} " + " / ".join(f"{per_s[s][w][-1]:.0f}" for s in names) for w in SCENARIOS
                    ),
                    flush=True,
                )
    finally:
        stop.set()
        if ticker is not None:
            await ticker
    ckpt = await checkpoints_req() - ckpt_before
    verified = {name: await side.run("verify", 0) for name, side in sides.items()}
    for side in sides.values():
        await side.stop()
    base = names[0]
    ratios: dict[str, Any] = {}
    for name in names:
        s = per_s[name]
        ratios[name] = {
            "hot_vs_spread_c32": summary([h / x for h, x in zip(s["hot_c32"], s["spread_c32"], strict=True)]),
            "hot_c32_p99_ms": summary(p99[name]["hot_c32"]),
            "spread_c32_p99_ms": summary(p99[name]["spread_c32"]),
            "hot_c8_p99_ms": summary(p99[name]["hot_c8"]),
            "spread_c8_p99_ms": summary(p99[name]["spread_c8"]),
            "spread_c8_vs_pgbench_c8": summary([x / p for x, p in zip(s["spread_c8"], pgbench, strict=True)]),
            **{w + "_per_s": summary(s[w]) for w in SCENARIOS},
        }
        if name != base:
            ratios[name][f"vs_{base}"] = {
                w: summary([a / b for a, b in zip(s[w], per_s[base][w], strict=True)]) for w in SCENARIOS
            }
        if wal[name]:
            ratios[name]["wal_a_posting"] = {
                shape: {
                    f: round(statistics.median(r[shape][f] for r in wal[name]), 2)
                    for f in ("wal_bytes", "wal_fpi", "wal_records", "ms")
                }
                for shape in ("p2p", "hot")
            }
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "sides": {name: spec for name, spec in zip(names, args.side, strict=True)},
        "shown": shown,
        "rounds": args.rounds,
        "round_s": args.round_s,
        "checkpoint_every_s": args.checkpoint_every,
        "checkpoints_forced": forced[0],
        "checkpoints_req": ckpt,
        "load_avg_rounds": loads,
        "load_avg": os.getloadavg(),
        "pgbench_c8": pgbench,
        "per_s": per_s,
        "p99_ms": p99,
        "wal": wal,
        "ratios": ratios,
        "verify": verified,
    }


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", action="append", required=True, help="NAME[:SETTING=VALUE,...]")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=float, default=4.0)
    parser.add_argument("--wal-sample", type=int, default=100, help="postings explained per side a round")
    parser.add_argument("--checkpoint-every", type=float, default=0.0, help="seconds; 0: none forced")
    parser.add_argument("--pgbench-scale", type=int, default=10)
    args = parser.parse_args()
    if len(args.side) < 2:
        parser.error("two sides at least")
    import uvloop

    import benchlog

    benchlog.to_file()
    report = uvloop.run(main(args))
    path = benchlog.save("db-setting-ab", report)
    for name, r in report["ratios"].items():
        vs = r.get(next((k for k in r if k.startswith("vs_")), ""), {})
        print(
            f"{name}: hot/spread c32 {r['hot_vs_spread_c32']['median']} {r['hot_vs_spread_c32']['spread']}, "
            f"p99 hot c32 {r['hot_c32_p99_ms']['median']} ms, spread c8/pgbench "
            f"{r['spread_c8_vs_pgbench_c8']['median']}"
            + "".join(f"; {w} x{v['median']} {v['spread']}" for w, v in vs.items())
            + f"; WAL a posting {r.get('wal_a_posting')}"
        )
    print(f"checkpoints requested on the server during the rounds: {report['checkpoints_req']}")
    ok = all(v["ok"] for v in report["verify"].values())
    print(f"verify: {'clean' if ok else report['verify']}")
    print(f"results: {path}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    cli()
