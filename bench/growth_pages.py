"""Which of the ledger's tables and indexes a p2p transfer touches, on a loaded database and on a
fresh one (issue 26): the pages each reads from PostgreSQL's cache or outside it, the index scans
and the heap-only (HOT) updates, per transfer, from the statistics views.

    .venv/bin/python bench/growth_pages.py --database NAME [--seconds 8 --clients 8 --rounds 2]

NAME is a database bench/growth_loader.py loaded (kept); a fresh one (1,000 funded wallets) is
made beside it and dropped. Each side runs ``--rounds`` times, in turn (the order swapping), the
same p2p as bench/growth_bench.py's (among 1,000 wallets, picked at random on the loaded side),
each run on a pool of its own, closed before the statistics are read (a backend flushes its
counters when it exits; an idle one only every 10 s). Results: bench/results/growth-pages-<UTC
time>.json, and a table per relation printed: blocks hit and read a transfer, loaded / fresh.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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
from hiwallet.ledger import rules
from hiwallet.ledger.store import Q
from ledger_bench import Bench, quiesce

STATS = """
SELECT 'index' AS kind, s.relname AS tbl, s.indexrelname AS rel, s.idx_scan AS scans,
       io.idx_blks_hit AS hit, io.idx_blks_read AS read, NULL::bigint AS ins, NULL::bigint AS upd,
       NULL::bigint AS hot, pg_relation_size(s.indexrelid) AS bytes
  FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid)
 WHERE s.schemaname = 'ledger'
UNION ALL
SELECT 'table', t.relname, t.relname, t.seq_scan, io.heap_blks_hit, io.heap_blks_read, t.n_tup_ins,
       t.n_tup_upd, t.n_tup_hot_upd, pg_relation_size(t.relid)
  FROM pg_stat_user_tables t JOIN pg_statio_user_tables io USING (relid)
 WHERE t.schemaname = 'ledger'
