"""How cost grows (issue 26): the ledger on a database that holds years of books, against the same
on a fresh one, in the same run.

    make bench-growth             # or: .venv/bin/python bench/growth_bench.py [--lines 1_000_000 ...]

Given a loaded database (bench/growth_loader.py; run here first, which does nothing when the
database is already at the size asked), it measures:

(a) the ledger's p2p transfers/s at ``--clients`` (8) on the loaded database and on a fresh one
    (empty but for 1,000 funded wallets), in interleaved short rounds (``--rounds`` of
    ``--round-s`` seconds, the order alternating: loaded, fresh, fresh, loaded, ...), as
    bench/ledger_bench.py's ``interleaved`` does: the median of the rounds' ratios loaded/fresh
    (target >= 0.9) and its spread. On the loaded database the transfers run among 1,000 of its
    wallets, picked at random (each with its history), as ledger_bench's among its 1,000;
(b) a statement page (``LedgerStore.statement``, what wallet-api's GET
    /v1/wallets/{id}/statement reads) of the heavy wallet: the first page and a deep one (its
    cursor 90 % down the wallet's lines), p50/p99 in ms (target p99 < 10 ms), with the query's
    EXPLAIN (ANALYZE, BUFFERS) in the results;
(c) ``LedgerStore.verify()`` over the whole loaded ledger and over the fresh one: seconds and
    lines/s each.

The results go to bench/results/growth-<time>.json; a short table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
import uvloop

import benchlog
import growth_loader
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.ledger.accounts import bucket_of, cash_account
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, Q, init_connection
from ledger_bench import Bench, pct, quiesce

P2P_WALLETS = 1_000
TARGETS = {"loaded_vs_fresh_c8": 0.9, "statement_p99_ms_max": 10.0}


def parse_count(text: str) -> int:
    return int(text.replace("_", ""))


class Side:
    """One database as the services see it: the application role's pool, the owner's connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pool: asyncpg.Pool | None = None
        self.owner: asyncpg.Connection | None = None

    async def open(self, clients: int) -> Ledger:
        settings = get_settings()
        self.pool = await db.create_pool(
            self.name,
            role=db.app_role("wallet"),
            settings=settings,
            min_size=clients,
            max_size=clients + 2,
            init=init_connection,
        )
        self.owner = await asyncpg.connect(db.owner_dsn(self.name, settings))
        return Ledger(LedgerStore.from_settings(self.pool), Fees.from_settings())

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        if self.owner is not None:
            await self.owner.close()


async def timed_verify(ledger: Ledger) -> dict[str, Any]:
    started = time.perf_counter()
    report = await ledger.store.verify()
    seconds = time.perf_counter() - started
    return {
        "ok": report.ok,
        "problems": report.problems[:20],
        "lines": report.lines,
        "transactions": report.transactions,
        "accounts": report.accounts,
        "seconds": round(seconds, 2),
        "lines_per_s": round(report.lines / seconds, 1),
    }


