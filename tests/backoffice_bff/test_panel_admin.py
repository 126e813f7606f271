"""The panel's administration, as an employee does it in chromium against the real staff realm,
staff-admin and wallet-api: an employee's roles changed (and staff-admin's refusals drawn on the
form, nothing changed), a promo campaign created from the campaigns page (wallet-api's
validation errors beside their fields, what was entered kept), and the lists paged with next and
previous links over the services' cursors (a page size of 2 here, the filters kept);
reconciliation findings resolved with a note, and a customer raised to the Contracted tier."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, Page

from hiwallet.reconciliation import PAYOUT_UNMATCHED, record_finding
from tests.backoffice_bff.conftest import Panel
from tests.browser.conftest import check_page

MANAGE, VIEW, REVIEW = "staff.manage", "customer.view", "withdrawal.review"
CAMPAIGNS = ("campaigns.view", "campaigns.manage")


@pytest.fixture
def panel_page_size() -> int:
    return 2


async def _signed_in_http(page: Page, context: BrowserContext, panel: Panel) -> tuple[httpx.AsyncClient, str]:
    """The browser's session as an HTTP client (a request a form cannot make: a forged or a
    stale one), with the page's CSRF token."""
    cookie = next(c for c in await context.cookies() if c["name"].endswith("hiwallet-session"))
    csrf = await page.locator('form[action="/logout"] input[name="csrf"]').get_attribute("value")
    assert csrf
    http = httpx.AsyncClient(
        base_url=panel.base_url,
        cookies={cookie["name"]: cookie["value"]},
        headers={"Origin": panel.base_url, "Accept-Language": "en"},
        timeout=30,
    )
    return http, csrf


def _role_ids(panel: Panel, subject: str) -> set[str]:
    rows = panel.staff_admin.sql("SELECT role_id FROM staff.employee_roles WHERE subject = $1", subject)
    return {r["role_id"] for r in rows}