"""


async def snapshot(owner: asyncpg.Connection) -> dict[str, dict[str, Any]]:
    await owner.execute("SELECT pg_stat_clear_snapshot()")
    return {r["rel"]: dict(r) for r in await owner.fetch(STATS)}


def delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], n: int) -> dict[str, Any]:
    out = {}
    for rel, a in after.items():
        b = before.get(rel, {})
        row = {"kind": a["kind"], "table": a["tbl"], "mb": round(a["bytes"] / 2**20, 1)}
        for k in ("scans", "hit", "read", "ins", "upd", "hot"):
            if a[k] is not None:
                row[f"{k}_per_transfer"] = round(((a[k] or 0) - (b.get(k) or 0)) / max(n, 1), 3)
        out[rel] = row
    return out


async def run_side(
    name: str, wallets: list[str], args: argparse.Namespace, tag: str, run_id: str
) -> dict[str, Any]:
    side = Side(name)
    ledger = await side.open(args.clients)
    try:
        assert side.owner is not None and side.pool is not None
        await quiesce(side.owner)
        # the VACUUM (ANALYZE)'s own reads are this backend's pending counters: flushed now,
        # before the snapshot, not into the run's figures
        await side.owner.execute("SELECT pg_stat_force_next_flush()")
        await asyncio.sleep(0.2)
        before = await snapshot(side.owner)
        result = await Bench(side.pool, ledger, run_id).spread(wallets, args.clients, args.seconds, tag)
    finally:
        await side.close()
    await asyncio.sleep(1)  # the pool's backends exit, flushing their counters
    owner = await asyncpg.connect(db.owner_dsn(name, get_settings()))
    try:
        after = await snapshot(owner)
    finally:
        await owner.close()
    n = result["transfers"] if "transfers" in result else round(result["transfers_per_s"] * args.seconds)
    return {"transfers_per_s": result["transfers_per_s"], "transfers": n, "rels": delta(before, after, n)}


async def wal_phase(
    args: argparse.Namespace,
    fresh_name: str,
    loaded_wallets: list[str],
    fresh_wallets: list[str],
    run_id: str,
) -> dict[str, Any]:
    """``--explained`` single p2p postings on each side, one side then the other in turn (so
    that both meet the server's checkpoints alike), each under EXPLAIN (ANALYZE, BUFFERS, WAL):
    what one posting writes to the WAL (records, full-page images, bytes) and the buffers it
    hits, reads and dirties, summed over its nested statements. Medians and means a posting."""
    sides = {"loaded": (Side(args.database), loaded_wallets), "fresh": (Side(fresh_name), fresh_wallets)}
    ledgers = {k: await side.open(1) for k, (side, _) in sides.items()}
    got: dict[str, list[dict[str, float]]] = {"loaded": [], "fresh": []}
    rng = random.Random(5)
    try:
        for n in range(args.explained):
            for k, (side, wallets) in sides.items():
                a, b = rng.sample(wallets, 2)
                posting = rules.transfer(
                    f"pw{k[0]}-{run_id}-{n}", a, b, rng.randint(1, 100), "TRY", actor="b", ref="p2p"
                )
                batch = ledgers[k].store.batch_arguments([posting])
                async with side.pool.acquire() as conn:  # type: ignore[union-attr]
                    plan = json.loads(
                        await conn.fetchval(
                            "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + Q["post_batch"], batch
                        )
                    )[0]
                top = plan["Plan"]
                got[k].append(
                    {
                        "ms": plan["Execution Time"],
                        "wal_records": top.get("WAL Records", 0),
                        "wal_fpi": top.get("WAL FPI", 0),
                        "wal_bytes": top.get("WAL Bytes", 0),
                        "hit": top.get("Shared Hit Blocks", 0),
                        "read": top.get("Shared Read Blocks", 0),
                        "dirtied": top.get("Shared Dirtied Blocks", 0),
                    }
                )
    finally:
        for side, _ in sides.values():
            await side.close()
    out: dict[str, Any] = {}
    for k, rows in got.items():
        out[k] = {
            f: {
                "median": statistics.median(r[f] for r in rows),
                "mean": round(statistics.fmean(r[f] for r in rows), 2),
            }
            for f in rows[0]
        }
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    fresh_name = f"hiwallet_bench_growth_pages_{os.getpid()}"
    admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
    await admin.execute(f'DROP DATABASE IF EXISTS "{fresh_name}"')
    await admin.close()
    await databases.migrate("wallet", database=fresh_name, settings=settings)
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": args.database,
    }
    try:
        fresh = Side(fresh_name)
        fresh_ledger = await fresh.open(2)
        fresh_wallets = await Bench(fresh.pool, fresh_ledger, run_id).open_wallets(P2P_WALLETS)  # type: ignore[arg-type]
        await fresh.close()
        owner = await asyncpg.connect(db.owner_dsn(args.database, settings))
        state = await growth_loader.read_state(owner)
        await owner.close()
        loaded_wallets = random.Random(26).sample(state.wallets, min(P2P_WALLETS, len(state.wallets)))
        runs: dict[str, list[dict[str, Any]]] = {"loaded": [], "fresh": []}
        for n in range(args.rounds):
            for side in ("loaded", "fresh") if n % 2 == 0 else ("fresh", "loaded"):
                name, wallets = (
                    (args.database, loaded_wallets) if side == "loaded" else (fresh_name, fresh_wallets)
                )
                runs[side].append(await run_side(name, wallets, args, f"pg{side[0]}{n}", run_id))
                print(side, runs[side][-1]["transfers_per_s"], flush=True)
        report["runs"] = runs
        report["wal"] = await wal_phase(args, fresh_name, loaded_wallets, fresh_wallets, run_id)
    finally:
        admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
        await admin.execute(f'DROP DATABASE IF EXISTS "{fresh_name}" WITH (FORCE)')
        await admin.close()
    table = {}
    for rel in runs["loaded"][0]["rels"]:
        row: dict[str, Any] = {}
        for side in ("loaded", "fresh"):
            rows = [r["rels"].get(rel, {}) for r in runs[side]]
            row[f"{side}_mb"] = rows[-1].get("mb")
            for k in ("hit", "read", "scans", "ins", "hot", "upd"):
                vals = [x[f"{k}_per_transfer"] for x in rows if f"{k}_per_transfer" in x]
                if vals:
                    row[f"{side}_{k}"] = round(statistics.median(vals), 2)
        table[rel] = row
    report["per_transfer"] = table
    report["transfers_per_s"] = {s: [r["transfers_per_s"] for r in v] for s, v in runs.items()}
    return report


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database", required=True, help="a database growth_loader.py loaded")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--explained", type=int, default=300, help="single postings explained a side")
    args = p.parse_args()
    report = uvloop.run(main(args))
    out = (
        Path(__file__).parent
        / "results"
        / f"growth-pages-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    )
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"{'relation':28} {'MB l/f':>13} {'hit l/f':>13} {'read l/f':>13} {'scans l/f':>13} hot/upd l")
    for rel, r in report["per_transfer"].items():
        pairs = [f"{r.get('loaded_' + k)!s}/{r.get('fresh_' + k)!s}" for k in ("mb", "hit", "read", "scans")]
        cells = " ".join(f"{x:>13}" for x in pairs)
        print(f"{rel:28} {cells} {r.get('loaded_hot')!s}/{r.get('loaded_upd')!s}")
    for k, v in report["wal"].items():
        print(k, {f: (m["median"], m["mean"]) for f, m in v.items()})
    print(f"transfers/s {report['transfers_per_s']}  -> {out}")


if __name__ == "__main__":
    cli()
