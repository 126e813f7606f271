"""The database's CPU a call of wallet-api's read statements, prepared as asyncpg prepares them.

    .venv/bin/python bench/read_bench.py --keep-db       # prints the kept wallet database
    .venv/bin/python bench/read_sql_cost.py DATABASE [--calls 2000] [NAME=SOURCE:ARGS ...]

On one connection as the wallet database's application role (the first customer of the bench's
database as the caller), each statement is run 20 times (its generic plan made and kept), then
``--calls`` times, three times over in alternating order; printed: the backend's CPU a call (µs,
its /proc times: user and system, 10 ms ticks) each time. Without NAME=SOURCE:ARGS, the reads'
statements against the bare endpoint's: ``wallet_balance`` (the bare balance), ``statement``
(the bare page), ``wallet_with_balance``, ``wallet_overview`` (today and yesterday probed, as a
repeated read asks), ``wallet_statement_page`` (all counterparties known), and
``wallet_statement_known``. SOURCE is a statement's name (wallet-api's queries or the ledger's)
or a .sql file (a variant to compare), ARGS one of the argument sets below. Issue 26,
docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from cpu import pids_cpu_s
from hiwallet import ledger
from hiwallet.core import db
from hiwallet.ledger.store import Q as LEDGER_Q
from hiwallet.ledger.store import init_connection
from hiwallet.wallet_api.adapters import Q

DEFAULT = [
    "balance=wallet_balance:balance",
    "statement=statement:statement",
    "wallet_with_balance=wallet_with_balance:wallet",
    "wallet_overview=wallet_overview:overview",
    "wallet_statement_page=wallet_statement_page:page",
    "wallet_statement_known=wallet_statement_known:known",
]


async def measure(database: str, calls: int, texts: list[tuple[str, str, str]]) -> None:
    owner = await asyncpg.connect(db.owner_dsn(database))
    who = await owner.fetchrow(
        "SELECT w.id, w.bucket, m.issuer, m.subject FROM wallet.wallets w JOIN wallet.members m"
        " ON m.bucket = w.bucket AND m.account_id = w.account_id ORDER BY w.id LIMIT 1"
    )
    await owner.close()
    conn = await asyncpg.connect(db.service_dsn(database, db.app_role("wallet")))
    await init_connection(conn)
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    wallet, bucket = who["id"], who["bucket"]
    cash, promo = ledger.cash_account(wallet), ledger.promo_account(wallet)
    caller = (bucket, wallet, who["issuer"], who["subject"])
    today = datetime.now(UTC).date()
    arguments: dict[str, tuple[Any, ...]] = {
        "balance": (bucket, [cash, promo]),
        "statement": (bucket, cash, 0, 51),
        "wallet": (*caller, cash, promo),
        "overview": (*caller, cash, promo, today - timedelta(days=1), today),
        "page": (*caller, cash, 0, 51, f"{wallet}:", [True] * 51),
        "known": (*caller, cash, 0, 51),
    }
    statements = []
    for name, text, args in texts:
        statements.append((name, await conn.prepare(text), arguments[args]))
    cpu: dict[str, list[int]] = {name: [] for name, _, _ in statements}
    for turn in range(3):
        for name, statement, args in statements if turn % 2 == 0 else reversed(statements):
            for _ in range(20):
                await statement.fetch(*args)
            before = pids_cpu_s([pid])
            for _ in range(calls):
                await statement.fetch(*args)
            cpu[name].append(round(1e6 * (pids_cpu_s([pid]) - before) / calls))
    await conn.close()
    for name, values in cpu.items():
        print(f"{name:24s} backend CPU a call, µs: {values}")


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("database")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("statements", nargs="*", help="NAME=SOURCE:ARGS (default: the reads' statements)")
    args = parser.parse_args()
    texts = []
    for spec in args.statements or DEFAULT:
        name, _, rest = spec.partition("=")
        source, _, argset = rest.partition(":")
        text = Path(source).read_text() if source.endswith(".sql") else Q.get(source) or LEDGER_Q[source]
        texts.append((name, text, argset))
    asyncio.run(measure(args.database, args.calls, texts))


if __name__ == "__main__":
    cli()