async def statement_pages(
    ledger: Ledger, pool: asyncpg.Pool, owner: asyncpg.Connection, wallet: str, samples: int
) -> dict[str, Any]:
    """The first page and a deep page (its cursor 90 % down) of ``wallet``'s cash statement, in
    turn, ``samples`` each; and the plan of each query as the server ran it."""
    account = cash_account(wallet)
    first = await ledger.store.statement(account)
    if first.next_cursor is None:
        raise SystemExit(f"the heavy wallet {wallet} has a single page: load it first")
    version = await owner.fetchval(
        "SELECT version FROM ledger.accounts WHERE bucket = $1 AND id = $2", bucket_of(account), account
    )
    # The cursor is the last version seen (LedgerStore.statement): one 90 % of the way down is
    # what a client paging there would hold.
    deep = str(int(version * 0.9))
    deep_page = await ledger.store.statement(account, cursor=deep)
    if not deep_page.lines or deep_page.lines[0].version != int(deep) + 1:
        raise SystemExit(f"the deep page does not start after its cursor {deep}")
    # Beside them, in the same loop, the bare round trip of the same pool (SELECT 1): what the
    # machine and the client cost a query whatever it reads (at a high load average, most of
    # the p99).
    timings: dict[str, list[float]] = {"first": [], "deep": [], "select1": []}
    for _ in range(samples):
        for name, cursor in (("first", None), ("deep", deep), ("select1", None)):
            started = time.perf_counter()
            if name == "select1":
                await pool.fetchval("SELECT 1")
            else:
                await ledger.store.statement(account, cursor=cursor)
            timings[name].append((time.perf_counter() - started) * 1000)
    plans = {}
    for name, after in (("first", 0), ("deep", int(deep))):
        rows = await owner.fetch(
            "EXPLAIN (ANALYZE, BUFFERS) " + Q["statement"], bucket_of(account), account, after, 51
        )
        plans[name] = [r[0] for r in rows]
    return {
        "wallet": wallet,
        "lines": version,
        "page": 50,
        "deep_cursor": deep,
        "samples": samples,
        **{
            f"{name}_{q}_ms": round(pct(values, p), 3)
            for name, values in timings.items()
            for q, p in (("p50", 0.5), ("p99", 0.99))
        },
        "plans": plans,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count()},
        "scale": {"lines": args.lines, "wallets": args.wallets, "heavy_lines": args.heavy_lines},
    }
    print(
        f"loaded database {args.database}: {args.lines:,} lines over {args.wallets:,} wallets ...", flush=True
    )
    report["load"] = await growth_loader.load(
        args.database,
        lines=args.lines,
        wallets=args.wallets,
        heavy_lines=args.heavy_lines,
        writers=args.writers,
    )
    print(f"  {report['load']}", flush=True)

    fresh_name = f"hiwallet_bench_growth_fresh_{os.getpid()}"
    admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
    await admin.execute(f'DROP DATABASE IF EXISTS "{fresh_name}"')
    await admin.close()
    await databases.migrate("wallet", database=fresh_name, settings=settings)
    loaded, fresh = Side(args.database), Side(fresh_name)
    try:
        loaded_ledger = await loaded.open(args.clients)
        fresh_ledger = await fresh.open(args.clients)
        if loaded.owner is None or fresh.owner is None:
            raise RuntimeError("a database's owner connection did not open")
        run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        loaded_bench = Bench(loaded.pool, loaded_ledger, run_id)  # type: ignore[arg-type]
        fresh_bench = Bench(fresh.pool, fresh_ledger, run_id)  # type: ignore[arg-type]
        print(f"fresh database: opening and funding {P2P_WALLETS} wallets ...", flush=True)
        fresh_wallets = await fresh_bench.open_wallets(P2P_WALLETS)
        state = await growth_loader.read_state(loaded.owner)
        loaded_wallets = random.Random(26).sample(state.wallets, min(P2P_WALLETS, len(state.wallets)))
        for side in (loaded, fresh):
            await quiesce(side.owner)  # type: ignore[arg-type]

        report["p2p"] = await rounds(args, loaded_bench, loaded_wallets, fresh_bench, fresh_wallets)
        print(f"  {report['p2p']}", flush=True)

        print(f"statement pages of the heavy wallet ({state.heavy_lines:,} lines) ...", flush=True)
        if state.heavy is None:
            raise RuntimeError(f"{args.database} has no heavy wallet: the loader did not run")
        with benchlog.phase("statement pages", 10):
            report["statement"] = await statement_pages(
                loaded_ledger, loaded.pool, loaded.owner, state.heavy, args.samples
            )
        print({k: v for k, v in report["statement"].items() if k != "plans"}, flush=True)

        print("verify, loaded and fresh ...", flush=True)
        with benchlog.phase("verify, loaded", 60):
            report["verify_loaded"] = await timed_verify(loaded_ledger)
        with benchlog.phase("verify, fresh", 10):
            report["verify_fresh"] = await timed_verify(fresh_ledger)
    finally:
        await loaded.close()
        await fresh.close()
        admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
        await admin.execute(f'DROP DATABASE IF EXISTS "{fresh_name}" WITH (FORCE)')
        await admin.close()
    report["summary"] = summary(report)
    return report


async def rounds(
    args: argparse.Namespace,
    loaded: Bench,
    loaded_wallets: list[str],
    fresh: Bench,
    fresh_wallets: list[str],
) -> dict[str, Any]:
    """p2p at ``--clients`` on each database in short rounds taken in turn (the order swaps each
    round), so that each ratio compares figures seconds apart: this machine's speed drifts by a
    third within minutes."""
    print(
        f"p2p at {args.clients} clients: {args.rounds} rounds of {args.round_s:g} s, loaded / fresh ...",
        flush=True,
    )
    sides: dict[str, list[dict[str, Any]]] = {"loaded": [], "fresh": []}
    with benchlog.phase("interleaved rounds, loaded / fresh", args.rounds * args.round_s * 2):
        for n in range(args.rounds):
            for side in ("loaded", "fresh") if n % 2 == 0 else ("fresh", "loaded"):
                bench, wallets = (loaded, loaded_wallets) if side == "loaded" else (fresh, fresh_wallets)
                sides[side].append(await bench.spread(wallets, args.clients, args.round_s, f"g{side[0]}{n}"))
    per_s = {k: [r["transfers_per_s"] for r in v] for k, v in sides.items()}
    ratio = sorted(lo / fr for lo, fr in zip(per_s["loaded"], per_s["fresh"], strict=True))
    return {
        "clients": args.clients,
        "rounds": args.rounds,
        "round_s": args.round_s,
        "per_s": per_s,
        "p99_ms": {k: [r["p99_ms"] for r in v] for k, v in sides.items()},
        "loaded_median_per_s": statistics.median(per_s["loaded"]),
        "fresh_median_per_s": statistics.median(per_s["fresh"]),
        "loaded_vs_fresh": round(statistics.median(ratio), 3),
        "loaded_vs_fresh_spread": [round(ratio[0], 3), round(ratio[-1], 3)],
    }


