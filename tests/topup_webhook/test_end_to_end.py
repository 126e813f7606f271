"""From the provider to the ledger: stripe-fake and bank-fake notify topup-webhook (served on a
free port, its relay publishing to a test exchange), wallet-consumer (on the same test names)
credits the wallet through the ledger. Every payment credited once, whatever was repeated; the
ledger verifies."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import httpx
import pytest

from hiwallet.core import db
from hiwallet.core.broker import Broker
from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.fakes.stripe import StripeFakeSettings, create_stripe_fake_app
from hiwallet.ledger import Fees, Ledger, LedgerStore, init_connection
from hiwallet.topup_webhook.app import create_topup_webhook_app
from hiwallet.wallet_consumer.app import create_wallet_consumer_app, topology_of
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.fakes.conftest import FAST, serve, stop
from tests.topup_webhook.conftest import BANK_SECRET, STRIPE_SECRET, stored, topup_settings


@pytest.fixture
async def wallet_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(
        wallet_db, role=db.app_role("wallet"), min_size=1, max_size=4, init=init_connection
    )
    yield pool
    await pool.close()


@pytest.fixture
async def consumer_settings(broker: Broker) -> AsyncIterator[WalletConsumerSettings]:
    prefix = f"hwtest.{uuid.uuid4().hex[:10]}"
    settings = WalletConsumerSettings(
        exchange=f"{prefix}.topups",
        partitions=4,
        dead_letter_exchange=f"{prefix}.dead-letters",
        dead_letter_key=f"{prefix}.topups",
        dead_letter_queue=f"{prefix}.topups.dead",
        max_attempts=2,
    )
    yield settings
    await broker.delete(topology_of(settings))


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.1)


async def test_a_card_payment_and_a_wire_arrive_in_the_wallet_once(
    topup_db: str,
    owner: asyncpg.Connection,
    wallet_db: str,
    wallet_pool: asyncpg.Pool,
    consumer_settings: WalletConsumerSettings,
) -> None:
    ledger = Ledger(LedgerStore(wallet_pool), Fees.from_settings(db.get_settings()))
    wallet = (await ledger.open_wallet("e2e", bucket=421)).wallet_id
    webhook_app = create_topup_webhook_app(
        topup_settings(topup_db, exchange=consumer_settings.exchange, relay_poll_s=0.5),
        topology=topology_of(consumer_settings),
    )
    webhook_url, webhook_server, webhook_thread = serve(webhook_app, "topup-webhook")
    fakes = [
        serve(
            create_stripe_fake_app(
                StripeFakeSettings(
                    webhook_url=f"{webhook_url}/v1/webhooks/topup/stripe",
                    signing_secrets=[STRIPE_SECRET],
                    api_key="sk_test_e2e",
                    **FAST,
                )
            ),
            "stripe-fake",
        ),
        serve(
            create_bank_fake_app(
                BankFakeSettings(
                    webhook_url=f"{webhook_url}/v1/webhooks/topup/bank",
                    signing_secrets=[BANK_SECRET],
                    api_key="bank_e2e",
                    **FAST,
                )
            ),
            "bank-fake",
        ),
    ]
    (stripe_url, *_), (bank_url, *_) = fakes
    consumer = create_wallet_consumer_app(consumer_settings, database=wallet_db)
    try:
        async with consumer.router.lifespan_context(consumer), httpx.AsyncClient(timeout=10) as http:
            card = {"authorization": "Bearer sk_test_e2e"}
            # the card payment's notifications, each sent three times at once, in reverse order
            faults = {"duplicate": 3, "reorder": True}
            (await http.post(f"{stripe_url}/_control/faults", json=faults)).raise_for_status()
            paid = await http.post(
                f"{stripe_url}/v1/topups",
                headers=card,
                data={"wallet": wallet, "amount": 2500, "currency": "try"},
            )
            assert paid.status_code == 200, paid.text
            # a card payment without a wallet: recorded, unattributed, not credited
            lost = await http.post(
                f"{stripe_url}/v1/topups", headers=card, data={"amount": 300, "currency": "try"}
            )
            assert lost.status_code == 200, lost.text
            wired = await http.post(
                f"{bank_url}/v1/topups",
                headers={"authorization": "Bearer bank_e2e"},
                json={
                    "sender_name": "Ayşe Yılmaz",
                    "sender_iban": "TR330006100519786457841326",
                    "reference": f"top-up {wallet}",
                    "amount_minor": 10_000,
                    "currency": "TRY",
                },
            )
            assert wired.status_code in (200, 201), wired.text

            async def credited() -> bool:
                return (await ledger.wallet_balance(wallet)).cash == 12_500

            async def settled() -> bool:
                return bool(
                    await wallet_pool.fetchval("SELECT count(*) = 3 FROM processed_events")
                    and await owner.fetchval("SELECT count(*) = 0 FROM topup.outbox WHERE sent_at IS NULL")
                )

            await until(credited)
            await until(settled)
            await asyncio.sleep(1.0)  # anything late would show now
            assert (await ledger.wallet_balance(wallet)).cash == 12_500
            unattributed = await wallet_pool.fetch(
                "SELECT provider_payment_id FROM wallet.unattributed_topups"
            )
            assert [r["provider_payment_id"] for r in unattributed] == [lost.json()["id"]]
            report = await ledger.store.verify()
            assert report.ok, report.problems
    finally:
        for _, server, thread in fakes:
            stop(server, thread)
        stop(webhook_server, webhook_thread)
    s = await stored(owner)
    assert len(s.payments) == 3
    assert len(s.outbox) == 3
    assert sorted(len(p["reported_by"]) for p in s.payments) == [1, 2, 2]
