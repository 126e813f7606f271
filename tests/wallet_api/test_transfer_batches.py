"""Transfers share statements (wallet.transfer_batch) and decide from cached parties: what the
cache knew is checked again in the transfer's own statement, so a tier raised or a membership
gone since is honoured, and concurrent transfers in one batch are each answered as alone."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import asyncpg
import pytest

from hiwallet.ledger.accounts import cash_account
from tests.waiting import until
from tests.wallet_api.conftest import TL, WalletApi, assert_problem


@pytest.fixture
def wallet_api_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    limits = {"limit_verified_transfer_minor": 50 * TL, "limit_contracted_transfer_minor": 200 * TL}
    return {**limits, **getattr(request, "param", {})}


async def raise_tier(api: WalletApi, account_id: str, tier: str) -> None:
    if tier == "contracted":
        await api.contract(account_id)
        return
    raised = await api.http.put(
        f"/v1/accounts/{account_id}/tier", json={"tier": tier}, headers=api.onboarding
    )
    assert raised.status_code == 200, raised.text


async def test_a_tier_raised_after_the_parties_were_cached_is_honoured(api: WalletApi) -> None:
    alice = await api.customer("verified", funds=500 * TL)
    bob = await api.customer()
    assert (await api.transfer(alice, bob.number, 10 * TL)).status_code == 201  # parties cached
    # Verified may send 50 TL a month: 10 used, 60 more is over it.
    assert_problem(await api.transfer(alice, bob.number, 60 * TL), "monthly-limit-exceeded", 422)
    await raise_tier(api, alice.account_id, "contracted")
    # The cache still says verified; the transfer's statement finds contracted ("stale"), and
    # the transfer is decided again with the contracted limit (200 TL).
    assert (await api.transfer(alice, bob.number, 60 * TL)).status_code == 201
    assert await api.balance(bob.wallet_id) == {"cash": 70 * TL, "promo": 0, "held": 0}
    await api.verify()


async def test_a_recipient_raised_since_a_refusal_receives(api: WalletApi) -> None:
    alice = await api.customer("verified", funds=100 * TL)
    newcomer = await api.customer("unknown")
    assert_problem(await api.transfer(alice, newcomer.number, TL), "recipient-cannot-receive", 422)
    await raise_tier(api, newcomer.account_id, "unverified")
    # Refused from the cache, the transfer reads the parties again before refusing.
    assert (await api.transfer(alice, newcomer.number, TL)).status_code == 201
    assert await api.balance(newcomer.wallet_id) == {"cash": TL, "promo": 0, "held": 0}


async def test_a_membership_gone_since_the_cache_is_honoured(api: WalletApi) -> None:
    alice = await api.customer("verified", funds=100 * TL)
    bob = await api.customer()
    assert (await api.transfer(alice, bob.number, TL)).status_code == 201
    # No endpoint removes a member yet; the check must hold when one does.
    await api.as_owner("DELETE FROM wallet.members WHERE account_id = $1", alice.account_id)
    before = await api.counts()
    assert_problem(await api.transfer(alice, bob.number, TL), "not-found", 404)
    assert await api.counts() == before


async def test_many_senders_at_once_each_get_their_own_answer(api: WalletApi) -> None:
    """Concurrent transfers from many senders share batches; one sender short of money and one
    over its limit are refused alone, and everything else is posted once."""
    senders = [await api.customer("verified", funds=40 * TL) for _ in range(12)]
    receivers = [await api.customer() for _ in range(4)]
    rng = random.Random(3)
    amounts = [10 * TL] * 12
    amounts[5] = 41 * TL  # more than the sender has
    amounts[9] = 0  # bad input, refused before any batch
    to = [rng.choice(receivers).number for _ in senders]
    keys = [f"many-{i}" for i in range(len(senders))]
    before = await api.counts()
    answers = await asyncio.gather(
        *(api.transfer(s, n, a, key=k) for s, n, a, k in zip(senders, to, amounts, keys, strict=True))
    )
    statuses = [r.status_code for r in answers]
    assert statuses.count(201) == 10, [r.text for r in answers if r.status_code != 201]
    assert_problem(answers[5], "insufficient-funds", 422)
    assert answers[9].status_code == 422
    after = await api.counts()
    assert after["keys"] - before["keys"] == 10 and after["lines"] - before["lines"] == 20  # two legs each
    assert after["used"] - before["used"] == 100 * TL
    total = sum([(await api.balance(r.wallet_id))["cash"] for r in receivers])
    assert total == 100 * TL
    # Each posted one, sent again, answers its stored first answer, body for body.
    for i, answer in enumerate(answers):
        if answer.status_code == 201:
            again = await api.transfer(senders[i], to[i], amounts[i], key=keys[i])
            assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
            assert again.json() == answer.json()
    await api.verify()


async def test_one_sender_many_at_once_never_over_its_limit(api: WalletApi) -> None:
    """Two transfers of one source account never share a batch; all of them at once still
    respect the monthly limit and the balance."""
    alice = await api.customer("verified", funds=1_000 * TL)
    bob = await api.customer()
    answers = await asyncio.gather(*(api.transfer(alice, bob.number, 9 * TL) for _ in range(8)))
    assert sorted(r.status_code for r in answers) == [201] * 5 + [422] * 3  # 5 × 9 = 45 ≤ 50
    assert await api.balance(bob.wallet_id) == {"cash": 45 * TL, "promo": 0, "held": 0}
    await api.verify()


async def someone_waits_for(conn: asyncpg.Connection) -> None:
    """Until a backend waits for a lock ``conn`` holds. PostgreSQL announces no lock wait, so
    the condition itself is polled (not a guessed duration), bounded for a test that fails."""
    pid = conn.get_server_pid()
    await until(
        lambda: conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))", pid
        ),
        10,
        "a backend waiting for the held lock",
        interval_s=0.005,
    )


@pytest.mark.parametrize(
    ("wallet_api_settings", "others_go_on"),
    [({}, True), ({"transfer_spare_after_ms": 0, "transfer_writers": 1}, False)],
    indirect=["wallet_api_settings"],
    ids=["spare writers", "one writer only"],
)
async def test_a_transfer_stuck_on_a_lock_does_not_hold_back_the_others(
    api: WalletApi, others_go_on: bool
) -> None:
    """One writer drains the transfers; when its batch waits on a lock held elsewhere, a spare
    writer takes the transfers waiting behind it (settings: transfer_spare_after_ms)."""
    alice, carol = [await api.customer("verified", funds=100 * TL) for _ in range(2)]
    bob, dave = [await api.customer() for _ in range(2)]
    async with api.owner_connection() as conn, conn.transaction():
        # Alice's cash account, locked as a long transaction elsewhere would hold it (as the
        # owner: the service's role may lock ledger rows only inside the posting functions).
        await conn.execute(
            "SELECT 1 FROM ledger.accounts WHERE id = $1 FOR UPDATE", cash_account(alice.wallet_id)
        )
        stuck = asyncio.ensure_future(api.transfer(alice, bob.number, TL))
        await someone_waits_for(conn)  # its batch is waiting for the lock
        other = asyncio.ensure_future(api.transfer(carol, dave.number, TL))
        if others_go_on:  # a spare writer starts after transfer_spare_after_ms and takes it
            async with asyncio.timeout(10):  # a bound for a test that fails
                await asyncio.shield(other)
        else:  # behind the one writer, it waits as long as the lock is held: a second shows it
            done, _ = await asyncio.wait({other}, timeout=1.0)
            assert not done
        assert not stuck.done()
    assert (await stuck).status_code == 201
    assert (await other).status_code == 201
    assert await api.balance(bob.wallet_id) == {"cash": TL, "promo": 0, "held": 0}
    assert await api.balance(dave.wallet_id) == {"cash": TL, "promo": 0, "held": 0}
    await api.verify()
