"""A withdrawal from the web app, against the saga's real processes (withdrawal-orchestrator,
wallet-consumer, bank-adapter, bank-webhook, bank-fake; wallet-api in a thread): an IBAN with a
typo is told on the form and nothing is sent; a good one starts the saga, and its status page
refreshes itself (a meta refresh) until the bank has the money."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.browser.conftest import check_page
from tests.e2e import harness
from tests.e2e.withdrawals import WithdrawalSystem, printed, withdrawal_system
from tests.identity.conftest import IdentityServer
from tests.personal_web_bff.conftest import Bff, running_bff, sign_in

TL = 100


@pytest.fixture(scope="module")
async def vhost() -> AsyncIterator[str]:
    name = f"hwt{os.getpid()}-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(name)
    yield name
    await harness.delete_vhost(name)


@pytest.fixture
async def saga(
    vhost: str,
    wallet_template: str,
    withdrawal_template: str,
    bank_template: str,
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
    tmp_path: Path,
) -> AsyncIterator[WithdrawalSystem]:
    async with withdrawal_system(
        vhost, (wallet_template, withdrawal_template, bank_template), customer_idp, staff_idp, tmp_path
    ) as running:
        yield running


@pytest.fixture
async def saga_bff(saga: WithdrawalSystem, bff_port: int) -> AsyncIterator[Bff]:
    async with running_bff(saga.api, bff_port, withdrawals_url=saga.orchestrator.url) as running:
        yield running


async def test_a_withdrawal_follows_the_saga_to_the_bank(
    page: Page, saga: WithdrawalSystem, saga_bff: Bff
) -> None:
    who = await saga.customer(funds=500 * TL)
    iban = saga.iban()
    await sign_in(page, saga_bff, who)
    await page.get_by_role("link", name="Withdraw").first.click()
    await page.get_by_label("IBAN").fill(printed(iban)[:-1] + ("0" if iban[-1] != "0" else "1"))  # a typo
    await page.get_by_label("Amount").fill("100")
    await page.get_by_role("button", name="Withdraw").click()
    await expect(page.get_by_label("IBAN")).to_have_attribute("aria-invalid", "true")
    await expect(page.get_by_text("This is not a valid IBAN.")).to_be_visible()
    await check_page(page, "pweb withdraw bad iban")
    assert await saga.sagas_of(who.wallet_id) == []  # nothing was sent

    await page.get_by_label("IBAN").fill(printed(iban))
    await page.get_by_role("button", name="Withdraw").click()
    await page.wait_for_url(f"{saga_bff.base_url}/withdrawals/**")
    state = page.get_by_test_id("state")
    await expect(state).to_have_text("Sent: the bank has the money.", timeout=60_000)
    await expect(page.get_by_test_id("amount")).to_have_text("₺100.00")
    assert await page.locator("meta[http-equiv='refresh']").count() == 0
    await check_page(page, "pweb withdrawal completed")
    assert len(await saga.sagas_of(who.wallet_id)) == 1
