"""From the provider to the ledger: stripe-fake and bank-fake notify topup-webhook (served on a
free port, its relay publishing to a test exchange), wallet-consumer (on the same test names)
credits the wallet through the ledger. Every payment credited once, whatever was repeated; the
ledger verifies."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from hiwallet.core.broker import Broker
from hiwallet.ledger import Fees, Ledger, LedgerStore
from hiwallet.topup_webhook.app import create_topup_webhook_app
from hiwallet.wallet_consumer.app import create_wallet_consumer_app, topology_of
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests import topups
from tests.servers import serve, stop
from tests.topup_webhook.conftest import served_fakes, stored, topup_settings
from tests.waiting import stays

STRIPE_KEY = "sk_test_e2e"
BANK_KEY = "bank_e2e"
UNSENT_NONE = "SELECT count(*) = 0 FROM topup.outbox WHERE sent_at IS NULL"


@pytest.fixture
async def wallet_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    """wallet-api's role: opens the wallet."""
    async with topups.wallet_pool(wallet_db, max_size=4) as pool:
        yield pool


@pytest.fixture
async def consumer_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    """wallet-consumer's role: reads its own records."""
    async with topups.wallet_pool(wallet_db, max_size=2, service="wallet_consumer") as pool:
        yield pool


@pytest.fixture
async def consumer_settings(broker: Broker) -> AsyncIterator[WalletConsumerSettings]:
    settings = topups.consumer_settings()
    yield settings
    await broker.delete(topology_of(settings))


async def test_a_card_payment_and_a_wire_arrive_in_the_wallet_once(
    topup_db: str,
    owner: asyncpg.Connection,
    wallet_db: str,
    wallet_pool: asyncpg.Pool,
    consumer_pool: asyncpg.Pool,
    consumer_settings: WalletConsumerSettings,
) -> None:
    ledger = Ledger(LedgerStore(wallet_pool), Fees.from_settings())
    wallet = (await ledger.open_wallet("e2e", bucket=421)).wallet_id
    webhook_app = create_topup_webhook_app(
        topup_settings(topup_db, exchange=consumer_settings.exchange, relay_poll_s=0.5),
        topology=topology_of(consumer_settings),
    )
    webhook_url, webhook_server, webhook_thread = serve(webhook_app, "topup-webhook")
    consumer = create_wallet_consumer_app(consumer_settings, database=wallet_db)
    try:
        with served_fakes(webhook_url, stripe_key=STRIPE_KEY, bank_key=BANK_KEY) as (stripe_url, bank_url):
            async with consumer.router.lifespan_context(consumer), httpx.AsyncClient(timeout=10) as http:
                card = {"authorization": f"Bearer {STRIPE_KEY}"}
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
                    headers={"authorization": f"Bearer {BANK_KEY}"},
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
                        await consumer_pool.fetchval("SELECT count(*) = 3 FROM processed_events")
                        and await owner.fetchval(UNSENT_NONE)
                    )

                await topups.until(credited, timeout_s=30.0)
                await topups.until(settled, timeout_s=30.0)
                # anything late (a repeat credited twice) would show within this window
                await stays(credited, 1.0, "the wallet at 12,500")
                unattributed = await consumer_pool.fetch(
                    "SELECT provider_payment_id FROM wallet.unattributed_topups"
                )
                assert [r["provider_payment_id"] for r in unattributed] == [lost.json()["id"]]
                report = await ledger.store.verify()
                assert report.ok, report.problems
    finally:
        stop(webhook_server, webhook_thread)
    s = await stored(owner)
    assert len(s.payments) == 3
    assert len(s.outbox) == 3
    assert sorted(len(p["reported_by"]) for p in s.payments) == [1, 2, 2]