async def test_an_administrator_changes_an_employees_roles_and_sees_the_refusals(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    admin = panel.employee("Ada", MANAGE)
    clerk = panel.employee("Umut", VIEW)
    reviewers = panel.staff_admin.role("Reviewers", REVIEW)
    before = _role_ids(panel, clerk.subject)
    assert len(before) == 1

    await panel.sign_in(page, admin, "/employees")
    await page.get_by_role("link", name="Change roles Umut").click()
    await page.get_by_role("heading", name="Roles of Umut").wait_for()
    await check_page(page, "backoffice employee roles")
    await page.get_by_label("Reviewers").check()
    await page.get_by_role("button", name="Save the roles").click()
    await page.get_by_text("The employee's roles were changed").wait_for()
    assert _role_ids(panel, clerk.subject) == before | {reviewers}
    row = await page.locator("table").first.get_by_role("row", name="Umut").inner_text()
    assert "Reviewers" in row, row
    audit = panel.staff_admin.sql(
        "SELECT actor FROM staff.audit_log WHERE action = 'employee.roles_changed' AND target = $1",
        f"employee:{clerk.subject}",
    )
    assert [a["actor"] for a in audit] == [f"staff:{admin.subject}"]
    # no link to one's own roles
    assert await page.get_by_role("link", name="Change roles Ada").count() == 0

    http, csrf = await _signed_in_http(page, context, panel)
    async with http:
        # a role that does not exist (deleted since the form was drawn): the form again, the
        # refusal said in the panel's words, nothing changed
        unknown = await http.post(
            f"/employees/{clerk.subject}/roles", data={"csrf": csrf, "role_id": ["r_gone", reviewers]}
        )
        assert unknown.status_code == 422, unknown.text
        assert "A role chosen does not exist any more" in unknown.text
        assert "Nothing was changed." in unknown.text
        assert 'role="alert"' in unknown.text
        # one's own roles: staff-admin's self-escalation refusal, on the form
        own = await http.post(f"/employees/{admin.subject}/roles", data={"csrf": csrf})
        assert own.status_code == 403
        assert "An employee cannot change their own roles" in own.text
        assert "Roles of Ada" in own.text
        # no CSRF token: refused before anything is asked
        forged = await http.post(f"/employees/{clerk.subject}/roles", data={"role_id": reviewers})
        assert forged.status_code == 403
        # Turkish
        turkish = await http.post(
            f"/employees/{clerk.subject}/roles",
            data={"csrf": csrf, "role_id": "r_gone"},
            headers={"Accept-Language": "tr"},
        )
        assert "Seçilen rollerden biri artık yok" in turkish.text
    assert _role_ids(panel, clerk.subject) == before | {reviewers}
    assert _role_ids(panel, admin.subject) != set()

    # without staff.manage: neither the page nor the change
    other = await context.browser.new_context(locale="en-GB") if context.browser else None
    assert other is not None
    try:
        their_page = await other.new_page()
        await panel.sign_in(their_page, clerk, "/customers")
        answer = await their_page.goto(panel.base_url + f"/employees/{admin.subject}/roles")
        assert answer is not None and answer.status == 403
        await their_page.get_by_role("heading", name="You may not do this").wait_for()
    finally:
        await other.close()


async def test_a_campaign_created_from_the_campaigns_page_with_wallet_apis_validation(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    manager = panel.employee("Ceren", *CAMPAIGNS)
    await panel.sign_in(page, manager, "/campaigns")
    await page.get_by_role("heading", name="New campaign").wait_for()
    form_key = page.locator('form[action="/campaigns"] input[name="key"]')
    key = await form_key.get_attribute("value")
    assert key

    # Wallet-api validates: an empty name and a budget that is no amount, refused together
    await page.get_by_label("Budget (TRY)").fill("lots")
    await page.get_by_label("Last day (Istanbul time)").fill("2099-12-31")
    await page.get_by_role("button", name="Create the campaign").click()
    await page.get_by_text("Give a name of 1 to 140 characters.").wait_for()
    await page.get_by_text("Give an amount above zero").wait_for()
    assert await page.get_by_label("Name").get_attribute("aria-invalid") == "true"
    assert await page.get_by_label("Budget (TRY)").input_value() == "lots"  # kept to correct
    assert await page.get_by_label("Last day (Istanbul time)").input_value() == "2099-12-31"
    assert await page.get_by_text("Give a day in the future.").count() == 0
    assert await form_key.get_attribute("value") == key  # a refusal is not stored: the key kept
    await check_page(page, "backoffice campaign refused")

    # a day gone by: wallet-api's own check, on its field
    await page.get_by_label("Name").fill("Yaz")
    await page.get_by_label("Budget (TRY)").fill("1.500,00")
    await page.get_by_label("Last day (Istanbul time)").fill("2020-01-01")
    await page.get_by_role("button", name="Create the campaign").click()
    await page.get_by_text("Give a day in the future.").wait_for()
    assert await page.get_by_text("Give a name of 1 to 140 characters.").count() == 0
    answer = await panel.api.http.get("/v1/staff/campaigns", headers=manager.auth)
    assert answer.json()["campaigns"] == []

    ends = (datetime.now(UTC) + timedelta(days=30)).date().isoformat()
    await page.get_by_label("Last day (Istanbul time)").fill(ends)
    await page.get_by_role("button", name="Create the campaign").click()
    await page.get_by_text("The campaign was created.").wait_for()
    row = await page.locator("tbody tr").first.inner_text()
    assert "Yaz" in row and row.count("₺1,500.00") == 2, row
    made = (await panel.api.http.get("/v1/staff/campaigns", headers=manager.auth)).json()["campaigns"]
    assert [(c["name"], c["budget_minor"], c["created_by"]) for c in made] == [
        ("Yaz", 150_000, f"staff:{manager.subject}")
    ]
    assert made[0]["ends_at"].startswith(ends) and made[0]["ends_at"].endswith("20:59:59Z")
    assert await form_key.get_attribute("value") not in (None, key)  # a new form, a new key

    # the same form submitted twice (a resubmission, then a double click): one campaign each
    http, csrf = await _signed_in_http(page, context, panel)
    async with http:

        async def submit(name: str, form: str) -> httpx.Response:
            data = {"csrf": csrf, "key": form, "name": name, "budget": "10", "ends": ends}
            return await http.post("/campaigns", data=data)

        def form_of(text: str) -> str:
            return text.split('name="key" value="', 1)[1].split('"', 1)[0]

        form = form_of((await http.get("/campaigns")).text)
        for _ in range(2):
            answer = await submit("Kış", form)
            assert answer.status_code == 303 and answer.headers["location"] == "/campaigns?done=1"
        form = form_of((await http.get("/campaigns")).text)
        answers = await asyncio.gather(submit("Bahar", form), submit("Bahar", form))
        # the second either replays the first or, while it runs, is told so on the form
        assert sorted(a.status_code for a in answers)[0] == 303, [a.text for a in answers]
        for a in answers:
            assert a.status_code in (303, 409), a.text
        # the same key with another form's content: refused, and the form drawn with a new key
        reused = await submit("Yaz 2", form)
        assert reused.status_code == 422 and form_of(reused.text) != form
    made = (await panel.api.http.get("/v1/staff/campaigns", headers=manager.auth)).json()["campaigns"]
    assert sorted(c["name"] for c in made) == ["Bahar", "Kış", "Yaz"]

    # campaigns.view alone: the list, no form; a forged POST is the 403 page
    viewer = panel.employee("Deniz", "campaigns.view")
    other = await context.browser.new_context(locale="en-GB") if context.browser else None
    assert other is not None
    try:
        their_page = await other.new_page()
        await panel.sign_in(their_page, viewer, "/campaigns")
        await their_page.get_by_text("Bahar").wait_for()  # the newest (a page holds two)
        assert await their_page.get_by_role("heading", name="New campaign").count() == 0
        http, csrf = await _signed_in_http(their_page, other, panel)
        async with http:
            forged = await http.post(
                "/campaigns", data={"csrf": csrf, "name": "X", "budget": "1", "ends": ends}
            )
        assert forged.status_code == 403 and "You may not do this" in forged.text
    finally:
        await other.close()


async def _rows(http: httpx.AsyncClient, href: str) -> tuple[list[str], dict[str, Any]]:
    """A list page's first cells and its pager's links."""
    answer = await http.get(href)
    assert answer.status_code == 200, answer.text
    text = answer.text
    body = text.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    cells = [row.split("<td>", 2)[1].split("</td>", 1)[0] for row in body.split("<tr>")[1:]]
    links: dict[str, Any] = {}
    for rel in ("prev", "next"):
        marker = f'rel="{rel}"'
        links[rel] = None
        if marker in text:
            before = text.split(marker, 1)[0]
            links[rel] = before.rsplit('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    return cells, links


async def test_the_lists_are_paged_with_next_and_previous(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    boss = panel.employee("Ece", MANAGE, *CAMPAIGNS)
    ends = (datetime.now(UTC) + timedelta(days=9)).isoformat()
    for n in range(5):
        made = await panel.api.http.post(
            "/v1/staff/campaigns",
            json={"name": f"C{n}", "budget_minor": 1_000, "ends_at": ends},
            headers={**boss.auth, "Idempotency-Key": f"c-{n}"},
        )
        assert made.status_code == 201, made.text
    others = [panel.employee(f"E{n}", VIEW) for n in range(3)]
    role = panel.staff_admin.role("Desk", VIEW)
    for person in others:
        changed = panel.staff_admin.call(
            "PUT", f"/v1/employees/{person.subject}/roles", boss, {"role_ids": [role]}
        )
        assert changed.status_code == 200, changed.text

    await panel.sign_in(page, boss, "/campaigns")
    assert await page.locator("tbody tr").count() == 2
    await page.get_by_role("link", name="Next page").click()
    await page.get_by_role("link", name="Previous page").wait_for()
    await check_page(page, "backoffice campaigns paged")

    http, _ = await _signed_in_http(page, context, panel)
    async with http:
        seen: list[list[str]] = []
        href: str | None = "/campaigns"
        while href:
            cells, links = await _rows(http, href)
            seen.append(cells)
            href = links["next"]
            assert len(seen) <= 5
        assert seen == [["C4", "C3"], ["C2", "C1"], ["C0"]]  # newest first, each once
        # and back: previous from the last page, then from the second (the first has none)
        cells, links = await _rows(http, "/campaigns")
        _, second = await _rows(http, links["next"])
        third, last = await _rows(http, second["next"])
        assert third == ["C0"] and last["next"] is None
        back, back_links = await _rows(http, last["prev"])
        assert back == ["C2", "C1"]
        first, first_links = await _rows(http, back_links["prev"])
        assert first == ["C4", "C3"] and first_links["prev"] is None

        # the audit log: the filter kept in the links
        entries: list[str] = []
        href = "/audit?action=employee.roles_changed"
        while href:
            assert "action=employee.roles_changed" in href
            cells, links = await _rows(http, href)
            entries += cells
            href = links["next"]
        assert len(entries) == 3
        # the employees: four of them, two pages
        names: list[str] = []
        href = "/employees"
        while href:
            answer = await http.get(href)
            body = answer.text.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
            names += [n for n in ("Ece", "E0", "E1", "E2") if f"<td>{n}</td>" in body]
            _, links = await _rows(http, href)
            href = links["next"]
        assert sorted(names) == ["E0", "E1", "E2", "Ece"]
        # a cursor that is none of the service's: its refusal, as a page
        refused = await http.get("/campaigns?cursor=not-a-cursor")
        assert refused.status_code in (409, 422) and refused.headers["content-type"].startswith("text/html")


async def test_reconciliation_findings_resolved_and_a_customer_raised_to_contracted(
    page: Page, context: BrowserContext, panel: Panel
) -> None:
    for n in range(3):
        await record_finding(panel.api.pool, PAYOUT_UNMATCHED, f"po_{n}", {"amount_minor": n})
    customer = await panel.api.customer()
    clerk = panel.employee("Filiz", "finance.reconciliation", VIEW, "customer.contract")
    await panel.sign_in(page, clerk, "/reconciliation")
    await page.get_by_role("heading", name="Reconciliation findings").wait_for()
    assert await page.locator("header nav a").all_inner_texts() == ["Customers", "Reconciliation"]
    assert await page.locator("section.card").count() == 2  # a page of 2, the third on the next
    await page.get_by_role("link", name="Next page").wait_for()
    await check_page(page, "backoffice reconciliation")

    newest = page.locator("section.card").first
    assert "po_2" in await newest.inner_text()
    action = await newest.locator("form").get_attribute("action")
    assert action
    http, csrf = await _signed_in_http(page, context, panel)
    empty = await http.post(action, data={"csrf": csrf, "note": "  "})
    assert empty.status_code == 422 and "Write a note of 1 to 2000 characters" in empty.text
    await newest.get_by_label("Resolution note").fill("paid by hand on the 3rd")
    await newest.get_by_role("button", name="Resolve payout_unmatched po_2").click()
    await page.get_by_text("The finding was resolved.").wait_for()
    assert "po_2" not in await page.locator("main").inner_text()
    twice = await http.post(action, data={"csrf": csrf, "note": "again"})
    assert twice.status_code == 409 and "resolved already" in twice.text
    await page.get_by_role("link", name="Resolved").click()
    resolved = await page.locator("section.card").inner_text()
    assert "paid by hand on the 3rd" in resolved and f"staff:{clerk.subject}" in resolved

    # the customer's record: raised to the Contracted tier on its evidence
    await page.goto(panel.base_url + f"/customers/{customer.account_id}")
    await page.get_by_role("heading", name="Raise to the Contracted tier").wait_for()
    no_reference = await http.post(
        f"/customers/{customer.account_id}/contract",
        data={"csrf": csrf, "evidence": "signed_agreement", "reference": ""},
    )
    assert no_reference.status_code == 422, no_reference.text
    assert "Give the evidence" in no_reference.text, no_reference.text[-3000:]
    await page.get_by_label("Evidence", exact=True).select_option("signed_agreement")
    await page.get_by_label("Evidence reference").fill("AG-2026-17")
    await check_page(page, "backoffice customer contract")
    await page.get_by_role("button", name="Raise to Contracted").click()
    await page.get_by_text("The account was raised to the Contracted tier.").wait_for()
    assert await page.get_by_role("heading", name="Raise to the Contracted tier").count() == 0
    account = await panel.api.http.get(f"/v1/staff/accounts/{customer.account_id}", headers=clerk.auth)
    assert account.json()["tier"] == "contracted"
    await http.aclose()
