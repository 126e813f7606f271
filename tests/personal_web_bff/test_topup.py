"""A top-up by card from the web app, against real processes: stripe-fake's hosted checkout (the
card is typed there), its signed webhooks to topup-webhook, the relay over RabbitMQ to
wallet-consumer writing the ledger, and the BFF's status page refreshing itself (a meta
refresh, no script) until the payment is in the wallet."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from hiwallet.fakes.stripe import TEST_CARD_SUCCEEDS
from tests import pgtemplate
from tests.browser.conftest import check_page
from tests.e2e import harness
from tests.e2e.system import System
from tests.personal_web_bff.conftest import Bff, running_bff, sign_in
from tests.wallet_api.conftest import WalletApi

TL = 100


@pytest.fixture(scope="module")
async def vhost() -> AsyncIterator[str]:
    name = f"hwt{os.getpid()}-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(name)
    yield name
    await harness.delete_vhost(name)


@pytest.fixture
async def card_system(
    api: WalletApi, vhost: str, topup_template: str, tmp_path: Path
) -> AsyncIterator[System]:
    """stripe-fake, topup-webhook and wallet-consumer as processes, on wallet-api's database."""
    topup_db = await pgtemplate.clone(topup_template)
    running = System(vhost=vhost, topup_db=topup_db, wallet_db=api.database, log_dir=tmp_path)
    try:
        await running.open()
        # the hosted page's address, as the browser reaches this test's stripe-fake
        stripe = running.stripe_fake(public_url=f"http://127.0.0.1:{running.ports['stripe-fake']}")
        await running.start(stripe.process, running.topup_webhook(), running.wallet_consumer())
        yield running
    finally:
        await running.close()
        await harness.clear_topology(vhost)
        await pgtemplate.drop_database(topup_db)


@pytest.fixture
async def card_bff(api: WalletApi, bff_port: int, card_system: System) -> AsyncIterator[Bff]:
    stripe_url = f"http://127.0.0.1:{card_system.ports['stripe-fake']}"
    async with running_bff(api, bff_port, stripe_url=stripe_url) as running:
        yield running


async def test_a_card_top_up_reaches_the_wallet(page: Page, card_bff: Bff) -> None:
    who = await card_bff.api.customer(funds=10 * TL)
    await sign_in(page, card_bff, who)
    await page.get_by_role("link", name="Top up by card").first.click()
    await check_page(page, "pweb topup form")
    await page.get_by_label("Amount").fill("250")
    await page.get_by_role("button", name="Continue to payment").click()
    # stripe-fake's hosted page: the card is typed there, never at the BFF
    await page.get_by_label("Card number").fill(TEST_CARD_SUCCEEDS)
    await page.get_by_label("Expiry (MM / YY)").fill("12 / 34")
    await page.get_by_label("CVC").fill("123")
    await page.get_by_role("button", name="Pay").click()
    await page.wait_for_url(f"{card_bff.base_url}/topup/done**")
    # The page refreshes itself until wallet-consumer has posted it (given time: a shared machine).
    heading = page.get_by_role("heading", name="Your top-up is in your wallet")
    await expect(heading).to_be_visible(timeout=60_000)
    await expect(page.get_by_test_id("amount")).to_have_text("₺250.00")
    await expect(page.get_by_test_id("available")).to_have_text("₺260.00")
    assert await page.locator("meta[http-equiv='refresh']").count() == 0  # done: no more refreshing
    await check_page(page, "pweb topup credited")
    assert (await card_bff.api.balance(who.wallet_id))["cash"] == 260 * TL
