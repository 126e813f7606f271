"""The staff endpoints end to end, against the real staff-admin process (``hiwallet run
staff-admin``, its own cloned database) and the real staff realm: employees log in on the
identity pages (password, TOTP), wallet-api and withdrawal-orchestrator ask staff-admin's
GET /v1/me with the employee's own token on every staff request.

The system is the withdrawal saga's (tests/e2e/withdrawals.py: the orchestrator, wallet-consumer,
bank-adapter, bank-webhook and bank-fake as processes, wallet-api and the identity servers in
threads), so a review decided over HTTP runs the whole saga: a cancel's reversal is posted in
the ledger with the employee as its actor, visible in the customer's statement to staff.

For every staff endpoint of both services: the permission (allowed), without it (403
permission-missing), a customer's token (403 caller-not-allowed, as staff on customer
endpoints), the employee deactivated through staff-admin's API (refused on the very next request,
same token), staff-admin stopped (503 while a customer's request at the same moment succeeds).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Process
from tests.e2e.withdrawals import FEE_MINOR, ORCHESTRATOR, WithdrawalSystem
from tests.identity.conftest import IdentityServer
from tests.staff_admin.conftest import Employee, StaffAdminServer
from tests.wallet_api.conftest import WalletApi, assert_problem, running_api

TL = 100
REVIEWED = 15_000 * TL  # above the review threshold (10,000.00 TRY)
VIEW, REVIEW, BUSINESS = "customer.view", "withdrawal.review", "promo.merchant_accept"


@pytest.fixture
async def staffed(
    withdrawals: WithdrawalSystem,
    staff_admin_process: tuple[Process, StaffAdminServer],
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
) -> AsyncIterator[tuple[WithdrawalSystem, WalletApi, Process, StaffAdminServer]]:
    """The orchestrator trusting the staff realm and asking staff-admin (until heal()), and a
    wallet-api of the same wallet database asking it too."""
    process, helper = staff_admin_process
    if not process.alive():
        process.start()
        await process.wait_ready()
    await withdrawals.replace(ORCHESTRATOR, staff_issuer_base=staff_idp.base_url, staff_admin_url=process.url)
    async with running_api(
        withdrawals.wallet_db, customer_idp, staff_idp, staff_admin_url=process.url
    ) as api:
        yield withdrawals, api, process, helper


def employee(helper: StaffAdminServer, *permissions: str) -> Employee:
    return helper.employee(f"e{uuid.uuid4().hex[:8]}", *permissions)


Call = Callable[[dict[str, str]], Awaitable[httpx.Response]]


async def test_every_staff_endpoint_against_the_real_staff_admin(
    staffed: tuple[WithdrawalSystem, WalletApi, Process, StaffAdminServer],
) -> None:
    system, api, staff_admin, helper = staffed
    customer = await system.customer(funds=40_000 * TL)
    sagas = [await system.withdraw(customer, REVIEWED, system.iban()) for _ in range(2)]
    for saga in sagas:
        await system.reaches(saga, "under_review")
    business = await api.service.open_business("Lokanta", operator="operator:test")
    orchestrator = system.orchestrator.url
    # The withdrawal each decision is made on (the first allowed call decides it; every other
    # call is refused before the saga is looked at).
    target = {"release": sagas[0], "cancel": sagas[1]}

    async def on(base: str, method: str, path: str, auth: dict[str, str], **kwargs: Any) -> httpx.Response:
        headers = {**auth, "Idempotency-Key": str(uuid.uuid4())}
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            return await http.request(method, path, headers=headers, **kwargs)

    def wallet_api(method: str, path: str, **kwargs: Any) -> Call:
        return lambda auth: on(api.base_url, method, path, auth, **kwargs)

    def review(decision: str) -> Call:
        path = f"/v1/staff/withdrawals/{target[decision]}/{decision}"
        return lambda auth: on(orchestrator, "POST", path, auth)

    members = f"/v1/staff/business-accounts/{business['id']}/members"
    queue = {"status": "under_review"}
    name = {"name": "Ev"}
    endpoints: dict[str, tuple[str, Call, int]] = {
        "find": (
            VIEW,
            wallet_api("GET", "/v1/staff/customers", params={"wallet_number": customer.number}),
            200,
        ),
        "account": (VIEW, wallet_api("GET", f"/v1/staff/accounts/{customer.account_id}"), 200),
        "statement": (VIEW, wallet_api("GET", f"/v1/staff/wallets/{customer.wallet_id}/statement"), 200),
        "open business": (
            BUSINESS,
            wallet_api("POST", "/v1/staff/business-accounts", json={"name": "Ev"}),
            201,
        ),
        "link business": (BUSINESS, wallet_api("POST", members, json={"client_id": "merchant-two"}), 200),
        "review queue": (
            REVIEW,
            lambda auth: on(orchestrator, "GET", "/v1/staff/withdrawals", auth, params=queue),
            200,
        ),
        "release": (REVIEW, review("release"), 200),
        "cancel": (REVIEW, review("cancel"), 200),
    }
    everything = employee(helper, VIEW, REVIEW, BUSINESS)
    for name, (permission, call, ok) in endpoints.items():
        others = {VIEW, REVIEW, BUSINESS} - {permission}
        allowed = await call(everything.auth)
        assert allowed.status_code == ok, (name, allowed.text)
        without = employee(helper, *others)
        body = assert_problem(await call(without.auth), "permission-missing", 403)
        assert body["permission"] == permission, name
        assert_problem(await call(customer.auth), "caller-not-allowed", 403)

    # The cancel ran the saga to its end: the reversal in the ledger in the employee's name,
    # in the customer's record as staff read it.
    cancelled = sagas[1]
    await system.reaches(cancelled, "cancelled")
    record = await endpoints["statement"][1](everything.auth)
    refunds = [line for line in record.json()["lines"] if line["type"] == "refund"]
    assert {line["actor"] for line in refunds} == {f"staff:{everything.subject}"}
    assert sum(line["amount"] for line in refunds) == REVIEWED + FEE_MINOR
    assert (await system.saga(sagas[0]))["reviewed_by"] == f"staff:{everything.subject}"

    # Deactivated through staff-admin's own API: the very next request, the same token, refused.
    admin = employee(helper, "staff.manage")
    gone = employee(helper, VIEW, REVIEW, BUSINESS)
    for _, call, ok in endpoints.values():
        if call is endpoints["release"][1] or call is endpoints["cancel"][1]:
            continue  # no withdrawal left to spend on an allowed call
        assert (await call(gone.auth)).status_code == ok
    deactivated = helper.call("POST", f"/v1/employees/{gone.subject}/deactivate", admin)
    assert deactivated.status_code == 200, deactivated.text
    for _, call, _ok in endpoints.values():
        assert_problem(await call(gone.auth), "staff-not-allowed", 403)

    # staff-admin stopped: 503 for the employee; a customer's request at the same moment is served.
    await staff_admin.stop()
    try:
        for name, (_, call, _ok) in endpoints.items():
            customer_call = (
                on(orchestrator, "GET", f"/v1/withdrawals/{sagas[0]}", customer.auth)
                if name in ("review queue", "release", "cancel")
                else on(api.base_url, "GET", f"/v1/wallets/{customer.wallet_id}", customer.auth)
            )
            staff, theirs = await asyncio.gather(call(everything.auth), customer_call)
            assert_problem(staff, "staff-admin-unavailable", 503)
            assert int(staff.headers["retry-after"]) >= 1
            assert theirs.status_code == 200, (name, theirs.text)
    finally:
        staff_admin.start()
        await staff_admin.wait_ready()
    assert (await endpoints["account"][1](everything.auth)).status_code == 200
    await system.quiet()
    await system.verify()
