"""The posting function's own CPU, before a change and after it, in alternating rounds (issue 26).

    git archive <base> | tar -x -C /tmp/before
    .venv/bin/python bench/post_batch_cpu.py --before /tmp/before [--postings 1000 --rounds 10]

A database migrated from this tree, 500 funded wallets, and the ``ledger.post_batch`` of the
tree before (taken from its ``migrations/wallet/schema.sql``) beside it as
``ledger.post_batch_before``. Each round builds one batch of transfers among the wallets and
calls both functions with it (the order alternating each round), each ``--calls`` times in a
transaction rolled back, as the owner. The figure is the backend's CPU a call (user + system,
from /proc: the server must run on this machine), not the time: on a shared, loaded machine
the time measures the neighbours, the CPU much less so. Both functions' answers are compared
(but posted_at). Neither the client's nor the commit's share is in it: bench/ledger_ab.py
measures the whole.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.ledger import rules
from hiwallet.ledger.store import LedgerStore, init_connection

TICK = os.sysconf("SC_CLK_TCK")


def before_function(tree: Path) -> str:
    """The tree's ledger.post_batch, renamed, from its schema dump."""
    schema = (tree / "migrations" / "wallet" / "schema.sql").read_text()
    start = schema.index("CREATE FUNCTION ledger.post_batch(")
    end = schema.index("END $$;", start) + len("END $$;")
    return schema[start:end].replace("ledger.post_batch(", "ledger.post_batch_before(", 1)


def backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def main(args: argparse.Namespace, before_sql: str) -> dict[str, Any]:
    settings = get_settings()
    database = f"hiwallet_bench_post_cpu_{os.getpid()}"
    await databases.migrate("wallet", database=database, settings=settings)
    conn = await asyncpg.connect(db.owner_dsn(database, settings))
    try:
        await init_connection(conn)
        await conn.execute(before_sql)
        wallets = [f"{1 + (i * 7919) % 1023:04d}:w:bench-{i:04d}" for i in range(args.wallets)]
        for w in wallets:
            b = int(w[:4])
            await conn.execute("SELECT ledger.ensure_system_accounts($1, 'TRY', ARRAY['stripe', 'bank'])", b)
            await conn.execute("SELECT ledger.open_account($1, $2, 'cash', 'TRY', 'bench')", b, f"{w}:cash")
        store = LedgerStore(None, coalesce_writers=0)  # type: ignore[arg-type]  # only its encoding
        fund = [
            rules.topup(f"fund-{i}", w, 10**12, "TRY", provider="bank", actor="bench", ref="f")
            for i, w in enumerate(wallets)
        ]
        for i in range(0, len(fund), 500):
            await conn.fetchval("SELECT ledger.post_batch($1)", store.batch_arguments(fund[i : i + 500]))
        await conn.execute("ANALYZE")
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        rng = random.Random(26)
        cpu: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(args.rounds):
            batch = []
            for k in range(args.postings):
                a, b = rng.sample(wallets, 2)
                batch.append(
                    rules.transfer(
                        f"cpu-{r}-{k}", a, b, rng.randint(1, 10_000), "TRY", actor="bench", ref="cpu"
                    )
                )
            arguments = store.batch_arguments(batch)
            answers = {}
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                function = "ledger.post_batch_before" if side == "before" else "ledger.post_batch"
                started = backend_cpu_s(pid)
                for _ in range(args.calls):
                    tx = conn.transaction()
                    await tx.start()
                    answers[side] = await conn.fetchval(f"SELECT {function}($1)", arguments)
                    await tx.rollback()
                cpu[side].append((backend_cpu_s(pid) - started) / args.calls)

            def strip(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
                return [{k: v for k, v in a.items() if k != "posted_at"} for a in raw]

            if strip(answers["before"]) != strip(answers["after"]):
                raise SystemExit(f"round {r}: the two functions answered differently")
    finally:
        await conn.close()
        admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()
    ratios = sorted(a / b for a, b in zip(cpu["after"], cpu["before"], strict=True) if b > 0)
    return {
        "postings": args.postings,
        "rounds": args.rounds,
        "calls": args.calls,
        "load_avg": [round(x, 1) for x in os.getloadavg()],
        "cpu_ms_a_call": {k: round(statistics.median(v) * 1000, 2) for k, v in cpu.items()},
        "after_vs_before": round(statistics.median(ratios), 2),
        "after_vs_before_spread": [round(ratios[0], 2), round(ratios[-1], 2)],
    }


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="a tree of the code before")
    parser.add_argument("--postings", type=int, default=1000, help="transfers a call")
    parser.add_argument("--wallets", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--calls", type=int, default=0, help="calls a side a round (default: ~1,000 postings)"
    )
    args = parser.parse_args()
    args.calls = args.calls or max(1, 1000 // args.postings)
    report = uvloop.run(main(args, before_function(Path(args.before))))
    print(report)
    sys.exit(0)


if __name__ == "__main__":
    cli()
