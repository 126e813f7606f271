"""What an index of the ledger costs a p2p transfer on a loaded database (issue 26): the loaded
database as it is, copies of it each without some of ledger.lines' or ledger.transactions'
indexes, and a fresh database, in interleaved rounds of bench/growth_bench.py's p2p.

    .venv/bin/python bench/growth_index_ab.py --database NAME --drop lines_by_time \\
        --drop lines_by_transaction --drop lines_by_time,lines_by_transaction [--rounds 12 --round-s 4]

A measuring tool, not a proposal: every index of the ledger is read by some named query (see
docs/performance.md, "How cost grows"), so a copy without one answers those queries slower or
not at all. Each ``--drop`` (indexes, comma-separated) is a copy of NAME (CREATE DATABASE ...
TEMPLATE: NAME must have no other connection), dropped at the end, as is the fresh database.
Each round runs every side once (``--round-s`` seconds, 8 clients, among 1,000 of its wallets
picked as growth_bench picks them, after growth_bench's VACUUM (ANALYZE) and CHECKPOINT), the
order rotating; reported per side: transfers/s per round, and the median and spread of the
rounds' ratios to the loaded database as it is and to the fresh one. Results:
bench/results/growth-index-ab-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

import growth_loader
from growth_bench import P2P_WALLETS, Side
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from ledger_bench import Bench, quiesce

NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def ratios(top: list[float], bottom: list[float]) -> dict[str, Any]:
    r = sorted(a / b for a, b in zip(top, bottom, strict=True))
    return {"median": round(statistics.median(r), 3), "spread": [round(r[0], 3), round(r[-1], 3)]}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    pid = os.getpid()
    fresh_name = f"hiwallet_bench_growth_ixab_fresh_{pid}"
    copies = {f"without {d}": f"hiwallet_bench_growth_ixab_{pid}_{n}" for n, d in enumerate(args.drop)}
    admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
    try:
        for d, name in zip(args.drop, copies.values(), strict=True):
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{args.database}"')
            conn = await asyncpg.connect(db.owner_dsn(name, settings))
            for index in d.split(","):
                if not NAME.match(index):
                    raise SystemExit(f"not an index name: {index}")
                await conn.execute(f"DROP INDEX ledger.{index}")
            await conn.close()
    finally:
        await admin.close()
    await databases.migrate("wallet", database=fresh_name, settings=settings)
    names = {"loaded": args.database, **copies, "fresh": fresh_name}
    sides = {k: Side(v) for k, v in names.items()}
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": args.database,
        "sides": names,
        "rounds": args.rounds,
        "round_s": args.round_s,
        "load_average": [os.getloadavg()[0]],
    }
    try:
        benches = {}
        for k, s in sides.items():
            ledger = await s.open(8)
            benches[k] = Bench(s.pool, ledger, run_id)  # type: ignore[arg-type]
        wallets = {"fresh": await benches["fresh"].open_wallets(P2P_WALLETS)}
        for k, s in sides.items():
            if k != "fresh":
                state = await growth_loader.read_state(s.owner)  # type: ignore[arg-type]
                wallets[k] = random.Random(26).sample(state.wallets, min(P2P_WALLETS, len(state.wallets)))
        per_s: dict[str, list[float]] = {k: [] for k in sides}
        keys = list(sides)
        for n in range(args.rounds):
            order = keys[n % len(keys) :] + keys[: n % len(keys)]
            if n % 2:
                order.reverse()
            for k in order:
                await quiesce(sides[k].owner)  # type: ignore[arg-type]
                r = await benches[k].spread(wallets[k], 8, args.round_s, f"ix{n}{keys.index(k)}")
                per_s[k].append(r["transfers_per_s"])
            print(n, {k: v[-1] for k, v in per_s.items()}, flush=True)
        report["load_average"].append(os.getloadavg()[0])
        report["per_s"] = per_s
        report["vs_loaded"] = {k: ratios(per_s[k], per_s["loaded"]) for k in sides if k != "loaded"}
        report["vs_fresh"] = {k: ratios(per_s[k], per_s["fresh"]) for k in sides if k != "fresh"}
    finally:
        for s in sides.values():
            await s.close()
        admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
        for name in [fresh_name, *copies.values()]:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return report


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database", required=True, help="a database growth_loader.py loaded")
    p.add_argument("--drop", action="append", default=[], help="indexes a copy goes without (a,b)")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--round-s", type=float, default=4.0)
    args = p.parse_args()
    report = uvloop.run(main(args))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(__file__).parent / "results" / f"growth-index-ab-{stamp}.json"
    out.write_text(json.dumps(report, indent=2))
    print("vs loaded:", json.dumps(report["vs_loaded"]))
    print("vs fresh: ", json.dumps(report["vs_fresh"]))
    print(f"load average {report['load_average']} -> {out}")


if __name__ == "__main__":
    cli()
