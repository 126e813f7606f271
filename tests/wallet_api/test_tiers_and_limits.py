"""Tiers and monthly limits: Unknown moves nothing, Unverified receives and pays businesses but
sends no transfer, Verified and Contracted move within their limits, and a limit holds when two
requests arrive at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.wallet_api.conftest import TL, WalletApi, assert_problem

LIMITS = {
    "limit_unverified_payment_minor": 30 * TL,
    "limit_verified_transfer_minor": 50 * TL,
    "limit_verified_payment_minor": 60 * TL,
    "limit_contracted_transfer_minor": 200 * TL,
    "limit_contracted_payment_minor": 300 * TL,
}


@pytest.fixture
def wallet_api_settings() -> dict[str, Any]:
    return LIMITS


async def test_unknown_moves_nothing(api: WalletApi) -> None:
    newcomer = await api.customer("unknown", funds=100 * TL)
    friend = await api.customer()
    shop = await api.business(funds=100 * TL)
    rich = await api.customer(funds=100 * TL)
    before = await api.counts()
    body = assert_problem(await api.transfer(newcomer, friend.number, TL), "tier-not-allowed", 403)
    assert (body["tier"], body["operation"]) == ("unknown", "p2p")
    body = assert_problem(await api.transfer(newcomer, shop.number, TL), "tier-not-allowed", 403)
    assert body["operation"] == "payment"
    assert_problem(await api.transfer(rich, newcomer.number, TL), "recipient-cannot-receive", 422)
    assert_problem(await api.transfer(shop, newcomer.number, TL), "recipient-cannot-receive", 422)
    assert await api.counts() == before
    await api.verify()


async def test_unverified_receives_and_pays_but_sends_no_transfer(api: WalletApi) -> None:
    customer = await api.customer("unverified")
    sender = await api.customer("verified", funds=100 * TL)
    shop = await api.business()
    assert (await api.transfer(sender, customer.number, 40 * TL)).status_code == 201
    paid = await api.transfer(customer, shop.number, 10 * TL)
    assert paid.status_code == 201 and paid.json()["type"] == "payment"
    before = await api.counts()
    body = assert_problem(await api.transfer(customer, sender.number, TL), "tier-not-allowed", 403)
    assert (body["tier"], body["operation"]) == ("unverified", "p2p")
    assert await api.counts() == before
    # The unverified payment limit (30 TL): 10 used, 20 left.
    body = assert_problem(await api.transfer(customer, shop.number, 21 * TL), "monthly-limit-exceeded", 422)
    assert (body["limit"], body["used"], body["remaining"], body["amount"]) == (
        30 * TL,
        10 * TL,
        20 * TL,
        21 * TL,
    )
    assert (await api.transfer(customer, shop.number, 20 * TL)).status_code == 201
    await api.verify()


@pytest.mark.parametrize(
    ("tier", "transfer_limit", "payment_limit"), [("verified", 50, 60), ("contracted", 200, 300)]
)
async def test_limits_per_tier_and_kind(
    api: WalletApi, tier: str, transfer_limit: int, payment_limit: int
) -> None:
    customer = await api.customer(tier, funds=1_000 * TL)
    friend = await api.customer()
    shop = await api.business()
    # Exactly the limit passes; one kuruş more does not, and the refusal counts nothing.
    assert (await api.transfer(customer, friend.number, transfer_limit * TL - 1)).status_code == 201
    body = assert_problem(await api.transfer(customer, friend.number, 2), "monthly-limit-exceeded", 422)
    assert (body["kind"], body["tier"], body["currency"]) == ("transfer", tier, "TRY")
    assert (await api.transfer(customer, friend.number, 1)).status_code == 201
    assert_problem(await api.transfer(customer, friend.number, 1), "monthly-limit-exceeded", 422)
    # Payments have their own limit; the fee does not count against it.
    assert (await api.transfer(customer, shop.number, payment_limit * TL)).status_code == 201
    body = assert_problem(await api.transfer(customer, shop.number, 1), "monthly-limit-exceeded", 422)
    assert body["kind"] == "payment" and body["used"] == payment_limit * TL
    used = await api.pool.fetch("SELECT kind, used FROM wallet.limit_usage ORDER BY kind")
    assert [(r["kind"], r["used"]) for r in used] == [
        ("payment", payment_limit * TL),
        ("transfer", transfer_limit * TL),
    ]
    await api.verify()


async def test_businesses_have_no_tier_limits(api: WalletApi) -> None:
    shop = await api.business(funds=1_000 * TL)
    customer = await api.customer("unverified")
    assert (await api.transfer(shop, customer.number, 500 * TL)).status_code == 201


async def test_two_requests_at_once_cannot_both_pass_a_limit(api: WalletApi) -> None:
    """50 TL limit, 30 used: two transfers of 20 at once, only one fits. Repeated with many at
    once: exactly as many pass as fit."""
    customer = await api.customer("verified", funds=1_000 * TL)
    friends = [await api.customer() for _ in range(2)]
    assert (await api.transfer(customer, friends[0].number, 30 * TL)).status_code == 201
    answers = await asyncio.gather(*(api.transfer(customer, f.number, 20 * TL) for f in friends))
    assert sorted(r.status_code for r in answers) == [201, 422]
    refused = next(r for r in answers if r.status_code == 422)
    assert_problem(refused, "monthly-limit-exceeded", 422)

    other = await api.customer("verified", funds=1_000 * TL)
    answers = await asyncio.gather(*(api.transfer(other, friends[i % 2].number, 7 * TL) for i in range(12)))
    assert sorted(r.status_code for r in answers) == [201] * 7 + [422] * 5  # 7 × 7 = 49 ≤ 50
    used = await api.pool.fetchval(
        "SELECT used FROM wallet.limit_usage WHERE account_id = $1", other.account_id
    )
    assert used == 49 * TL
    assert await api.balance(other.wallet_id) == {"cash": 951 * TL, "promo": 0, "held": 0}
    await api.verify()
