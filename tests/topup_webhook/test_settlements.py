"""Settlement from the provider to the ledger: stripe-fake pays out (net or gross), topup-webhook's
settlement importer reads the payout and announces it once, its relay publishes it, and
wallet-consumer posts it through the ledger (clearing +gross, nostro −net, in the net model
provider_expense −fee) exactly once. Every process real but the test's driving: the importer's
rounds are run by hand (two at once, and twice), the announcement published again, a payout
line planted that matches no top-up and one whose amount differs. The ledger verifies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client import CollectorRegistry

from hiwallet.core.broker import Broker
from hiwallet.core.settings import get_settings
from hiwallet.fakes.stripe import StripeFakeSettings, create_stripe_fake_app
from hiwallet.ledger import Fees, Ledger, LedgerStore, Role
from hiwallet.topup_webhook.app import create_topup_webhook_app, database_spec, settlement_importer
from hiwallet.topup_webhook.cli import settle_once
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.reconcile import provider_clients
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from hiwallet.topup_webhook.settlements import SettlementImporter
from hiwallet.topup_webhook.store import TopupStore
from hiwallet.wallet_consumer.app import create_wallet_consumer_app, topology_of
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests import pgtemplate, topups
from tests.fakes.conftest import FAST
from tests.servers import serve, stop
from tests.topup_webhook.conftest import STRIPE_PATH, STRIPE_SECRET, topup_settings
from tests.waiting import stays

STRIPE_KEY = "sk_test_settlements"
FEE_BPS, FEE_FIXED = 290, 30
SETTLEMENT_ROWS = "SELECT count(*) FROM topup.outbox WHERE message_type = 'SettlementReported'"
UNSENT_NONE = "SELECT count(*) = 0 FROM topup.outbox WHERE sent_at IS NULL"


def fee_of(amount: int) -> int:
    return (amount * FEE_BPS + 5_000) // 10_000 + FEE_FIXED


@pytest.fixture
async def wallet_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    async with topups.wallet_pool(wallet_db, max_size=4) as pool:
        yield pool


@pytest.fixture
async def consumer_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    async with topups.wallet_pool(wallet_db, max_size=2, service="wallet_consumer") as pool:
        yield pool


@pytest.fixture
async def consumer_settings(broker: Broker) -> AsyncIterator[WalletConsumerSettings]:
    settings = topups.consumer_settings()
    yield settings
    await broker.delete(topology_of(settings))


async def balances(ledger: Ledger) -> dict[str, int]:
    store = ledger.store
    return {
        "clearing": await store.system_balance(Role.CLEARING, "TRY", "stripe"),
        "nostro": await store.system_balance(Role.NOSTRO, "TRY"),
        "provider_expense": await store.system_balance(Role.PROVIDER_EXPENSE, "TRY"),
    }


@pytest.mark.parametrize("model", ["net", "gross"])
async def test_a_payout_settles_once_and_what_does_not_match_is_a_finding(
    model: str,
    topup_db: str,
    wallet_db: str,
    wallet_pool: asyncpg.Pool,
    consumer_pool: asyncpg.Pool,
    consumer_settings: WalletConsumerSettings,
) -> None:
    ledger = Ledger(LedgerStore(wallet_pool), Fees.from_settings())
    wallet = (await ledger.open_wallet("settle", bucket=421)).wallet_id
    # stripe-fake first (topup-webhook's client is made at its start, with the fake's address),
    # told where topup-webhook listens once it does
    stripe_app = create_stripe_fake_app(
        StripeFakeSettings(
            webhook_url="http://127.0.0.1:9/nowhere",
            signing_secrets=[STRIPE_SECRET],
            api_key=STRIPE_KEY,
            payout_interval_s=0,
            payout_deposit_url=None,
            settlement_model=model,
            fee_bps=FEE_BPS,
            fee_fixed_minor=FEE_FIXED,
            **FAST,
        )
    )
    stripe_url, stripe_server, stripe_thread = serve(stripe_app, "stripe-fake")
    settings = topup_settings(
        topup_db,
        exchange=consumer_settings.exchange,
        events_exchange=consumer_settings.events_exchange,
        relay_poll_s=0.5,
        stripe_url=stripe_url,
        stripe_api_key=STRIPE_KEY,
        stripe_settlement_model=model,
    )
    webhook_app = create_topup_webhook_app(settings, topology=topology_of(consumer_settings))
    webhook_url, webhook_server, webhook_thread = serve(webhook_app, "topup-webhook")
    stripe_app.state.fake.settings.webhook_url = f"{webhook_url}{STRIPE_PATH}"
    consumer = create_wallet_consumer_app(consumer_settings, database=wallet_db)
    try:
        async with (
            consumer.router.lifespan_context(consumer),
            httpx.AsyncClient(base_url=stripe_url, timeout=10) as http,
            pgtemplate.owner_connection(topup_db) as owner,
        ):
            card = {"authorization": f"Bearer {STRIPE_KEY}"}
            amounts = [1_000, 2_500, 10_000]
            for amount in [*amounts, 4_000]:
                paid = await http.post(
                    "/v1/topups", headers=card, data={"wallet": wallet, "amount": amount, "currency": "try"}
                )
                assert paid.status_code == 200, paid.text
            # a card payment with no wallet: recorded, not credited (no top-up in the ledger)
            lost = await http.post("/v1/topups", headers=card, data={"amount": 300, "currency": "try"})
            assert lost.status_code == 200, lost.text

            async def credited() -> bool:
                return (await ledger.wallet_balance(wallet)).cash == sum(amounts) + 4_000

            await topups.until(credited, timeout_s=30.0)
            # the 4,000 payment's line says 4,100 at Stripe: an amount that differs
            fake = stripe_app.state.fake
            (changed,) = [t for t in fake.payouts.transactions.values() if t["amount"] == 4_000]
            fee_changed = fake.payouts.fee_of(4_100)
            changed.update(amount=4_100, fee=fee_changed, net=4_100 - fee_changed)
            before = await balances(ledger)

            made = await http.post("/_control/payouts")
            (payout,) = made.json()["data"]
            fees = [fake.payouts.fee_of(a) for a in amounts]
            expected_fees = [fee_of(a) for a in amounts] if model == "net" else [0, 0, 0]
            assert fees == expected_fees

            # the importer: the operator's command twice at once (under the job's lock) and a
            # bare round beside them (no lock: the database's record stops a second announcement);
            # then again. topup-webhook's own job would run the same round.
            async with own_importer(settings) as importer:
                rounds = await asyncio.gather(settle_once(settings), settle_once(settings), importer.run())
                assert sum(r for r in rounds if r is not None) == 1, rounds
                assert await importer.run() == 0
                assert await settle_once(settings) == 0
            assert await owner.fetchval(SETTLEMENT_ROWS) == 1
            assert await owner.fetchval("SELECT count(*) FROM topup.settlements") == 1

            gross, fee = sum(amounts), sum(fees)

            async def settled() -> bool:
                return (await balances(ledger))["clearing"] == before["clearing"] + gross

            await topups.until(settled, timeout_s=30.0)
            after = await balances(ledger)
            assert after["nostro"] == before["nostro"] - (gross - fee)
            assert after["provider_expense"] == before["provider_expense"] - fee
            assert payout["amount"] == gross - fee + (4_100 - fee_changed) + (300 - fake.payouts.fee_of(300))

            # the announcement published again (a relay that stopped before marking it sent)
            await owner.execute(
                "UPDATE topup.outbox SET sent_at = NULL WHERE message_type = 'SettlementReported'"
            )
            await topups.until(lambda: owner.fetchval(UNSENT_NONE), timeout_s=30.0)

            async def handled_twice() -> bool:
                return bool(
                    await consumer_pool.fetchval(
                        "SELECT count(*) = 1 FROM processed_events"
                        " WHERE consumer = 'wallet-consumer-settlements'"
                    )
                )

            await topups.until(handled_twice, timeout_s=30.0)
            await stays(lambda: _same(ledger, after), 1.0, "the balances after the one settlement")

            findings = await consumer_pool.fetch(
                "SELECT kind, subject, details FROM wallet.reconciliation_findings ORDER BY kind"
            )
            kinds = sorted(f["kind"] for f in findings)
            assert kinds == ["payout_amount_differs", "payout_unmatched"], findings
            settled_rows = await consumer_pool.fetch(
                "SELECT payment_id, fee_minor FROM wallet.settled_topups"
            )
            assert sorted(r["fee_minor"] for r in settled_rows) == sorted(fees)
            report = await ledger.store.verify()
            assert report.ok, report.problems
    finally:
        stop(stripe_server, stripe_thread)
        stop(webhook_server, webhook_thread)


@asynccontextmanager
async def own_importer(settings: TopupWebhookSettings) -> AsyncIterator[SettlementImporter]:
    """An importer of the test's own (its pool and client on this event loop)."""
    pool = await database_spec(settings).create_pool(get_settings(), max_size=2)
    clients = provider_clients(settings)
    try:
        store = TopupStore(pool, settings.exchange)
        yield settlement_importer(store, settings, clients, TopupMetrics(CollectorRegistry()))
    finally:
        for client in clients.values():
            await client.aclose()
        await pool.close()


async def _same(ledger: Ledger, expected: dict[str, Any]) -> bool:
    return await balances(ledger) == expected
