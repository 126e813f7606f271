"""The reads' statements keep PostgreSQL's generic plan (issue 26, docs/performance.md).

asyncpg prepares a statement once a connection; PostgreSQL plans its first five runs with the
values (custom plans), then keeps one generic plan if its estimated cost is not above theirs.
When it is, every run is planned anew: for the overview on the read bench's fresh ledger that was
~0.85 ms of the database's CPU a read for ~0.1 ms of work (its 30 daily probes had been estimated
a little dearer by $5 than by the literal account, 1,000 times over). The conditions that made it
are a small ledger with statistics: a few customers, their transfers, ANALYZE.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from hiwallet.core import db
from hiwallet.wallet_api import domain
from hiwallet.wallet_api.adapters import Q
from tests.wallet_api.conftest import TL, WalletApi

RUNS = 12  # five custom plans, then the generic one at each run if it is kept


async def test_the_reads_keep_the_generic_plan_on_a_small_analyzed_ledger(api: WalletApi) -> None:
    # One wallet with more lines than the ledger's average account (as each of the bench's
    # customers, with 120 of the ledger's ~1,000): its statistics then make its probes look a
    # little cheaper with its literal id than with a parameter's average.
    people = [await api.customer(funds=100 * TL) for _ in range(4)]
    for n in range(40):
        assert (await api.transfer(people[0], people[1 + n % 3].number, TL)).status_code == 201
    owner = await asyncpg.connect(db.owner_dsn(api.database))
    try:
        await owner.execute("ANALYZE")
        member = await owner.fetchrow(
            "SELECT m.issuer, m.subject FROM wallet.members m JOIN wallet.wallets w"
            " ON w.bucket = m.bucket AND w.account_id = m.account_id WHERE w.id = $1",
            people[0].wallet_id,
        )
    finally:
        await owner.close()
    wallet = people[0].wallet_id
    bucket = domain.bucket_in(wallet)
    today = datetime.now(UTC).date()
    who = (bucket, wallet, member["issuer"], member["subject"], f"{wallet}:cash")
    reads = {
        "wallet_with_balance": (*who, f"{wallet}:promo"),
        "wallet_overview": (*who, f"{wallet}:promo", today - timedelta(days=1), today),
        "wallet_statement_page": (*who, 0, 51, f"{wallet}:", [False] * 51),
        "wallet_statement_known": (*who, 0, 51),
    }
    async with api.pool.acquire() as conn:
        for name, args in reads.items():
            statement = await conn.prepare(Q[name])
            for _ in range(RUNS):
                assert await statement.fetch(*args)
            plans = await conn.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1",
                statement.get_name(),
            )
            assert plans["generic_plans"] == RUNS - 5, (name, dict(plans))