def summary(r: dict[str, Any]) -> dict[str, Any]:
    s = {
        "lines": r["verify_loaded"]["lines"],
        "loaded_vs_fresh_c8": r["p2p"]["loaded_vs_fresh"],
        "loaded_vs_fresh_c8_spread": r["p2p"]["loaded_vs_fresh_spread"],
        "statement_first_p50_ms": r["statement"]["first_p50_ms"],
        "statement_first_p99_ms": r["statement"]["first_p99_ms"],
        "statement_deep_p50_ms": r["statement"]["deep_p50_ms"],
        "statement_deep_p99_ms": r["statement"]["deep_p99_ms"],
        "verify_loaded_s": r["verify_loaded"]["seconds"],
        "verify_loaded_lines_per_s": r["verify_loaded"]["lines_per_s"],
        "verify_fresh_s": r["verify_fresh"]["seconds"],
        "verify_fresh_lines_per_s": r["verify_fresh"]["lines_per_s"],
        "loader_lines_per_s": r["load"]["lines_per_s"],
    }
    # verify has a fixed cost per bucket (1,024 of them, several queries each) whatever the
    # lines: the rate per line is the difference between the two databases over the difference
    # of their lines.
    extra_lines = r["verify_loaded"]["lines"] - r["verify_fresh"]["lines"]
    extra_s = r["verify_loaded"]["seconds"] - r["verify_fresh"]["seconds"]
    s["verify_marginal_lines_per_s"] = round(extra_lines / extra_s, 1) if extra_s > 0 else None
    s["targets_met"] = {
        "loaded_vs_fresh_c8": s["loaded_vs_fresh_c8"] >= TARGETS["loaded_vs_fresh_c8"],
        "statement_p99_ms": max(s["statement_first_p99_ms"], s["statement_deep_p99_ms"])
        < TARGETS["statement_p99_ms_max"],
        "verify_clean": r["verify_loaded"]["ok"] and r["verify_fresh"]["ok"],
    }
    return s


def table(r: dict[str, Any]) -> str:
    p, st, vl, vf = r["p2p"], r["statement"], r["verify_loaded"], r["verify_fresh"]
    rows = [
        ("scale", f"{vl['lines']:,} lines, {r['load']['now']['wallets']:,} wallets", ""),
        (
            f"p2p c{p['clients']} loaded / fresh (median of {p['rounds']})",
            f"{p['loaded_vs_fresh']:.2f}"
            f" ({p['loaded_vs_fresh_spread'][0]:.2f}-{p['loaded_vs_fresh_spread'][1]:.2f});"
            f" {p['loaded_median_per_s']:,.0f} vs {p['fresh_median_per_s']:,.0f}/s",
            f">= {TARGETS['loaded_vs_fresh_c8']}",
        ),
        (
            f"statement, {st['lines']:,} lines, first page p50 / p99",
            f"{st['first_p50_ms']:.2f} / {st['first_p99_ms']:.2f} ms",
            f"p99 < {TARGETS['statement_p99_ms_max']:g} ms",
        ),
        ("statement, deep page p50 / p99", f"{st['deep_p50_ms']:.2f} / {st['deep_p99_ms']:.2f} ms", ""),
        (
            "SELECT 1 beside them, p50 / p99",
            f"{st['select1_p50_ms']:.2f} / {st['select1_p99_ms']:.2f} ms",
            "",
        ),
        (
            "verify, loaded",
            f"{vl['seconds']:.1f} s, {vl['lines_per_s']:,.0f} lines/s, {'clean' if vl['ok'] else 'PROBLEMS'}",
            "",
        ),
        (
            "verify, fresh",
            f"{vf['seconds']:.1f} s, {vf['lines_per_s']:,.0f} lines/s ({vf['lines']:,} lines)",
            "",
        ),
    ]
    if r["summary"]["verify_marginal_lines_per_s"]:
        rows.append(
            ("verify, per extra line", f"{r['summary']['verify_marginal_lines_per_s']:,.0f} lines/s", "")
        )
    if r["load"]["lines_per_s"]:
        rows.append(
            (
                "loader (this run)",
                f"{r['load']['lines_posted']:,} lines, {r['load']['lines_per_s']:,.0f} lines/s",
                "",
            )
        )
    width = max(len(a) for a, _, _ in rows)
    return "\n".join(f"{a:<{width}}  {b}  {c}".rstrip() for a, b, c in rows)


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", default="hiwallet_growth", help="the loaded database (kept)")
    parser.add_argument("--lines", type=parse_count, default=1_000_000)
    parser.add_argument("--wallets", type=parse_count, default=100_000)
    parser.add_argument("--heavy-lines", type=parse_count, default=growth_loader.HEAVY_LINES)
    parser.add_argument("--writers", type=int, default=growth_loader.WRITERS, help="the loader's writers")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=float, default=4.0)
    parser.add_argument("--samples", type=int, default=2_000, help="statement pages of each kind")
    args = parser.parse_args()
    benchlog.to_file()
    report = uvloop.run(main(args))
    path = benchlog.save("growth", report)
    print(table(report))
    print(json.dumps(report["summary"]["targets_met"]))
    print(f"results: {path}")
    sys.exit(0 if report["summary"]["targets_met"]["verify_clean"] else 1)


if __name__ == "__main__":
    cli()
