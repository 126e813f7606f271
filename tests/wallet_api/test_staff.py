"""wallet-api's staff endpoints (customer.view; business accounts under promo.merchant_accept)
against the real identity servers (both realms, a real staff login with TOTP) and a stand-in
for staff-admin's GET /v1/me (tests/staff_stub.py). The same matrix against the real
staff-admin process: tests/e2e/test_staff_endpoints.py.

Every endpoint: with the permission, without it (403 permission-missing), a customer token
(403 caller-not-allowed, as staff are refused on customer endpoints), an employee deactivated
(refused on the very next request, same token), staff-admin stopped (503 while a customer's
request at the same moment succeeds).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from hiwallet.contracts.staff import StaffPermission
from hiwallet.wallet_api.domain import service_account_subject
from tests.staff_stub import StaffAdminStub, staff_login
from tests.wallet_api.conftest import TL, WalletApi, assert_problem, client_token, running_api, subject_of

VIEW = StaffPermission.CUSTOMER_VIEW.value
BUSINESS = StaffPermission.PROMO_MERCHANT_ACCEPT.value


@pytest.fixture(scope="module")
def stub() -> Iterator[StaffAdminStub]:
    s = StaffAdminStub().start()
    yield s
    s.stop()


@pytest.fixture
def wallet_api_settings(stub: StaffAdminStub) -> dict[str, Any]:
    stub.employees.clear()
    stub.answer = None
    return {"staff_admin_url": stub.url}


@dataclass
class Employee:
    token: str
    subject: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def actor(self) -> str:
        return f"staff:{self.subject}"


def employee(api: WalletApi, stub: StaffAdminStub, *permissions: str) -> Employee:
    token, subject = staff_login(api.staff_idp, f"e{uuid.uuid4().hex[:10]}")
    stub.employees[subject] = set(permissions)
    return Employee(token, subject)


Call = Callable[[WalletApi, dict[str, str]], Awaitable[httpx.Response]]


async def _setup(api: WalletApi) -> dict[str, Any]:
    alice = await api.customer(funds=10 * TL)
    business = await api.service.open_business("Fırın", operator="operator:test")
    return {"alice": alice, "business": business["id"]}


def endpoints(ctx: dict[str, Any]) -> dict[str, tuple[str, Call, int]]:
    """Each staff endpoint: its permission, a call, and its success status."""
    alice = ctx["alice"]

    def get(path: str, **params: str) -> Call:
        return lambda api, auth: api.http.get(path, params=params, headers=auth)

    def post(path: str, body: Any) -> Call:
        return lambda api, auth: api.http.post(path, json=body, headers=auth)

    return {
        "find by number": (VIEW, get("/v1/staff/customers", wallet_number=alice.number), 200),
        "find by account": (VIEW, get("/v1/staff/customers", account_id=alice.account_id), 200),
        "find by email": (VIEW, get("/v1/staff/customers", email=f"{alice.username}@example.com"), 200),
        "account": (VIEW, get(f"/v1/staff/accounts/{alice.account_id}"), 200),
        "statement": (VIEW, get(f"/v1/staff/wallets/{alice.wallet_id}/statement"), 200),
        "open business": (BUSINESS, post("/v1/staff/business-accounts", {"name": "Çay Bahçesi"}), 201),
        "link business": (
            BUSINESS,
            post(f"/v1/staff/business-accounts/{ctx['business']}/members", {"client_id": "merchant-two"}),
            200,
        ),
    }


async def test_every_staff_endpoint_allowed_forbidden_refused_deactivated_and_down(
    api: WalletApi, stub: StaffAdminStub
) -> None:
    ctx = await _setup(api)
    alice = ctx["alice"]
    everything = employee(api, stub, VIEW, BUSINESS)
    nothing = employee(api, stub)  # an employee whose roles grant neither
    before_calls = stub.calls
    for name, (permission, call, ok) in endpoints(ctx).items():
        allowed = await call(api, everything.auth)
        assert allowed.status_code == ok, (name, allowed.text)
        body = assert_problem(await call(api, nothing.auth), "permission-missing", 403)
        assert body["permission"] == permission, name
        assert_problem(await call(api, alice.auth), "caller-not-allowed", 403)
        # Only the permission named: the other one does not open it.
        other = employee(api, stub, BUSINESS if permission == VIEW else VIEW)
        assert_problem(await call(api, other.auth), "permission-missing", 403)
    # No cache: staff-admin was asked on every staff request, never for a customer's.
    assert stub.calls - before_calls == 3 * len(endpoints(ctx))

    # Deactivated (staff-admin answers 403 from now on): the very next request, same token.
    del stub.employees[everything.subject]
    for _, call, _ok in endpoints(ctx).values():
        assert_problem(await call(api, everything.auth), "staff-not-allowed", 403)
    stub.employees[everything.subject] = {VIEW, BUSINESS}

    # staff-admin stopped: the employee gets 503, a customer at the same moment is served.
    stub.stop()
    try:
        for name, (_, call, _ok) in endpoints(ctx).items():
            staff, customer = await asyncio.gather(
                call(api, everything.auth), api.http.get(f"/v1/wallets/{alice.wallet_id}", headers=alice.auth)
            )
            body = assert_problem(staff, "staff-admin-unavailable", 503)
            assert int(staff.headers["retry-after"]) >= 1, name
            assert customer.status_code == 200, customer.text
    finally:
        stub.start()
    assert (await endpoints(ctx)["account"][1](api, everything.auth)).status_code == 200
    await api.verify()


async def test_find_a_customer_three_ways_and_read_the_record(api: WalletApi, stub: StaffAdminStub) -> None:
    alice = await api.customer(funds=10 * TL)
    bob = await api.customer()
    assert (await api.transfer(alice, bob.number, 2 * TL)).status_code == 201
    viewer = employee(api, stub, VIEW)
    for params in (
        {"wallet_number": alice.number},
        {"account_id": alice.account_id},
        {"email": f"{alice.username}@example.com"},
        {"email": f"{alice.username.upper()}@EXAMPLE.COM"},
    ):
        r = await api.http.get("/v1/staff/customers", params=params, headers=viewer.auth)
        assert r.status_code == 200, r.text
        [account] = r.json()["accounts"]
        assert account["id"] == alice.account_id
        assert account["members"] == [
            {
                "issuer": api.idp.issuer,
                "subject": alice.subject,
                "added_by": account["members"][0]["added_by"],
                "added_at": account["members"][0]["added_at"],
            }
        ]
        assert account["members"][0]["added_by"].startswith("client:onboarding:")
    for params in (
        {"wallet_number": "1234567890123456"},  # bad check digit
        {"account_id": "nonsense"},
        {"account_id": alice.account_id.replace(alice.account_id[-4:], "0000")},
        {"email": "nobody@example.com"},
    ):
        r = await api.http.get("/v1/staff/customers", params=params, headers=viewer.auth)
        assert r.status_code == 200 and r.json() == {"accounts": []}, (params, r.text)
    for params in ({}, {"wallet_number": alice.number, "email": "a@b.c"}):
        r = await api.http.get("/v1/staff/customers", params=params, headers=viewer.auth)
        assert_problem(r, "invalid-request", 422)

    # The record: balances without being a member; the statement with who made each movement.
    r = await api.http.get(f"/v1/staff/accounts/{alice.account_id}", headers=viewer.auth)
    [wallet] = r.json()["wallets"]
    assert wallet["cash"] == 8 * TL and wallet["available"] == 8 * TL
    r = await api.http.get(f"/v1/staff/wallets/{alice.wallet_id}/statement", headers=viewer.auth)
    lines = r.json()["lines"]
    assert [(line["type"], line["amount"]) for line in lines] == [("topup", 10 * TL), ("p2p", -2 * TL)]
    assert lines[0]["actor"] == "operator:test"
    assert lines[1]["actor"] == f"customer:{alice.subject}"
    assert [line["counterparty"] and line["counterparty"]["kind"] for line in lines] == [None, "personal"]
    assert r.json()["account_id"] == alice.account_id
    # Missing and malformed ids: the 404 of a missing one, after the permission check.
    for path in ("/v1/staff/accounts/0001:a:nope", "/v1/staff/wallets/xyz/statement"):
        assert_problem(await api.http.get(path, headers=viewer.auth), "not-found", 404)
        assert_problem(await api.http.get(path, headers=alice.auth), "caller-not-allowed", 403)


async def test_business_accounts_opened_and_linked_by_an_employee(
    api: WalletApi, stub: StaffAdminStub
) -> None:
    clerk = employee(api, stub, BUSINESS, VIEW)
    r = await api.http.post("/v1/staff/business-accounts", json={"name": "Simit Sarayı"}, headers=clerk.auth)
    assert r.status_code == 201, r.text
    account = r.json()
    assert account["kind"] == "business" and account["opened_by"] == clerk.actor and account["members"] == []
    path = f"/v1/staff/business-accounts/{account['id']}/members"
    for _ in range(2):  # linking again changes nothing
        linked = await api.http.post(path, json={"client_id": "merchant-three"}, headers=clerk.auth)
        assert linked.status_code == 200, linked.text
        assert [(m["subject"], m["added_by"]) for m in linked.json()["members"]] == [
            (service_account_subject("hiwallet", "merchant-three"), clerk.actor)
        ]
    # The merchant's own token now sees its business account, as after `hiwallet business link`.
    token = client_token(api.idp, "merchant-three")
    assert subject_of(token) == service_account_subject("hiwallet", "merchant-three")
    mine = await api.http.get("/v1/accounts", headers={"Authorization": f"Bearer {token}"})
    assert [a["id"] for a in mine.json()["accounts"]] == [account["id"]]
    # A personal account is not a business account; a body names exactly one identity.
    alice = await api.customer()
    r = await api.http.post(
        f"/v1/staff/business-accounts/{alice.account_id}/members",
        json={"client_id": "merchant-two"},
        headers=clerk.auth,
    )
    assert_problem(r, "not-found", 404)
    for body in ({}, {"client_id": "merchant-two", "subject": "x"}):
        assert_problem(await api.http.post(path, json=body, headers=clerk.auth), "invalid-request", 422)
    assert_problem(
        await api.http.post("/v1/staff/business-accounts", json={"name": ""}, headers=clerk.auth),
        "validation-error",
        422,
    )


async def test_staff_admin_failing_is_503_not_a_refusal(api: WalletApi, stub: StaffAdminStub) -> None:
    viewer = employee(api, stub, VIEW)
    alice = await api.customer()
    stub.answer = (500, {"type": "x"})
    r = await api.http.get(f"/v1/staff/accounts/{alice.account_id}", headers=viewer.auth)
    assert_problem(r, "staff-admin-unavailable", 503)
    stub.answer = None
    r = await api.http.get(f"/v1/staff/accounts/{alice.account_id}", headers=viewer.auth)
    assert r.status_code == 200


async def test_the_staff_paths_in_the_document_and_their_malformed_ids(
    api: WalletApi, stub: StaffAdminStub
) -> None:
    document = (await api.http.get("/openapi.json")).json()
    staff = {(p, m) for p, item in document["paths"].items() for m in item if p.startswith("/v1/staff/")}
    mine = {
        ("/v1/staff/customers", "get"),
        ("/v1/staff/accounts/{account_id}", "get"),
        ("/v1/staff/wallets/{wallet_id}/statement", "get"),
        ("/v1/staff/business-accounts", "post"),
        ("/v1/staff/business-accounts/{account_id}/members", "post"),
    }
    assert staff >= mine  # the money-moving ones: test_staff_money.py
    for path, method in mine:
        op = document["paths"][path][method]
        assert op["security"] == [{"HTTPBearer": []}], path
        assert "permission-missing" in op["responses"]["403"]["description"], path
        assert op["responses"]["503"]["content"]["application/problem+json"], path
    clerk = employee(api, stub, VIEW, BUSINESS)
    calls = {
        "/v1/staff/accounts/{}": ("GET", None),
        "/v1/staff/wallets/{}/statement": ("GET", None),
        "/v1/staff/business-accounts/{}/members": ("POST", {"client_id": "merchant-two"}),
    }
    for template, (method, body) in calls.items():
        missing = "0001:w:01234567-89ab-7def-8123-456789abcdef" if "wallets" in template else "0001:a:x"
        expected = assert_problem(
            await api.http.request(method, template.format(missing), json=body, headers=clerk.auth),
            "not-found",
            404,
        )
        for value in ("xyz", "%00", "9999:a:" + "0" * 36, "0001:" + "k" * 96):
            r = await api.http.request(method, template.format(value), json=body, headers=clerk.auth)
            got = assert_problem(r, "not-found", 404)
            assert (got["title"], got.get("detail")) == (expected["title"], expected.get("detail")), template
            assert "pattern" not in r.text


def test_wallet_apis_own_client_only_reads_users(customer_idp: Any) -> None:
    """wallet-api's client of the customer realm (the e-mail search) has view-users, nothing more."""
    token = httpx.post(
        customer_idp.token_url,
        auth=("wallet-api", "dev-wallet-api-secret"),
        data={"grant_type": "client_credentials"},
    ).json()["access_token"]
    users = f"{customer_idp.base_url}/admin/realms/hiwallet/users"
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(users, params={"max": "1"}, headers=auth).status_code == 200
    made = httpx.post(users, json={"username": f"x{uuid.uuid4().hex[:8]}", "enabled": True}, headers=auth)
    assert made.status_code == 403, made.text


async def test_the_e_mail_search_needs_the_identity_provider(
    wallet_db: str, customer_idp: Any, staff_idp: Any, stub: StaffAdminStub
) -> None:
    """When the identity provider refuses wallet-api's client, the e-mail search is 503
    identity-unavailable; the other searches work."""
    settings = {"staff_admin_url": stub.url, "identity_admin_secret": "not-the-secret"}
    async with running_api(wallet_db, customer_idp, staff_idp, **settings) as api:
        alice = await api.customer()
        viewer = employee(api, stub, VIEW)
        by_email = {"email": f"{alice.username}@example.com"}
        r = await api.http.get("/v1/staff/customers", params=by_email, headers=viewer.auth)
        assert_problem(r, "identity-unavailable", 503)
        by_number = {"wallet_number": alice.number}
        r = await api.http.get("/v1/staff/customers", params=by_number, headers=viewer.auth)
        assert [a["id"] for a in r.json()["accounts"]] == [alice.account_id]
