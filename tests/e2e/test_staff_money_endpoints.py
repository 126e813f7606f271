"""wallet-api's staff money endpoints (issue 13) against the real staff-admin process
(``hiwallet run staff-admin`` on its own cloned database) and the real staff realm: employees
log in on the identity pages (password, TOTP) and hold roles in staff-admin's database; wallet-api
asks GET /v1/me with the employee's own token on every staff request.

For every staff money endpoint: the permission (allowed), without it (403 permission-missing), a
customer's token (403 caller-not-allowed), the employee deactivated through staff-admin's API
(refused on the very next request, same token), staff-admin stopped (503 while a customer's
request at the same moment succeeds). The ledger verifies clean after the money moved.
(tests/wallet_api/test_staff_money.py holds the rules themselves: budgets, four eyes, ceilings.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Process
from tests.identity.conftest import IdentityServer
from tests.staff_admin.conftest import Employee, StaffAdminServer
from tests.wallet_api.conftest import WalletApi, assert_problem, running_api

TL = 100
PROMO, VIEW, MANAGE = "promo.staff", "campaigns.view", "campaigns.manage"
ACCEPT, GOODWILL = "promo.merchant_accept", "credit.goodwill"
ALL = (PROMO, VIEW, MANAGE, ACCEPT, GOODWILL)


@pytest.fixture
async def staffed(
    wallet_db: str,
    staff_admin_process: tuple[Process, StaffAdminServer],
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
) -> AsyncIterator[tuple[WalletApi, Process, StaffAdminServer]]:
    process, helper = staff_admin_process
    if not process.alive():
        process.start()
        await process.wait_ready()
    async with running_api(wallet_db, customer_idp, staff_idp, staff_admin_url=process.url) as api:
        yield api, process, helper


def employee(helper: StaffAdminServer, *permissions: str) -> Employee:
    return helper.employee(f"m{uuid.uuid4().hex[:8]}", *permissions)


Call = Callable[[dict[str, str]], Awaitable[httpx.Response]]


def days(n: int) -> str:
    return (datetime.now(UTC) + timedelta(days=n)).isoformat()


async def test_every_staff_money_endpoint_against_the_real_staff_admin(
    staffed: tuple[WalletApi, Process, StaffAdminServer],
) -> None:
    api, staff_admin, helper = staffed
    customer = await api.customer()
    shop = await api.business(funds=100 * TL)
    # The programme each decision is made on, and the campaign grants are made under.
    programmes = {d: await api.programme(shop, accept=False) for d in ("accept", "refuse")}
    owner = employee(helper, MANAGE)
    campaign = await api.http.post(
        "/v1/staff/campaigns",
        json={"name": "Bahar", "budget_minor": 1_000 * TL, "ends_at": days(10)},
        headers={**owner.auth, "Idempotency-Key": str(uuid.uuid4())},
    )
    assert campaign.status_code == 201, campaign.text
    grants = f"/v1/staff/campaigns/{campaign.json()['id']}/grants"

    def call(method: str, path: str, body: Any = None) -> Call:
        async def go(auth: dict[str, str]) -> httpx.Response:
            headers = {**auth, "Idempotency-Key": str(uuid.uuid4())}
            return await api.http.request(method, path, json=body, headers=headers)

        return go

    money = {"wallet": customer.wallet_id, "amount_minor": TL}
    decide = "/v1/staff/promo-programmes/{}/{}".format
    endpoints: dict[str, tuple[str, Call, int]] = {
        "promo": (PROMO, call("POST", "/v1/staff/promos", {**money, "expires_at": days(7)}), 201),
        "new campaign": (
            MANAGE,
            call("POST", "/v1/staff/campaigns", {"name": "Yaz", "budget_minor": TL, "ends_at": days(7)}),
            201,
        ),
        "campaigns": (VIEW, call("GET", "/v1/staff/campaigns"), 200),
        "campaign grant": (MANAGE, call("POST", grants, {**money, "expires_at": days(7)}), 201),
        "programmes": (ACCEPT, call("GET", "/v1/staff/promo-programmes?status=proposed"), 200),
        "accept": (
            ACCEPT,
            call("POST", decide(programmes["accept"], "accept"), {}),
            200,
        ),
        "refuse": (
            ACCEPT,
            call("POST", decide(programmes["refuse"], "refuse"), {}),
            200,
        ),
        "goodwill": (GOODWILL, call("POST", "/v1/staff/goodwill-credits", {**money, "reason": "ok"}), 201),
        "goodwill credits": (GOODWILL, call("GET", "/v1/staff/goodwill-credits"), 200),
    }
    everything = employee(helper, *ALL)
    for name, (permission, do, ok) in endpoints.items():
        allowed = await do(everything.auth)
        assert allowed.status_code == ok, (name, allowed.text)
        without = employee(helper, *(set(ALL) - {permission}))
        body = assert_problem(await do(without.auth), "permission-missing", 403)
        assert body["permission"] == permission, name
        assert_problem(await do(customer.auth), "caller-not-allowed", 403)

    # What moved is in the ledger in the employee's name.
    actor = f"staff:{everything.subject}"
    async with api.owner_connection() as conn:
        actors = await conn.fetch(
            "SELECT DISTINCT type::text, actor FROM ledger.transactions WHERE actor LIKE 'staff:%' ORDER BY 1"
        )
    assert [(r["type"], r["actor"]) for r in actors] == [("goodwill", actor), ("promo_grant", actor)]
    assert await api.balance(customer.wallet_id) == {"cash": TL, "promo": 2 * TL, "held": 0}

    # Deactivated through staff-admin's own API: the very next request, the same token, refused.
    admin = employee(helper, "staff.manage")
    gone = employee(helper, *ALL)
    assert (await endpoints["campaigns"][1](gone.auth)).status_code == 200
    deactivated = helper.call("POST", f"/v1/employees/{gone.subject}/deactivate", admin)
    assert deactivated.status_code == 200, deactivated.text
    before = await api.counts()
    for _, do, _ok in endpoints.values():
        assert_problem(await do(gone.auth), "staff-not-allowed", 403)

    # staff-admin stopped: 503 for the employee; a customer's request at the same moment is served.
    await staff_admin.stop()
    try:
        for name, (_, do, _ok) in endpoints.items():
            theirs = api.http.get(f"/v1/wallets/{customer.wallet_id}", headers=customer.auth)
            staff, answered = await asyncio.gather(do(everything.auth), theirs)
            assert_problem(staff, "staff-admin-unavailable", 503)
            assert int(staff.headers["retry-after"]) >= 1
            assert answered.status_code == 200, (name, answered.text)
    finally:
        staff_admin.start()
        await staff_admin.wait_ready()
    assert await api.counts() == before  # nothing moved while refused
    assert (await endpoints["campaigns"][1](everything.auth)).status_code == 200
    await api.verify()
