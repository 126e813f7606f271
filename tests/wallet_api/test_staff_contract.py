"""The Contracted tier: an employee with customer.contract records the evidence (remote identity
verification or a signed agreement, with its reference) and wallet-api raises the personal
account's tier in the same transaction, once, upward only; the record says who, on what, from
which tier and when, and the database keeps it unchanged. Against the real identity servers and
the stand-in for staff-admin (tests/staff_stub.py), as tests/wallet_api/test_staff.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from hiwallet.contracts.staff import StaffPermission
from tests.staff_stub import StaffAdminStub
from tests.wallet_api.conftest import WalletApi, assert_problem
from tests.wallet_api.test_staff import employee

CONTRACT = StaffPermission.CUSTOMER_CONTRACT.value
VIEW = StaffPermission.CUSTOMER_VIEW.value


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


def path(account_id: str) -> str:
    return f"/v1/staff/accounts/{account_id}/contract"


async def test_an_employee_raises_an_account_to_contracted_on_recorded_evidence_once(
    api: WalletApi, stub: StaffAdminStub
) -> None:
    alice = await api.customer("verified")
    clerk = employee(api, stub, CONTRACT)
    evidence = {"evidence": "signed_agreement", "reference": "AGR-2026-0042"}

    # Only customer.contract opens it: not customer.view, not a customer's token.
    viewer = employee(api, stub, VIEW)
    body = assert_problem(
        await api.http.post(path(alice.account_id), json=evidence, headers=viewer.auth),
        "permission-missing",
        403,
    )
    assert body["permission"] == CONTRACT
    assert_problem(
        await api.http.post(path(alice.account_id), json=evidence, headers=alice.auth),
        "caller-not-allowed",
        403,
    )

    r = await api.http.post(path(alice.account_id), json=evidence, headers=clerk.auth)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["tier"] == "contracted" and answer["id"] == alice.account_id
    contract = answer["contract"]
    assert (
        contract["evidence"],
        contract["evidence_ref"],
        contract["previous_tier"],
        contract["recorded_by"],
    ) == (
        "signed_agreement",
        "AGR-2026-0042",
        "verified",
        clerk.actor,
    )
    # The customer sees the tier; its limits are the contracted ones.
    mine = (await api.http.get(f"/v1/accounts/{alice.account_id}", headers=alice.auth)).json()
    assert mine["tier"] == "contracted"

    # Again, with other evidence, by another employee: answered as it is, the record unchanged.
    other = employee(api, stub, CONTRACT)
    again = await api.http.post(
        path(alice.account_id),
        json={"evidence": "remote_identity_verification", "reference": "RIV-1"},
        headers=other.auth,
    )
    assert again.status_code == 200, again.text
    assert again.json()["contract"] == contract
    async with api.owner_connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM wallet.account_contracts") == 1
        # the database keeps the record as it was written
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE wallet.account_contracts SET evidence_ref = 'forged'")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("DELETE FROM wallet.account_contracts")
        with pytest.raises(asyncpg.CheckViolationError):  # a record that is not a raise
            await conn.execute(
                "INSERT INTO wallet.account_contracts VALUES"
                " ($1, $2, 'signed_agreement', 'x', 'contracted', 'staff:x', now())",
                int(alice.account_id[:4]),
                alice.account_id,
            )
    # Upward only: onboarding cannot take it back down.
    down = await api.http.put(
        f"/v1/accounts/{alice.account_id}/tier", json={"tier": "verified"}, headers=api.onboarding
    )
    assert_problem(down, "tier-downgrade", 409)


async def test_from_a_lower_tier_and_what_is_refused(api: WalletApi, stub: StaffAdminStub) -> None:
    clerk = employee(api, stub, CONTRACT)
    bob = await api.customer("unverified")
    r = await api.http.post(
        path(bob.account_id),
        json={"evidence": "remote_identity_verification", "reference": "RIV-7731"},
        headers=clerk.auth,
    )
    assert r.status_code == 200, r.text
    assert (r.json()["tier"], r.json()["contract"]["previous_tier"]) == ("contracted", "unverified")

    shop = await api.business()
    refused = await api.http.post(
        path(shop.account_id), json={"evidence": "signed_agreement", "reference": "A"}, headers=clerk.auth
    )
    assert_problem(refused, "not-a-personal-account", 422)
    missing = await api.http.post(
        path("0001:a:x"), json={"evidence": "signed_agreement", "reference": "A"}, headers=clerk.auth
    )
    assert_problem(missing, "not-found", 404)
    carol = await api.customer("verified")
    for bad in (
        {"evidence": "a phone call", "reference": "A"},
        {"evidence": "signed_agreement", "reference": ""},
        {"evidence": "signed_agreement", "reference": "x" * 201},
        {"evidence": "signed_agreement"},
    ):
        r = await api.http.post(path(carol.account_id), json=bad, headers=clerk.auth)
        assert r.status_code == 422, (bad, r.text)
    assert (await api.http.get(f"/v1/accounts/{carol.account_id}", headers=carol.auth)).json()[
        "tier"
    ] == "verified"
    async with api.owner_connection() as conn:
        rows = await conn.fetch("SELECT account_id, recorded_by FROM wallet.account_contracts")
    assert [(r["account_id"], r["recorded_by"]) for r in rows] == [(bob.account_id, clerk.actor)]
