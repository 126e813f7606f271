"""bench/growth_loader.py before a change and after it, in interleaved rounds of one run (issue 26).

    git show main:bench/growth_loader.py > /tmp/growth_loader_before.py
    .venv/bin/python bench/growth_loader_ab.py --before /tmp/growth_loader_before.py \\
        --lines 300_000 --wallets 30_000 --rounds 3

Both loaders run in this process against this tree's ledger (its migrations, its LedgerStore):
what is compared is the loader's own way of using the ledger. Each run loads a fresh database of
its own (``gwab_<side><round>``), then ``verify`` checks it (problems must be none) and it is
dropped. The order alternates each round. Per run: the seconds, the lines/s overall, the wallets/s
of opening and funding the wallets and the lines/s of the rest (the heavy wallet's and the p2p
transfers), the load average; the medians of the after/before ratios and their spread. Results as
JSON in bench/results/ (``growth-loader-ab-…``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
import uvloop

import benchlog
import growth_loader
from hiwallet.core import db
from hiwallet.ledger.store import LedgerStore, init_connection


def import_before(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("growth_loader_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def time_opening(module: ModuleType, phases: dict[str, float]) -> None:
    """Each loader's opening of its wallets timed from outside (the loader before reports no
    phases of its own)."""
    original = module.Loader.open_wallets

    async def timed(self: Any, count: int, owner: str, progress: Any) -> list[str]:
        started = time.perf_counter()
        wallets: list[str] = await original(self, count, owner, progress)
        if owner == module.OWNER:
            phases["open_s"] = time.perf_counter() - started
        return wallets

    module.Loader.open_wallets = timed


async def drop(name: str) -> None:
    conn = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        await conn.close()


async def verify(name: str) -> tuple[int, int]:
    pool = await db.create_pool(name, role=db.app_role("wallet"), init=init_connection)
    try:
        report = await LedgerStore.from_settings(pool).verify()
    finally:
        await pool.close()
    return len(report.problems), report.lines


async def run(
    before: ModuleType, lines: int, wallets: int, rounds: int, writers: int | None
) -> dict[str, Any]:
    phases: dict[str, float] = {}
    sides = {"before": before, "after": growth_loader}
    for module in sides.values():
        time_opening(module, phases)
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            name = f"gwab_{side}{i}"
            await drop(name)
            load = os.getloadavg()
            report = await sides[side].load(
                name,
                lines=lines,
                wallets=wallets,
                heavy_lines=lines // 50,
                quiet=True,
                **({"writers": writers} if writers else {}),
            )
            problems, verified = await verify(name)
            await drop(name)
            if problems:
                raise SystemExit(f"verify found {problems} problems in {side}'s books (round {i})")
            rest = report["seconds"] - phases["open_s"]
            run = {
                "round": i,
                "side": side,
                "seconds": report["seconds"],
                "lines": report["now"]["lines"],
                "lines_per_s": report["lines_per_s"],
                "wallets_per_s": round(wallets / phases["open_s"], 1),
                "rest_lines_per_s": round((report["now"]["lines"] - 2 * wallets) / rest, 1),
                "verified_lines": verified,
                "refused": report["refused"],
                "writers": report["writers"],
                "load_before": [round(x, 2) for x in load],
                "load_after": [round(x, 2) for x in os.getloadavg()],
            }
            benchlog.console.print(run)
            runs.append(run)
    ratios: dict[str, Any] = {}
    for measure in ("lines_per_s", "wallets_per_s", "rest_lines_per_s"):
        each = [
            next(r for r in runs if r["round"] == i and r["side"] == "after")[measure]
            / next(r for r in runs if r["round"] == i and r["side"] == "before")[measure]
            for i in range(rounds)
        ]
        ratios[measure] = {
            "median": round(statistics.median(each), 2),
            "spread": [round(min(each), 2), round(max(each), 2)],
        }
    return {
        "lines": lines,
        "wallets": wallets,
        "rounds": rounds,
        "writers": writers,
        "runs": runs,
        "after_over_before": ratios,
    }


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="the loader before (a growth_loader.py)")
    parser.add_argument("--lines", type=lambda s: int(s.replace("_", "")), default=300_000)
    parser.add_argument("--wallets", type=lambda s: int(s.replace("_", "")), default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, help="for both (by default each loader's own default)")
    args = parser.parse_args()
    benchlog.to_file()
    result = uvloop.run(run(import_before(args.before), args.lines, args.wallets, args.rounds, args.writers))
    result["at"] = datetime.now(UTC).isoformat()
    out = benchlog.RESULTS / f"growth-loader-ab-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2))
    benchlog.console.print(result["after_over_before"], f"results: {out}")


if __name__ == "__main__":
    cli()
