"""wallet-consumer tests: a fresh hiwallet_wallet per test (the root ``wallet_db``), real
PostgreSQL. The handler, its ledger (``consumer_ledger``) and ``pool`` connect as
wallet-consumer's role; ``ledger`` and ``api_pool`` as wallet-api's (the application role), which
opens the wallets and writes their records, as in the deployment."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from fastapi import FastAPI

from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.consumer import IncomingMessage
from hiwallet.core.ids import derived_id, new_id
from hiwallet.core.settings import Settings
from hiwallet.ledger import FeePolicy, Fees, Ledger, LedgerStore
from hiwallet.wallet_consumer import CONSUMER_NAME, TopupHandler
from hiwallet.wallet_consumer.app import create_wallet_consumer_app, topology_of
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests import pgtemplate
from tests.topups import consumer_settings, wallet_pool
from tests.topups import until as until  # the tests import it from here

TL = 100
FEES = Fees(payment=FeePolicy(bps=200), withdrawal=FeePolicy(fixed_minor=2 * TL))


@pytest.fixture
async def pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    """wallet-consumer's connection."""
    async with wallet_pool(wallet_db, max_size=6, service="wallet_consumer") as p:
        yield p


@pytest.fixture
async def api_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    """wallet-api's connection: what opens wallets and writes their records."""
    async with wallet_pool(wallet_db, max_size=4) as p:
        yield p


@pytest.fixture
async def owner(wallet_db: str) -> AsyncIterator[asyncpg.Connection]:
    """The owner's connection: what no service may do (close a wallet: no operation exists)."""
    async with pgtemplate.owner_connection(wallet_db) as conn:
        yield conn


@pytest.fixture
async def closed_wallet(ledger: Ledger, owner: asyncpg.Connection) -> str:
    """A wallet with wallet-api's record of it, closed (no close operation exists yet: by hand)."""
    wallet = (await ledger.open_wallet("closer", bucket=9)).wallet_id
    await owner.execute(
        "INSERT INTO wallet.accounts (bucket, id, kind, tier, opened_by, created_at, updated_at)"
        " VALUES (9, '0009:a:closer', 'personal', 'verified', 'test', now(), now())"
    )
    await owner.execute(
        "INSERT INTO wallet.wallets (bucket, id, account_id, currency, number, created_at, closed_at)"
        " VALUES (9, $1, '0009:a:closer', 'TRY', '0009000000000001', now(), now())",
        wallet,
    )
    return wallet


@pytest.fixture
def ledger(api_pool: asyncpg.Pool) -> Ledger:
    """The ledger as wallet-api uses it: the tests' set-up (wallets opened, funded) and reads."""
    return Ledger(LedgerStore(api_pool), FEES)


@pytest.fixture
def consumer_ledger(pool: asyncpg.Pool) -> Ledger:
    """The ledger as wallet-consumer uses it (its handlers')."""
    return Ledger(LedgerStore(pool), FEES)


@pytest.fixture
def handler(consumer_ledger: Ledger) -> TopupHandler:
    return TopupHandler(consumer_ledger)


def topup_body(
    wallet: str | None,
    amount: int = 250 * TL,
    *,
    provider: str = "stripe",
    provider_payment_id: str | None = None,
    currency: str = "TRY",
    reference: str | None = None,
    route: str = "webhook",
) -> dict[str, Any]:
    """A TopupRecorded body as topup-webhook publishes it (CONTRACT-10)."""
    provider_payment_id = provider_payment_id or f"pi_{new_id().replace('-', '')[:24]}"
    return {
        "payment_id": derived_id("topup", provider, provider_payment_id),
        "provider": provider,
        "provider_payment_id": provider_payment_id,
        "wallet": wallet,
        "reference": reference,
        "amount_minor": amount,
        "currency": currency,
        "recorded_at": datetime.now(UTC).isoformat(),
        "route": route,
    }


def message(body: Any, *, message_id: str | None = None, type_: str = "TopupRecorded") -> IncomingMessage:
    # the body as it comes off the wire: JSON bytes parsed
    parsed = orjson.loads(orjson.dumps(body)) if not isinstance(body, bytes) else body
    key = body.get("wallet") or body.get("payment_id") if isinstance(body, dict) else "x"
    return IncomingMessage(
        message_id=message_id or new_id(),
        type=type_,
        routing_key=str(key),
        body=parsed,
        headers={},
        redelivered=False,
        delivery_count=0,
    )


async def consume(
    pool: asyncpg.Pool, handler: TopupHandler, msg: IncomingMessage
) -> Mapping[str, Any] | None:
    """What core.consumer.Consumer does with one message, without the broker: in one
    transaction, record it in processed_events; if it is new, handle it and store the outcome.
    None for a repeat (acked, nothing done)."""
    async with pool.acquire() as conn, conn.transaction():
        new = await conn.fetchval(
            "INSERT INTO processed_events (consumer, message_id) VALUES ($1, $2)"
            " ON CONFLICT DO NOTHING RETURNING true",
            CONSUMER_NAME,
            msg.message_id,
        )
        if not new:
            return None
        outcome = await handler(conn, msg)
        await conn.execute(
            "UPDATE processed_events SET outcome = $3 WHERE consumer = $1 AND message_id = $2",
            CONSUMER_NAME,
            msg.message_id,
            dict(outcome),
        )
        return outcome


async def cash(ledger: Ledger, wallet: str) -> int:
    return (await ledger.wallet_balance(wallet)).cash


async def verified(ledger: Ledger) -> None:
    report = await ledger.store.verify()
    assert report.ok, report.problems


@pytest.fixture
async def settings(broker: Broker) -> AsyncIterator[WalletConsumerSettings]:
    """The consumer's settings over a unique exchange, partitions and dead letters; deleted
    after the test (the real hiwallet.* names are never touched here)."""
    s = consumer_settings(unattributed_refresh_s=0.1)
    yield s
    await broker.delete(topology_of(s))


@asynccontextmanager
async def running(
    settings: WalletConsumerSettings, database: str, core_settings: Settings | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_wallet_consumer_app(settings, database=database, core_settings=core_settings)
    async with app.router.lifespan_context(app):
        await consuming(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://wallet-consumer") as client:
            yield client


async def consuming(app: FastAPI, timeout_s: float = 15.0) -> None:
    """Until both consumers consume (the topology declared once RabbitMQ answered: core.service)."""
    async with asyncio.timeout(timeout_s):
        await app.state.consumer.wait_started()
        await app.state.withdrawals.wait_started()


def outgoing(
    settings: WalletConsumerSettings, body: Any, *, message_id: str | None = None
) -> OutgoingMessage:
    """As topup-webhook's relay publishes (CONTRACT-10): routing key = the wallet, or the
    payment when there is none."""
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    key = (body.get("wallet") or body.get("payment_id")) if isinstance(body, dict) else "poison"
    return OutgoingMessage(
        message_id=message_id or new_id(),
        exchange=settings.exchange,
        routing_key=str(key),
        type="TopupRecorded",
        body=raw,
        headers={"x-request-id": f"req-{uuid.uuid4().hex[:8]}"},
        correlation_id=body.get("payment_id") if isinstance(body, dict) else None,
    )
