"""contracts.staff: require_staff and StaffDirectory against a stand-in for staff-admin's GET /v1/me.

The tokens are real RS256 tokens verified by the real TokenVerifier (keys served by a stand-in
JWKS, as in test_auth); staff-admin is an in-process app on a real socket (tests/servers.py),
so refused connections and timeouts are real too. The real staff-admin process is in
tests/e2e/test_staff_endpoints.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import Depends
from joserfc import jwt
from joserfc.jwk import RSAKey

from hiwallet.contracts.staff import StaffDirectory, StaffMember, StaffPermission, require_staff
from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.http import create_app
from tests.servers import free_port as closed_port  # nothing listens on it
from tests.staff_stub import StaffAdminStub

PROBLEM = "https://hiwallet.dev/problems/"
KEY = RSAKey.generate_key(2048, private=True, parameters={"kid": "k1"})
CUSTOMER = TrustedIssuer.keycloak("http://idp.test", "hiwallet", "customer", "hiwallet-api")
STAFF = TrustedIssuer.keycloak("http://staff-idp.test", "hiwallet-staff", "staff", "hiwallet-api")


def token(issuer: TrustedIssuer, sub: str, **extra: Any) -> str:
    claims = {"iss": issuer.issuer_url, "sub": sub, "aud": "hiwallet-api", "typ": "Bearer"}
    claims["exp"] = 4_000_000_000
    return jwt.encode({"alg": "RS256", "kid": "k1"}, {**claims, **extra}, KEY, algorithms=["RS256"])


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[StaffAdminStub, str]]:
    s = StaffAdminStub().start()
    yield s, s.url
    s.stop()


@pytest.fixture
async def client(stub: tuple[StaffAdminStub, str]) -> AsyncIterator[httpx.AsyncClient]:
    s, url = stub
    s.employees.clear()
    s.answer, s.delay_s = None, 0.0
    async with app_client(url) as c:
        yield c


def jwks(_: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"keys": [KEY.as_dict(private=False, use="sig")]})


class app_client:
    """A service app with one staff endpoint (customer.view) and one customer endpoint."""

    def __init__(self, staff_admin_url: str, timeout_s: float = 2.0) -> None:
        self.http = httpx.AsyncClient(transport=httpx.MockTransport(jwks))
        self.directory = StaffDirectory(staff_admin_url, timeout_s=timeout_s)
        app = create_app("staff-test")
        app.state.verifier = TokenVerifier([CUSTOMER, STAFF], http_client=self.http)
        app.state.staff_directory = self.directory

        @app.get("/v1/staff/thing")
        async def thing(
            member: StaffMember = Depends(require_staff(StaffPermission.CUSTOMER_VIEW)),
        ) -> dict[str, str]:
            return {"actor": member.actor}

        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")

    async def __aenter__(self) -> httpx.AsyncClient:
        return self.client

    async def __aexit__(self, *_: object) -> None:
        await self.client.aclose()
        await self.directory.aclose()
        await self.http.aclose()


def auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


async def test_an_employee_with_the_permission_is_let_in_as_staff_sub(
    client: httpx.AsyncClient, stub: tuple[StaffAdminStub, str]
) -> None:
    stub[0].employees["ann"] = {"customer.view", "withdrawal.review"}
    response = await client.get("/v1/staff/thing", headers=auth(token(STAFF, "ann")))
    assert response.status_code == 200, response.text
    assert response.json() == {"actor": "staff:ann"}


async def test_without_the_permission_403_names_it(
    client: httpx.AsyncClient, stub: tuple[StaffAdminStub, str]
) -> None:
    stub[0].employees["bob"] = {"withdrawal.review", "some.future.permission"}
    response = await client.get("/v1/staff/thing", headers=auth(token(STAFF, "bob")))
    assert response.status_code == 403
    assert response.json()["type"] == PROBLEM + "permission-missing"
    assert response.json()["permission"] == "customer.view"


async def test_a_customer_token_is_refused_as_staff_are_on_customer_endpoints(
    client: httpx.AsyncClient, stub: tuple[StaffAdminStub, str]
) -> None:
    stub[0].employees["carl"] = {"customer.view"}  # the same subject in the other realm
    calls = stub[0].calls
    response = await client.get("/v1/staff/thing", headers=auth(token(CUSTOMER, "carl")))
    assert response.status_code == 403
    assert response.json()["type"] == PROBLEM + "caller-not-allowed"
    assert stub[0].calls == calls  # staff-admin is never asked about a customer


async def test_a_staff_realm_service_account_is_not_an_employee(
    client: httpx.AsyncClient, stub: tuple[StaffAdminStub, str]
) -> None:
    sa = token(STAFF, "sa", azp="staff-admin", preferred_username="service-account-staff-admin")
    stub[0].employees["sa"] = {"customer.view"}
    response = await client.get("/v1/staff/thing", headers=auth(sa))
    assert response.status_code == 403
    assert response.json()["type"] == PROBLEM + "caller-not-allowed"


async def test_permissions_are_read_on_every_request(
    client: httpx.AsyncClient, stub: tuple[StaffAdminStub, str]
) -> None:
    """No cache: a deactivation (staff-admin's 403) or a lost permission holds on the very next
    request with the same token."""
    s = stub[0]
    t = token(STAFF, "dora")
    s.employees["dora"] = {"customer.view"}
    assert (await client.get("/v1/staff/thing", headers=auth(t))).status_code == 200
    s.employees["dora"] = set()
    lost = await client.get("/v1/staff/thing", headers=auth(t))
    assert lost.json()["type"] == PROBLEM + "permission-missing"
    del s.employees["dora"]
    response = await client.get("/v1/staff/thing", headers=auth(t))
    assert response.status_code == 403
    assert response.json()["type"] == PROBLEM + "staff-not-allowed"


@pytest.mark.parametrize(
    "answer",
    [
        (500, {"type": PROBLEM + "internal-error"}),
        (502, "bad gateway"),
    ],
)
async def test_a_failing_staff_admin_is_503(
    client: httpx.AsyncClient, stub: tuple[StaffAdminStub, str], answer: tuple[int, Any]
) -> None:
    stub[0].answer = answer
    response = await client.get("/v1/staff/thing", headers=auth(token(STAFF, "eve")))
    assert response.status_code == 503, response.text
    assert response.json()["type"] == PROBLEM + "staff-admin-unavailable"
    assert int(response.headers["retry-after"]) >= 1


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"subject": "eve", "active": True}),  # no permissions: unreadable
        (200, {"subject": "eve", "active": False, "permissions": ["customer.view"]}),
        (200, {"subject": "mallory", "active": True, "permissions": ["customer.view"]}),
        (200, [1, 2]),
    ],
)
async def test_an_answer_that_breaks_the_contract_is_a_500_not_retry_later(
    client: httpx.AsyncClient, stub: tuple[StaffAdminStub, str], answer: tuple[int, Any]
) -> None:
    """A 200 staff-admin may not give is a defect no retry cures: a logged 500 (fail closed,
    never "unavailable"), and no permission granted."""
    stub[0].answer = answer
    response = await client.get("/v1/staff/thing", headers=auth(token(STAFF, "eve")))
    assert response.status_code == 500, response.text
    assert response.json()["type"] == PROBLEM + "internal-error"
    assert "retry-after" not in response.headers


async def test_staff_admin_down_is_503_with_retry_after() -> None:
    async with app_client(f"http://127.0.0.1:{closed_port()}") as c:
        response = await c.get("/v1/staff/thing", headers=auth(token(STAFF, "fay")))
    assert response.status_code == 503
    assert response.json()["type"] == PROBLEM + "staff-admin-unavailable"
    assert int(response.headers["retry-after"]) >= 1


async def test_a_slow_staff_admin_is_503_within_the_timeout(stub: tuple[StaffAdminStub, str]) -> None:
    s, url = stub
    s.employees["gus"] = {"customer.view"}
    s.delay_s = 2.0  # it would answer 200, later than the timeout
    try:
        async with app_client(url, timeout_s=0.2) as c:
            response = await c.get("/v1/staff/thing", headers=auth(token(STAFF, "gus")))
    finally:
        s.delay_s = 0.0
    assert response.status_code == 503
    assert response.json()["type"] == PROBLEM + "staff-admin-unavailable"


async def test_no_token_is_401(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/staff/thing")
    assert response.status_code == 401


def test_the_permissions_are_the_fixed_ones() -> None:
    assert sorted(StaffPermission) == sorted(
        [
            "customer.view",
            "withdrawal.review",
            "promo.staff",
            "campaigns.view",
            "campaigns.manage",
            "promo.merchant_accept",
            "staff.manage",
            "credit.goodwill",
            "customer.contract",
            "finance.reconciliation",
            "finance.invoices",
        ]
    )
    assert StaffMember("x", None, frozenset()).actor == "staff:x"
