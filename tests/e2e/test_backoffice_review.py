"""The backoffice panel's withdrawal review end to end, in chromium: a large withdrawal waits for
a review in the real saga (tests/e2e/withdrawals.py: the orchestrator, wallet-consumer,
bank-adapter, bank-webhook, bank-fake as processes), an employee with ``withdrawal.review``
signs in on the staff realm (password, TOTP), finds it in the queue, confirms the release, and
the saga goes on to the bank with the employee as its reviewer; another is cancelled the same
way and its money returned."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page
from pydantic import SecretStr

from hiwallet.backoffice_bff.app import create_backoffice_bff_app
from hiwallet.backoffice_bff.settings import BackofficeBffSettings
from tests import pgtemplate
from tests.backoffice_bff.conftest import CLIENT, sign_in, with_panel_redirect
from tests.browser.conftest import browser, check_page, context, page  # noqa: F401
from tests.e2e.harness import Process
from tests.e2e.withdrawals import ORCHESTRATOR, WithdrawalSystem
from tests.identity.conftest import SECRETS, IdentityServer, run_sync, staff_identity_template, start_server  # noqa: F401
from tests.servers import free_port, serve, stop
from tests.staff_admin.conftest import StaffAdminServer
from tests.wallet_api.conftest import test_realms as realm_files  # not collected as a test

TL = 100
REVIEWED = 15_000 * TL  # above the review threshold (10,000.00 TRY)
PANEL_PORT = free_port()


@pytest.fixture(scope="module")
def staff_idp(
    staff_identity_template: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[IdentityServer]:
    """This module's staff realm: the tests' realms, backoffice-bff's redirect at this panel."""
    realms: Path = realm_files(tmp_path_factory.mktemp("realms"))
    with_panel_redirect(realms, PANEL_PORT)
    database = run_sync(pgtemplate.clone(staff_identity_template))
    server = start_server("hiwallet-staff", database, realms_dir=realms)
    yield server
    server.stop()
    run_sync(pgtemplate.drop_database(database))


@pytest.fixture
async def reviewed(
    withdrawals: WithdrawalSystem,
    staff_admin_process: tuple[Process, StaffAdminServer],
    staff_idp: IdentityServer,
) -> AsyncIterator[tuple[WithdrawalSystem, StaffAdminServer, str]]:
    """The orchestrator asking this realm and staff-admin; the panel in front of both."""
    process, helper = staff_admin_process
    await withdrawals.replace(ORCHESTRATOR, staff_issuer_base=staff_idp.base_url, staff_admin_url=process.url)
    settings = BackofficeBffSettings(
        port=PANEL_PORT,
        public_url=f"http://127.0.0.1:{PANEL_PORT}",
        staff_issuer=staff_idp.issuer,
        client_secret=SecretStr(SECRETS[CLIENT]),
        staff_admin_url=process.url,
        withdrawals_url=withdrawals.orchestrator.url,
    )
    base, server, thread = serve(create_backoffice_bff_app(settings), CLIENT, port=PANEL_PORT)
    try:
        yield withdrawals, helper, base
    finally:
        stop(server, thread)


async def test_a_large_withdrawal_released_and_another_cancelled_after_confirmation(
    page: Page,  # noqa: F811
    reviewed: tuple[WithdrawalSystem, StaffAdminServer, str],
    staff_idp: IdentityServer,
) -> None:
    system, helper, base = reviewed
    customer = await system.customer(funds=40_000 * TL)
    sagas = [await system.withdraw(customer, REVIEWED, system.iban()) for _ in range(2)]
    for saga in sagas:
        await system.reaches(saga, "under_review")
    reviewer = helper.employee(f"r{uuid.uuid4().hex[:8]}", "withdrawal.review")

    await sign_in(page, base, staff_idp, reviewer, "/withdrawals")
    await page.get_by_role("heading", name="Withdrawals waiting for a review").wait_for()
    assert await page.locator("tbody tr").count() == 2
    assert "₺15,000.00" in await page.locator("tbody").inner_text()
    await check_page(page, "backoffice withdrawal queue")

    await page.get_by_role("link", name=f"Release {sagas[0]}").click()
    await page.get_by_role("heading", name="Release this withdrawal?").wait_for()
    await check_page(page, "backoffice release confirmation")
    assert (await system.saga(sagas[0]))["state"] == "under_review"  # nothing before the confirmation
    await page.get_by_role("button", name="Yes, release").click()
    await page.get_by_text("The withdrawal was released to the bank.").wait_for()
    released = await system.reaches(sagas[0], "completed")
    assert released["reviewed_by"] == f"staff:{reviewer.subject}"

    await page.get_by_role("link", name=f"Cancel {sagas[1]}").click()
    await page.get_by_role("heading", name="Cancel this withdrawal?").wait_for()
    await page.get_by_role("button", name="Yes, cancel the withdrawal").click()
    await page.get_by_text("The withdrawal was cancelled and the money returned.").wait_for()
    await system.reaches(sagas[1], "cancelled")
    assert await page.locator("tbody tr").count() == 0
    await page.get_by_text("Nothing is waiting for a review.").wait_for()
