"""Reconciliation tests: a fresh hiwallet_wallet per test (the root ``wallet_db``), real
PostgreSQL. The jobs run as wallet-consumer's role (``pool``), as in the deployment; wallets are
opened and money moved as wallet-api does (``ledger``, ``accounts`` on ``api_pool``); a
discrepancy is planted as the database's owner (``owner``), which no service may be."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from hiwallet.ledger import FeePolicy, Fees, Ledger, LedgerStore
from hiwallet.reconciliation import Reconciler, ReconciliationMetrics, ReconciliationSettings
from hiwallet.wallet_api.accounts import Accounts
from hiwallet.wallet_api.settings import WalletApiSettings
from tests import pgtemplate
from tests.topups import wallet_pool

TL = 100
FEES = Fees(payment=FeePolicy(bps=200), withdrawal=FeePolicy(fixed_minor=2 * TL))


@pytest.fixture
async def pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    """wallet-consumer's connection: the jobs'."""
    async with wallet_pool(wallet_db, max_size=4, service="wallet_consumer") as p:
        yield p


@pytest.fixture
async def api_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    async with wallet_pool(wallet_db, max_size=4) as p:
        yield p


@pytest.fixture
async def owner(wallet_db: str) -> AsyncIterator[asyncpg.Connection]:
    async with pgtemplate.owner_connection(wallet_db) as conn:
        yield conn


@pytest.fixture
def ledger(api_pool: asyncpg.Pool) -> Ledger:
    return Ledger(LedgerStore(api_pool), FEES)


@pytest.fixture
def accounts(api_pool: asyncpg.Pool, ledger: Ledger) -> Accounts:
    return Accounts(api_pool, ledger, WalletApiSettings())


def recon_settings(**overrides: Any) -> ReconciliationSettings:
    # every provider's window 0 unless a test says: a top-up not paid out is overdue at once
    values: dict[str, Any] = {"settlement_windows_s": {}, "default_settlement_window_s": 0.0, **overrides}
    return ReconciliationSettings(**values)


@pytest.fixture
def metrics() -> ReconciliationMetrics:
    return ReconciliationMetrics()


@pytest.fixture
def reconciler(pool: asyncpg.Pool, metrics: ReconciliationMetrics) -> Reconciler:
    return Reconciler(pool, recon_settings(), metrics)


async def business(accounts: Accounts, name: str) -> tuple[str, str]:
    """A business account and its TRY wallet, opened as an operator does."""
    view = await accounts.open_business(name, operator="operator:test")
    return view["id"], view["wallets"][0]["id"]
