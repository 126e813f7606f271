"""GET /v1/accounts/{account_id}/limits: what the tier allows this month and what was used, per
kind and currency, for the account's members only (others: 404, as for a missing account)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.wallet_api.conftest import TL, WalletApi, assert_problem

LIMITS = {"limit_verified_transfer_minor": 50 * TL, "limit_verified_payment_minor": 60 * TL}


@pytest.fixture
def wallet_api_settings() -> dict[str, Any]:
    return LIMITS


def _limits(answer: Any) -> dict[tuple[str, str], tuple[int, int, int]]:
    return {
        (x["kind"], x["currency"]): (x["limit_minor"], x["used_minor"], x["remaining_minor"])
        for x in answer["limits"]
    }


async def test_the_limits_and_what_was_used(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    shop = await api.business()
    fresh = await api.http.get(f"/v1/accounts/{alice.account_id}/limits", headers=alice.auth)
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["tier"] == "verified"
    assert _limits(fresh.json()) == {
        ("transfer", "TRY"): (50 * TL, 0, 50 * TL),
        ("payment", "TRY"): (60 * TL, 0, 60 * TL),
    }
    assert (await api.transfer(alice, bob.number, 20 * TL)).status_code == 201
    assert (await api.transfer(alice, shop.number, 5 * TL)).status_code == 201
    used = (await api.http.get(f"/v1/accounts/{alice.account_id}/limits", headers=alice.auth)).json()
    assert _limits(used) == {
        ("transfer", "TRY"): (50 * TL, 20 * TL, 30 * TL),
        ("payment", "TRY"): (60 * TL, 5 * TL, 55 * TL),
    }
    assert used["month"] == used["month"][:7] and len(used["month"]) == 7
    # another customer's account: as if it did not exist; no token: 401
    assert_problem(
        await api.http.get(f"/v1/accounts/{alice.account_id}/limits", headers=bob.auth), "not-found", 404
    )
    assert (await api.http.get(f"/v1/accounts/{alice.account_id}/limits")).status_code == 401
    # a business account has no monthly limit
    own = await api.http.get(f"/v1/accounts/{shop.account_id}/limits", headers=shop.auth)
    assert own.status_code == 200 and own.json()["limits"] == [] and own.json()["tier"] is None
