"""LedgerStore.open_wallets (migrations/wallet/0027): many wallets opened in two statements give
exactly the accounts that as many single opens give, and opening one again leaves it as it is."""

from __future__ import annotations

import asyncpg
import pytest

from hiwallet.ledger.accounts import new_wallet_id
from hiwallet.ledger.errors import InvalidPosting
from hiwallet.ledger.store import LedgerStore

# every column but created_at (each open's clock)
ACCOUNTS = (
    "SELECT bucket, id, role, purse, currency, owner, balance, held, version"
    " FROM ledger.accounts ORDER BY bucket, id"
)


async def test_open_wallets_yields_what_single_opens_yield(store: LedgerStore, pool: asyncpg.Pool) -> None:
    # some buckets twice, one already holding its system accounts and a wallet
    await store.open_wallet(new_wallet_id(5), "TRY", owner="before")
    wallets = [new_wallet_id(b) for b in (5, 7, 7, 1023, 1, 300, 5)]

    async def opened(many: bool) -> list[asyncpg.Record]:
        async with pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                if many:
                    await store.open_wallets(wallets, "TRY", owner="growth", conn=conn)
                else:
                    for w in wallets:
                        await store.open_wallet(w, "TRY", owner="growth", conn=conn)
                return list(await conn.fetch(ACCOUNTS))
            finally:
                await tx.rollback()

    single = await opened(many=False)
    assert len(single) > 2 * len(wallets)
    assert await opened(many=True) == single

    # on its own (its own unit of work), then again (another owner asked): the accounts already
    # there are left as they are
    await store.open_wallets(wallets, "TRY", owner="growth")
    assert list(await pool.fetch(ACCOUNTS)) == single
    await store.open_wallets(wallets[:2], "TRY", owner="someone-else")
    assert list(await pool.fetch(ACCOUNTS)) == single


async def test_open_wallets_refuses_the_central_bucket(store: LedgerStore, pool: asyncpg.Pool) -> None:
    before = await pool.fetchval("SELECT count(*) FROM ledger.accounts")
    with pytest.raises(InvalidPosting):
        await store.open_wallets([new_wallet_id(3), "0000:w:x"], "TRY", owner="x")
    with pytest.raises(InvalidPosting):
        await store.open_wallets([new_wallet_id(3)], "try", owner="x")
    assert await pool.fetchval("SELECT count(*) FROM ledger.accounts") == before
    await store.open_wallets([], "TRY", owner="x")
    assert await pool.fetchval("SELECT count(*) FROM ledger.accounts") == before


async def test_open_accounts_of_uneven_arrays_opens_nothing(pool: asyncpg.Pool) -> None:
    # the app role's own call, past the store's checks: a purse or key left out (unnest pads with
    # NULL) is refused by the table's constraints, not opened half-made
    before = await pool.fetchval("SELECT count(*) FROM ledger.accounts")
    for buckets, ids, purses in (
        ([7, 7], ["0007:w:a:cash", "0007:w:a:promo"], ["cash"]),
        ([7], ["0007:w:a:cash", "0007:w:a:promo"], ["cash", "promo"]),
        ([7, 7], ["0007:w:a:cash"], ["cash", "promo"]),
    ):
        with pytest.raises(asyncpg.IntegrityConstraintViolationError):
            await pool.execute("SELECT ledger.open_accounts($1, $2, $3, 'TRY', 'x')", buckets, ids, purses)
    assert await pool.fetchval("SELECT count(*) FROM ledger.accounts") == before
