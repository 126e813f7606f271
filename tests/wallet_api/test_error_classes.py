"""What wallet-api answers when the database fails (issue 9, item 1): 503 "retry" only for what
a retry can cure; an invariant trigger, a data error, an unknown SQLSTATE is a 500
`internal-error`, never "retry". The failures are PostgreSQL's own (tests/dbfaults.py: a
trigger that raises the SQLSTATE named by the transfer's reference, or kills the session)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests import dbfaults
from tests.wallet_api.conftest import TL, WalletApi, assert_problem

DEFECTS = [
    "HW011",  # the balance trigger: an invariant
    "HW010",  # the append-only trigger
    "HW099",  # an HW code nobody maps
    "22P02",  # a data error
    "23514",  # an unmapped constraint
    "XX000",  # the server's internal error
]
CURABLE = ["40P01", "40001", "55P03", "57014", "08006"]


@pytest.fixture
async def faulty(api: WalletApi) -> WalletApi:
    await dbfaults.install(api.database)
    return api


@pytest.mark.parametrize("sqlstate", DEFECTS)
async def test_a_transfer_that_meets_a_defect_is_a_500(faulty: WalletApi, sqlstate: str) -> None:
    api = faulty
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    before = await api.counts()
    r = await api.transfer(alice, bob.number, TL, reference=f"fault:{sqlstate}")
    body = assert_problem(r, "internal-error", 500)
    assert "retry" not in r.text.lower(), body
    assert await api.counts() == before
    # the same request again: the same answer, never a "retry" that cannot succeed
    r = await api.transfer(alice, bob.number, TL, key="same-key", reference=f"fault:{sqlstate}")
    assert_problem(r, "internal-error", 500)


@pytest.mark.parametrize("sqlstate", CURABLE)
async def test_a_transfer_that_meets_what_a_retry_cures_is_a_503(faulty: WalletApi, sqlstate: str) -> None:
    api = faulty
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    r = await api.transfer(alice, bob.number, TL, reference=f"fault:{sqlstate}")
    assert_problem(r, "service-unavailable", 503)


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
async def test_a_deadlock_is_retried_before_anything_is_answered(faulty: WalletApi, sqlstate: str) -> None:
    """Once: the retry inside wallet-api posts it (the transfer's batch, and the promo grant's
    unit of work)."""
    api = faulty
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    r = await api.transfer(alice, bob.number, TL, reference=f"fault-once:{sqlstate}")
    assert r.status_code == 201, r.text
    assert await dbfaults.fired_once(api.database)
    shop = await api.business(funds=100 * TL)
    programme = await api.programme(shop)
    await dbfaults.rearm(api.database)
    grant = {
        "from_wallet": shop.wallet_id,
        "to_wallet_number": bob.number,
        "amount": TL,
        "programme": programme,
        "expires_at": (datetime.now(UTC) + timedelta(days=3)).isoformat(),
        "reference": f"fault-once:{sqlstate}",
    }
    r = await api.post("/v1/promos", grant, shop.auth)
    assert r.status_code == 201, r.text
    assert await dbfaults.fired_once(api.database)
    assert await api.balance(bob.wallet_id) == {"cash": TL, "promo": TL, "held": 0}


async def test_a_session_killed_mid_transfer_is_a_503_and_the_retry_posts(faulty: WalletApi) -> None:
    api = faulty
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    r = await api.transfer(alice, bob.number, TL, key="killed", reference="fault:terminate")
    assert_problem(r, "service-unavailable", 503)
    # nothing was posted; the next transfer is served
    r = await api.transfer(alice, bob.number, TL, key="after", reference="fine")
    assert r.status_code == 201, r.text
    assert await api.balance(bob.wallet_id) == {"cash": TL, "promo": 0, "held": 0}


@pytest.mark.parametrize(
    ("sqlstate", "slug", "status"), [("HW012", "internal-error", 500), ("40P01", "service-unavailable", 503)]
)
async def test_a_promo_grant_in_a_unit_of_work_is_classified_the_same(
    faulty: WalletApi, sqlstate: str, slug: str, status: int
) -> None:
    """The other write path: the posting joins wallet-api's own transaction (idempotency record),
    retried after a deadlock."""
    api = faulty
    shop = await api.business(funds=100 * TL)
    customer = await api.customer()
    grant = {
        "from_wallet": shop.wallet_id,
        "to_wallet_number": customer.number,
        "amount": TL,
        "programme": await api.programme(shop),
        "expires_at": (datetime.now(UTC) + timedelta(days=3)).isoformat(),
        "reference": f"fault:{sqlstate}",
    }
    before = await api.counts()
    assert_problem(await api.post("/v1/promos", grant, shop.auth), slug, status)
    assert await api.counts() == before
