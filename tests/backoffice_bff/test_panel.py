"""The backoffice panel as an employee uses it, in chromium: sign-in on the staff realm's pages
(password, then the authenticator's code), the menu of exactly their permissions (staff-admin's
/v1/me), a customer found and their record read, what they may not do neither shown nor done (a
forged POST is the 403 page), the language switch, a service away (the 503 page), an invitation
sent and completed by the colleague, the cookie's flags, CSRF refusals, sign-out. Each page is
checked with axe-core and photographed at 1280 and 390 px (tests/browser/conftest.check_page)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from playwright.async_api import Browser, BrowserContext, Page

from tests.backoffice_bff.conftest import Panel
from tests.browser.conftest import ACTION_TIMEOUT_MS, check_page
from tests.staff_admin.conftest import Catcher, Employee

VIEW, REVIEW, MANAGE = "customer.view", "withdrawal.review", "staff.manage"


async def _menu(page: Page) -> list[str]:
    return [t.strip() for t in await page.locator("header nav a").all_inner_texts()]


async def _session_cookie(context: BrowserContext) -> dict[str, Any]:
    return next(dict(c) for c in await context.cookies() if c["name"].endswith("hiwallet-session"))


async def _csrf(page: Page) -> str:
    value = await page.locator('form[action="/logout"] input[name="csrf"]').get_attribute("value")
    assert value
    return value


async def test_an_employee_signs_in_with_totp_and_sees_the_menu_of_their_permissions(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    clerk = panel.employee("Deniz", VIEW, MANAGE)
    await panel.sign_in(page, clerk)
    await page.get_by_role("heading", name="Welcome, Deniz").wait_for()
    assert await _menu(page) == ["Customers", "Employees", "Invitations", "Audit log"]
    await check_page(page, "backoffice home")
    # The session: sealed, HttpOnly (script cannot read it), SameSite; plain http on loopback is
    # the documented development exception to Secure and __Host-.
    cookie = await _session_cookie(context)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/"
    assert "hiwallet-session" not in await page.evaluate("document.cookie")
    assert clerk.token not in cookie["value"]

    reviewer = panel.employee("Ece", REVIEW)
    other = await context.browser.new_context(locale="en-GB") if context.browser else None
    assert other is not None
    try:
        second = await other.new_page()
        await panel.sign_in(second, reviewer)
        assert await _menu(second) == ["Withdrawal review"]
    finally:
        await other.close()


async def test_without_withdrawal_review_the_queue_is_neither_shown_nor_done(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    clerk = panel.employee("Can", VIEW)
    await panel.sign_in(page, clerk)
    assert "Withdrawal review" not in await _menu(page)
    assert await page.get_by_role("link", name="Withdrawal review").count() == 0

    await page.goto(panel.base_url + "/withdrawals")
    await page.get_by_role("heading", name="You may not do this").wait_for()
    assert await _menu(page) == ["Customers"]  # asked again: the page still draws what they may do
    await check_page(page, "backoffice forbidden")

    # Forged: the release posted anyway, with a valid session, token and origin: the 403 page.
    cookie = await _session_cookie(context)
    csrf = await _csrf(page)
    async with httpx.AsyncClient(
        base_url=panel.base_url, cookies={cookie["name"]: cookie["value"]}, headers={"Accept-Language": "en"}
    ) as http:
        forged = await http.post(
            "/withdrawals/w_0000/release", data={"csrf": csrf, "key": "k"}, headers={"Origin": panel.base_url}
        )
        asked = await http.get("/withdrawals/w_0000/release")
    for answer in (forged, asked):
        assert answer.status_code == 403
        assert answer.headers["content-type"].startswith("text/html")
        assert "You may not do this" in answer.text


async def test_state_changing_requests_need_the_csrf_token_and_this_origin(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    admin = panel.employee("Ada", MANAGE)
    await panel.sign_in(page, admin)
    cookie = await _session_cookie(context)
    csrf = await _csrf(page)
    body = {"email": "someone@hiwallet.dev"}
    async with httpx.AsyncClient(base_url=panel.base_url, cookies={cookie["name"]: cookie["value"]}) as http:
        refused = [
            await http.post("/invitations", data=body, headers={"Origin": panel.base_url}),
            await http.post(
                "/invitations", data={**body, "csrf": "x" * 43}, headers={"Origin": panel.base_url}
            ),
            await http.post(
                "/invitations", data={**body, "csrf": csrf}, headers={"Origin": "http://evil.example"}
            ),
            await http.post("/invitations", data={**body, "csrf": csrf}),
            await http.post("/logout", data={}, headers={"Origin": panel.base_url}),
        ]
    for answer in refused:
        assert answer.status_code == 403, answer.text
        assert answer.headers["content-type"].startswith("text/html")
    assert panel.staff_admin.sql("SELECT 1 FROM staff.invitations WHERE email = $1", body["email"]) == []
    # The pages' headers: a strict policy, no caching.
    async with httpx.AsyncClient(base_url=panel.base_url) as http:
        answer = await http.get("/signed-out")
    csp = answer.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert answer.headers["cache-control"] == "no-store"


async def test_a_customer_found_and_their_record_read(page: Page, panel: Panel) -> None:
    customer = await panel.api.customer(funds=123_456)
    clerk = panel.employee("Selin", VIEW)
    await panel.sign_in(page, clerk)
    await page.get_by_role("link", name="Customers").first.click()
    await page.get_by_label("Search by").select_option("wallet_number")
    await page.get_by_label("Search for").fill(customer.number)
    await page.get_by_role("button", name="Search").click()
    await page.get_by_role("heading", name="Results").wait_for()
    await check_page(page, "backoffice customers")
    await page.locator("tbody").get_by_role("link").first.click()
    assert customer.account_id in await page.locator("main").inner_text()
    await page.get_by_role("heading", name=f"Wallet {customer.number} (TRY)").wait_for()
    assert "₺1,234.56" in await page.locator("main").inner_text()
    await check_page(page, "backoffice customer record")

    await page.goto(panel.base_url + "/customers?by=email&q=nobody%40example.com")
    await page.get_by_text("No customer found.").wait_for()


async def test_the_language_switch_is_remembered(page: Page, panel: Panel) -> None:
    clerk = panel.employee("Mert", VIEW)
    await panel.sign_in(page, clerk)
    await page.get_by_role("link", name="Türkçe").click()
    await page.get_by_role("heading", name="Hoş geldiniz, Mert").wait_for()
    assert await page.locator("html").get_attribute("lang") == "tr"
    assert await _menu(page) == ["Müşteriler"]
    await check_page(page, "backoffice home tr")
    await page.goto(panel.base_url + "/customers")
    await page.get_by_role("heading", name="Müşteri bul").wait_for()
    await page.get_by_role("link", name="English").click()
    await page.get_by_role("heading", name="Find a customer").wait_for()


async def test_a_service_away_is_a_page_that_says_so(page: Page, panel: Panel) -> None:
    reviewer = panel.employee("Oya", REVIEW)
    await panel.sign_in(page, reviewer)
    # withdrawal-orchestrator is not running for this panel: the queue's page says so
    answer = await page.goto(panel.base_url + "/withdrawals")
    assert answer is not None and answer.status == 503
    await page.get_by_role("heading", name="A service is not answering").wait_for()
    assert "withdrawal-orchestrator" in await page.locator("main").inner_text()
    await check_page(page, "backoffice service away")

    panel.staff_admin.stop()  # who the employee is cannot be said: no page at all
    answer = await page.goto(panel.base_url + "/")
    assert answer is not None and answer.status == 503
    await page.get_by_role("heading", name="A service is not answering").wait_for()
    assert "Traceback" not in await page.content()


async def test_sign_out_ends_the_session_here_and_at_the_staff_realm(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    clerk = panel.employee("Nil", VIEW)
    await panel.sign_in(page, clerk)
    await page.get_by_role("button", name="Sign out").click()
    await page.get_by_role("heading", name="You are signed out").wait_for()
    await check_page(page, "backoffice signed out")
    assert not [c for c in await context.cookies() if c["name"].endswith("hiwallet-session")]
    await page.goto(panel.base_url + "/customers")
    await page.get_by_label("Password").wait_for()  # the staff realm asks again: its session ended too


async def test_an_invitation_sent_and_completed_by_a_colleague(
    page: Page, browser: Browser, panel: Panel, catcher: Catcher
) -> None:
    admin = panel.employee("Yasemin", MANAGE)
    panel.staff_admin.role("Customer desk", VIEW)
    await panel.sign_in(page, admin)
    await page.get_by_role("link", name="Invitations").first.click()
    await page.get_by_label("E-mail address").fill("colleague@hiwallet.dev")
    await page.get_by_label("Name").fill("Colleague")
    await page.get_by_label("Customer desk").check()
    await check_page(page, "backoffice invitations")
    await page.get_by_role("button", name="Send the invitation").click()
    await page.get_by_text("The invitation was sent.").wait_for()
    assert "pending" in await page.locator("table").inner_text()

    # The colleague: the mail's link (identity's pages: a password, the authenticator), then the
    # panel, where their first page completes the invitation with its roles.
    secret = panel.staff_admin.accept(catcher.link_for("colleague@hiwallet.dev"))
    colleague = Employee("", "colleague@hiwallet.dev", "", secret)
    theirs = await browser.new_context(locale="en-GB")
    theirs.set_default_timeout(ACTION_TIMEOUT_MS)
    try:
        their_page = await theirs.new_page()
        await panel.sign_in(their_page, colleague)
        assert await _menu(their_page) == ["Customers"]
    finally:
        await theirs.close()

    await page.reload()
    assert "completed" in await page.locator("table").inner_text()
    # another, revoked before it is used
    await page.get_by_label("E-mail address").fill("second@hiwallet.dev")
    await page.get_by_role("button", name="Send the invitation").click()
    await page.get_by_text("The invitation was sent.").wait_for()
    await page.get_by_role("button", name="Revoke second@hiwallet.dev").click()
    await page.get_by_role("row", name=re.compile("second@hiwallet.dev")).get_by_text("revoked").wait_for()
    await page.get_by_role("link", name="Audit log").first.click()
    await page.get_by_label("Action").fill("invitation.completed")
    await page.get_by_role("button", name="Filter").click()
    rows = await page.locator("tbody tr").all_inner_texts()
    assert len(rows) == 1 and "invitation.completed" in rows[0], rows
    await check_page(page, "backoffice audit")
    await page.get_by_role("link", name="Employees").first.click()
    table = await page.locator("table").first.inner_text()
    assert "Colleague" in table and re.search(r"Customer desk", table)
    await check_page(page, "backoffice employees")


async def test_a_goodwill_credit_above_the_threshold_waits_for_a_second_employee(
    page: Page, browser: Browser, panel: Panel
) -> None:
    customer = await panel.api.customer()
    first = panel.employee("Aylin", "credit.goodwill")
    second = panel.employee("Burak", "credit.goodwill", "campaigns.view", "campaigns.manage", VIEW)
    ends = (datetime.now(UTC) + timedelta(days=7)).isoformat()
    made = await panel.api.http.post(
        "/v1/staff/campaigns",
        json={"name": "Kış", "budget_minor": 100_000, "ends_at": ends},
        headers={**second.auth, "Idempotency-Key": "campaign-1"},
    )
    assert made.status_code == 201, made.text

    await panel.sign_in(page, first)
    assert await _menu(page) == ["Goodwill credits"]
    await page.get_by_role("link", name="Goodwill credits").first.click()
    await page.get_by_label("Wallet id").fill(customer.wallet_id)
    await page.get_by_label("Amount (TRY)").fill("750.00")  # above the 500.00 threshold
    await page.get_by_label("Reason").fill("late refund")
    await page.get_by_role("button", name="Credit", exact=True).click()
    await page.get_by_text("the credit waits for a second employee's approval").wait_for()
    await page.get_by_text("Your own request").wait_for()  # never one's own approval
    assert await page.get_by_role("button", name="Approve").count() == 0
    await check_page(page, "backoffice goodwill")

    theirs = await browser.new_context(locale="en-GB")
    theirs.set_default_timeout(ACTION_TIMEOUT_MS)
    try:
        their_page = await theirs.new_page()
        await panel.sign_in(their_page, second, "/goodwill")
        await their_page.get_by_role("button", name="Approve").click()
        await their_page.get_by_text("Approved: the credit was posted.").wait_for()
        await their_page.get_by_text("Nothing is waiting.").wait_for()
        await their_page.get_by_role("link", name="Campaigns").first.click()
        row = await their_page.locator("tbody tr").first.inner_text()
        assert "Kış" in row and row.count("₺1,000.00") == 2, row  # the budget, all of it left
        await check_page(their_page, "backoffice campaigns")
    finally:
        await theirs.close()
    account = await panel.api.http.get(f"/v1/staff/accounts/{customer.account_id}", headers=second.auth)
    assert account.json()["wallets"][0]["cash"] == 75_000


async def test_promo_programmes_accepted_or_refused(page: Page, panel: Panel) -> None:
    shop = await panel.api.business(funds=1_000_00)
    first = await panel.api.programme(shop, budget=200_00, accept=False)
    second = await panel.api.programme(shop, budget=300_00, accept=False)
    reviewer = panel.employee("Zeynep", "promo.merchant_accept", VIEW)
    await panel.sign_in(page, reviewer, "/programmes")
    await page.get_by_role("heading", name="Promo programmes waiting for a decision").wait_for()
    assert await page.locator("section.card").count() == 2
    await check_page(page, "backoffice programmes")
    cards = page.locator("section.card")
    await cards.filter(has_text="₺200.00").get_by_role("button", name="Accept").click()
    await page.get_by_text("The programme was accepted.").wait_for()
    await cards.filter(has_text="₺300.00").get_by_label("Reason for a refusal").fill("budget too large")
    await cards.filter(has_text="₺300.00").get_by_role("button", name="Refuse").click()
    await page.get_by_text("The programme was refused.").wait_for()
    await page.get_by_text("Nothing is waiting for a decision.").wait_for()
    statuses = {}
    for programme in (first, second):
        seen = await panel.api.http.get(f"/v1/staff/promo-programmes/{programme}", headers=reviewer.auth)
        statuses[programme] = (seen.json()["status"], seen.json()["decided_by"])
    actor = f"staff:{reviewer.subject}"
    assert statuses == {first: ("accepted", actor), second: ("refused", actor)}


async def test_staff_promo_granted_to_a_customer(page: Page, panel: Panel) -> None:
    customer = await panel.api.customer()
    granter = panel.employee("Kaan", "promo.staff", VIEW)
    await panel.sign_in(page, granter, "/promo")
    await page.get_by_label("Wallet id").fill(customer.wallet_id)
    await page.get_by_label("Amount (TRY)").fill("25,00")  # the Turkish decimal comma is read too
    await page.get_by_label("Reference").fill("welcome back")
    await check_page(page, "backoffice staff promo")
    await page.get_by_role("button", name="Grant promo").click()
    await page.get_by_text("The promo was granted.").wait_for()
    account = await panel.api.http.get(f"/v1/staff/accounts/{customer.account_id}", headers=granter.auth)
    assert account.json()["wallets"][0]["promo"] == 2_500


async def test_a_staff_realm_user_who_is_no_employee_gets_the_403_page_and_can_sign_out(
    page: Page, panel: Panel
) -> None:
    stranger = panel.staff_admin.user("Stranger")  # a password and TOTP, but no employee row
    await panel.sign_in(page, stranger)
    await page.get_by_role("heading", name="You may not do this").wait_for()
    assert await _menu(page) == []
    await page.get_by_role("button", name="Sign out").click()
    await page.get_by_role("heading", name="You are signed out").wait_for()


async def test_an_employee_deactivated_is_refused_from_their_next_page(
    page: Page, browser: Browser, panel: Panel
) -> None:
    admin = panel.employee("Melis", MANAGE)
    clerk = panel.employee("Umut", VIEW)
    theirs = await browser.new_context(locale="en-GB")
    theirs.set_default_timeout(ACTION_TIMEOUT_MS)
    try:
        their_page = await theirs.new_page()
        await panel.sign_in(their_page, clerk, "/customers")
        await their_page.get_by_role("heading", name="Find a customer").wait_for()

        await panel.sign_in(page, admin, "/employees")
        await check_page(page, "backoffice employees and roles")
        await page.get_by_role("button", name="Deactivate Umut").click()
        await page.get_by_text("The employee was deactivated").wait_for()

        await their_page.reload()  # the same session: /v1/me asked again, now refused
        await their_page.get_by_role("heading", name="You may not do this").wait_for()
        assert await _menu(their_page) == []
    finally:
        await theirs.close()
