"""withdrawal-orchestrator's staff endpoints (withdrawal.review): the review queue, release and
cancel over HTTP with an Idempotency-Key and the employee (staff:<sub>) as the actor.

The app in-process with the test's own signing key (conftest), and a stand-in for staff-admin's
GET /v1/me on a real socket (tests/staff_stub.py), so its outage is a refused connection. The
same matrix against the real staff-admin and identity processes: tests/e2e/test_staff_endpoints.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from hiwallet.contracts.withdrawals import RefundWithdrawal
from hiwallet.withdrawals.service import WithdrawalService
from tests.staff_stub import StaffAdminStub
from tests.withdrawals.conftest import (
    PROBLEM,
    STAFF_ISSUER,
    customer,
    key_header,
    running,
    settings_for,
    token,
    withdrawal,
)
from tests.withdrawals.test_saga import debited, deliver

REVIEW = "withdrawal.review"
ABOVE = 1_000_001  # above the review threshold (10,000.00 TRY)


@pytest.fixture(scope="module")
def staff_admin() -> Iterator[StaffAdminStub]:
    s = StaffAdminStub().start()
    yield s
    s.stop()


@pytest.fixture
async def client(withdrawal_db: str, staff_admin: StaffAdminStub) -> AsyncIterator[httpx.AsyncClient]:
    staff_admin.employees.clear()
    staff_admin.answer = None
    settings = settings_for(
        withdrawal_db, staff_issuer_base="http://identity.test", staff_admin_url=staff_admin.url
    )
    async with running(settings) as c:
        yield c


def employee(stub: StaffAdminStub, *permissions: str) -> dict[str, str]:
    subject = str(uuid.uuid4())
    stub.employees[subject] = set(permissions)
    return {"Authorization": f"Bearer {token(subject, issuer=STAFF_ISSUER)}", "X-Subject": subject}


def actor(auth: dict[str, str]) -> str:
    return f"staff:{auth['X-Subject']}"


async def under_review(client: httpx.AsyncClient, n: int = 1) -> list[str]:
    """``n`` withdrawals above the threshold, debited, now waiting for a review."""
    service: WithdrawalService = client.app.state.service  # type: ignore[attr-defined]
    ids = []
    for _ in range(n):
        c = customer()
        r = await client.post(
            "/v1/withdrawals", json=withdrawal(c, amount=ABOVE), headers={**c.auth, **key_header()}
        )
        assert r.status_code == 202, r.text
        saga = r.json()["id"]
        assert await deliver(service, "WithdrawalDebited", debited(saga, amount=ABOVE)) == {
            "state": "under_review"
        }
        ids.append(saga)
    return ids


def calls(saga: str) -> dict[str, tuple[str, str, int]]:
    return {
        "queue": ("GET", "/v1/staff/withdrawals?status=under_review", 200),
        "release": ("POST", f"/v1/staff/withdrawals/{saga}/release", 200),
        "cancel": ("POST", f"/v1/staff/withdrawals/{saga}/cancel", 200),
    }


async def call(client: httpx.AsyncClient, method: str, path: str, auth: dict[str, str]) -> httpx.Response:
    headers = {k: v for k, v in auth.items() if k != "X-Subject"}
    return await client.request(method, path, headers={**headers, **key_header()})


def assert_problem(response: httpx.Response, slug: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["type"] == PROBLEM + slug, body
    return body


async def test_every_staff_endpoint_allowed_forbidden_refused_deactivated_and_down(
    client: httpx.AsyncClient, staff_admin: StaffAdminStub
) -> None:
    reviewer = employee(staff_admin, REVIEW)
    nobody = employee(staff_admin, "customer.view")
    someone = customer()
    for name in ("queue", "release", "cancel"):
        [saga] = await under_review(client)
        method, path, ok = calls(saga)[name]
        body = assert_problem(await call(client, method, path, nobody), "permission-missing", 403)
        assert body["permission"] == REVIEW
        assert_problem(await call(client, method, path, someone.auth), "caller-not-allowed", 403)
        r = await call(client, method, path, reviewer)
        assert r.status_code == ok, r.text

    # Deactivated: refused on the very next request with the same token.
    [saga] = await under_review(client)
    del staff_admin.employees[reviewer["X-Subject"]]
    for method, path, _ in calls(saga).values():
        assert_problem(await call(client, method, path, reviewer), "staff-not-allowed", 403)
    staff_admin.employees[reviewer["X-Subject"]] = {REVIEW}

    # staff-admin stopped: 503 for the employee, a customer's request at the same moment is served.
    staff_admin.stop()
    try:
        for method, path, _ in calls(saga).values():
            staff, requested = await asyncio.gather(
                call(client, method, path, reviewer),
                client.post(
                    "/v1/withdrawals", json=withdrawal(someone), headers={**someone.auth, **key_header()}
                ),
            )
            assert_problem(staff, "staff-admin-unavailable", 503)
            assert int(staff.headers["retry-after"]) >= 1
            assert requested.status_code == 202, requested.text
    finally:
        staff_admin.start()
    assert (await call(client, "POST", f"/v1/staff/withdrawals/{saga}/release", reviewer)).status_code == 200


async def test_the_queue_oldest_first_with_a_cursor(
    client: httpx.AsyncClient, staff_admin: StaffAdminStub
) -> None:
    reviewer = employee(staff_admin, REVIEW)
    headers = {"Authorization": reviewer["Authorization"]}
    sagas = await under_review(client, 5)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {
            "status": "under_review",
            "limit": 2,
            **({"cursor": cursor} if cursor else {}),
        }
        page = (await client.get("/v1/staff/withdrawals", params=params, headers=headers)).json()
        seen += [w["id"] for w in page["withdrawals"]]
        assert all(w["state"] == "under_review" and w["requested_by"]["subject"] for w in page["withdrawals"])
        assert all(
            w["destination_iban"].startswith("TR") and "*" in w["destination_iban"]
            for w in page["withdrawals"]
        )
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(sagas)
    for params in ({}, {"status": "completed"}, {"status": "under_review", "cursor": "x"}):
        r = await client.get("/v1/staff/withdrawals", params=params, headers=headers)
        assert_problem(r, "validation-error", 422)


async def test_release_and_cancel_with_a_key_and_the_employee_as_the_actor(
    client: httpx.AsyncClient, staff_admin: StaffAdminStub
) -> None:
    reviewer = employee(staff_admin, REVIEW)
    headers = {"Authorization": reviewer["Authorization"]}
    service: WithdrawalService = client.app.state.service  # type: ignore[attr-defined]
    released, cancelled = await under_review(client, 2)

    # Without a key: 400, nothing decided.
    r = await client.post(f"/v1/staff/withdrawals/{released}/release", headers=headers)
    assert_problem(r, "idempotency-key-missing", 400)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = await client.post(f"/v1/staff/withdrawals/{released}/release", headers={**headers, **key})
    assert first.status_code == 200 and first.json()["state"] == "bank_transfer_pending", first.text
    again = await client.post(f"/v1/staff/withdrawals/{released}/release", headers={**headers, **key})
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    # The same key for another decision or withdrawal: 422; a new key: 409, it was decided.
    r = await client.post(f"/v1/staff/withdrawals/{released}/cancel", headers={**headers, **key})
    assert_problem(r, "idempotency-key-reused", 422)
    r = await client.post(f"/v1/staff/withdrawals/{released}/cancel", headers={**headers, **key_header()})
    assert_problem(r, "withdrawal-not-under-review", 409)
    row = await service.saga(released)
    assert row is not None and row["reviewed_by"] == actor(reviewer)
    assert (await service.history(released))[-1]["actor"] == actor(reviewer)

    r = await client.post(f"/v1/staff/withdrawals/{cancelled}/cancel", headers={**headers, **key_header()})
    assert r.status_code == 200 and r.json()["state"] == "cancelling", r.text
    # The reversal the wallet posts names the employee (the ledger's actor).
    body = await service.pool.fetchval(
        "SELECT body::text FROM withdrawal.outbox"
        " WHERE message_type = 'RefundWithdrawal' AND body ->> 'saga_id' = $1",
        cancelled,
    )
    assert RefundWithdrawal.model_validate_json(body).actor == actor(reviewer)

    for path in ("/v1/staff/withdrawals/nope/release", f"/v1/staff/withdrawals/{uuid.uuid4()}/cancel"):
        assert_problem(
            await client.post(path, headers={**headers, **key_header()}), "withdrawal-not-found", 404
        )
    # Another employee's key space is their own: the same key is a new request for them.
    other = employee(staff_admin, REVIEW)
    r = await client.post(
        f"/v1/staff/withdrawals/{released}/release", headers={"Authorization": other["Authorization"], **key}
    )
    assert_problem(r, "withdrawal-not-under-review", 409)
