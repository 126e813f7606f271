"""What the tests of the top-up path's wallet side share (tests/wallet_consumer, and
tests/topup_webhook's run from provider to ledger): the wallet database as its services' roles,
wallet-consumer's settings over names of the test's own, and waiting for a condition."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from hiwallet.core import db
from hiwallet.ledger import init_connection
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests import waiting

# The top-up tests wait through this (tests/waiting.py's), polling SQL at most every 0.05 s.
until = functools.partial(waiting.until, interval_s=0.05)


@asynccontextmanager
async def wallet_pool(
    database: str, *, max_size: int, service: str | None = None
) -> AsyncIterator[asyncpg.Pool]:
    """A pool on ``database`` as a service connects: as the wallet's application role
    (wallet-api's: opening wallets, its records), or with ``service="wallet_consumer"`` as
    wallet-consumer's role (its inbox, outbox and unattributed top-ups)."""
    pool = await db.create_pool(
        database, role=db.app_role("wallet", service), min_size=1, max_size=max_size, init=init_connection
    )
    try:
        yield pool
    finally:
        await pool.close()


def consumer_settings(**overrides: Any) -> WalletConsumerSettings:
    """wallet-consumer's settings over a unique exchange, partitions and dead letters (the real
    hiwallet.* names are never touched); the caller deletes ``topology_of`` them afterwards."""
    prefix = f"hwtest.{uuid.uuid4().hex[:10]}"
    values: dict[str, Any] = {
        "exchange": f"{prefix}.topups",
        "partitions": 4,
        "dead_letter_exchange": f"{prefix}.dead-letters",
        "dead_letter_key": f"{prefix}.topups",
        "dead_letter_queue": f"{prefix}.topups.dead",
        # the withdrawal saga's topology, which wallet-consumer declares too, under the prefix
        "withdrawals_exchange": f"{prefix}.withdrawals",
        "withdrawals_queue_prefix": f"{prefix}.",
        "withdrawals_dead_letter_key": f"{prefix}.withdrawals",
        "withdrawals_dead_letter_queue": f"{prefix}.withdrawals.dead",
        # and the events' (a credited wire's TopupCredited)
        "events_exchange": f"{prefix}.events",
        "events_queue_prefix": f"{prefix}.",
        "events_dead_letter_key": f"{prefix}.events",
        "events_dead_letter_queue": f"{prefix}.events.dead",
        "max_attempts": 2,
        **overrides,
    }
    return WalletConsumerSettings(**values)
