from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext

import asyncpg
import pytest

from hiwallet.core import db
from hiwallet.ledger.accounts import cash_account
from hiwallet.ledger.rules import FeePolicy
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

# The architecture document's examples are in lira; the ledger counts kuruş.
TL = 100
FEES = Fees(payment=FeePolicy(bps=200), withdrawal=FeePolicy(fixed_minor=2 * TL))


def documented_fee(amount_minor: int, policy: FeePolicy) -> int:
    """The fee as docs/ledger.md states it, computed apart from the code under test: ``bps`` of
    the amount in exact decimal arithmetic, rounded half up to the kuruş, at least
    ``min_minor``, plus ``fixed_minor``. Tests compare the ledger against this, never against
    ``FeePolicy.fee`` itself."""
    with localcontext() as exact:
        exact.prec = 60  # 10**15 × 10,000 has 20 digits: no rounding before the one we mean
        proportional = (Decimal(amount_minor) * policy.bps / 10_000).quantize(
            Decimal(1), rounding=ROUND_HALF_UP
        )
    return max(int(proportional), policy.min_minor) + policy.fixed_minor


@pytest.fixture
async def pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    # As the application role, as wallet-api connects: every ledger test posts through the
    # functions only (docs/ledger.md, "Who may write").
    p = await db.create_pool(
        wallet_db, role=db.app_role("wallet"), min_size=1, max_size=12, init=init_connection
    )
    yield p
    await p.close()


# Every ledger test runs twice: on one node (parts balance together) and as on Citus (transit
# legs, every per-bucket part balances by itself).
@pytest.fixture(params=[False, True], ids=["single-node", "transit-legs"])
def transit(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def store(pool: asyncpg.Pool, transit: bool) -> LedgerStore:
    return LedgerStore(pool, transit_legs=transit)


@pytest.fixture
def ledger(store: LedgerStore) -> Ledger:
    return Ledger(store, FEES)


@pytest.fixture
async def owner_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    """The owner's: for what the schema refuses even its owner (triggers, constraints), which
    the application role may not even try (tests/core/test_roles.py)."""
    p = await asyncpg.create_pool(db.owner_dsn(wallet_db), min_size=1, max_size=2)
    yield p
    await p.close()


@pytest.fixture
def dsn(wallet_db: str) -> str:
    """The owner's: the fault injector terminates the application role's sessions with it."""
    return db.owner_dsn(wallet_db)


@dataclass
class Counts:
    transactions: int
    lines: int
    holds: int
    batches: int
    balances: dict[str, int]


async def snapshot(pool: asyncpg.Pool) -> Counts:
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM ledger.transactions) AS t, (SELECT count(*) FROM ledger.lines) AS l,"
        " (SELECT count(*) FROM ledger.holds) AS h, (SELECT count(*) FROM ledger.promo_batches) AS b"
    )
    balances = {
        r["id"]: r["balance"] * 1_000_003 + r["held"]
        for r in await pool.fetch(
            "SELECT id, balance, held FROM ledger.accounts WHERE balance <> 0 OR held <> 0"
        )
    }
    return Counts(row["t"], row["l"], row["h"], row["b"], balances)


async def assert_verified(store: LedgerStore) -> None:
    report = await store.verify()
    assert report.ok, report.problems


async def funded_wallet(ledger: Ledger, owner: str, amount: int, *, bucket: int | None = None) -> str:
    wallet = (await ledger.open_wallet(owner, bucket=bucket)).wallet_id
    if amount:
        await ledger.topup(f"fund-{owner}", wallet, amount, provider="stripe", actor="test", ref="fund")
    return wallet


async def cash(ledger: Ledger, wallet: str) -> int:
    return (await ledger.store.account(cash_account(wallet))).balance
