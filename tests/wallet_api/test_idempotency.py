"""Idempotency-Key on every money-moving request, scoped to the caller: the same key and body
answer the stored first answer; another body 422; while the first runs 409; missing 400."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg

from hiwallet.core import db
from hiwallet.wallet_api.idempotency import lock_key as _lock_key
from tests.wallet_api.conftest import ANY_PROGRAMME, TL, WalletApi, assert_problem


async def test_same_key_same_body_answers_the_first_answer(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    first = await api.transfer(alice, bob.number, 10 * TL, key="k-1")
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    again = await api.transfer(alice, bob.number, 10 * TL, key="k-1")
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert await api.balance(alice.wallet_id) == {"cash": 90 * TL, "promo": 0, "held": 0}
    # A day later (the record is kept 48 hours): still the first answer.
    await api.as_owner("UPDATE wallet.idempotency_keys SET created_at = now() - interval '24 hours'")
    assert (await api.transfer(alice, bob.number, 10 * TL, key="k-1")).json() == first.json()
    assert await api.service.purge_idempotency() == 0
    await api.as_owner("UPDATE wallet.idempotency_keys SET created_at = now() - interval '49 hours'")
    assert await api.service.purge_idempotency() == 1
    await api.verify()


async def test_same_key_other_body_is_refused(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    assert (await api.transfer(alice, bob.number, 10 * TL, key="k-2")).status_code == 201
    before = await api.counts()
    assert_problem(await api.transfer(alice, bob.number, 11 * TL, key="k-2"), "idempotency-key-reused", 422)
    assert_problem(
        await api.transfer(alice, bob.number, 10 * TL, key="k-2", reference="x"),
        "idempotency-key-reused",
        422,
    )
    assert await api.counts() == before


async def test_keys_are_scoped_to_the_caller(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    carol = await api.customer(funds=100 * TL)
    bob = await api.customer()
    a = await api.transfer(alice, bob.number, 10 * TL, key="shared-key")
    c = await api.transfer(carol, bob.number, 10 * TL, key="shared-key")
    assert a.status_code == c.status_code == 201 and a.json()["id"] != c.json()["id"]
    assert await api.balance(bob.wallet_id) == {"cash": 20 * TL, "promo": 0, "held": 0}


async def test_missing_or_malformed_key(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    shop = await api.business(funds=10 * TL)
    before = await api.counts()
    assert_problem(await api.transfer(alice, bob.number, TL, key=None), "idempotency-key-missing", 400)
    for bad in ("", "x" * 256, "has space", "tab\there"):
        r = await api.http.post(
            "/v1/transfers",
            json={"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": TL},
            headers={**alice.auth, "Idempotency-Key": bad},
        )
        assert_problem(r, "idempotency-key-invalid", 400)
    expires = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    promo = {
        "from_wallet": shop.wallet_id,
        "to_wallet_number": bob.number,
        "amount": TL,
        "programme": ANY_PROGRAMME,
        "expires_at": expires,
    }
    assert_problem(await api.post("/v1/promos", promo, shop.auth, key=None), "idempotency-key-missing", 400)
    assert_problem(
        await api.post("/v1/transfers/0001:x/refund", {}, shop.auth, key=None), "idempotency-key-missing", 400
    )
    assert await api.counts() == before
    # A quoted key (the draft's sf-string form) is the same key as the bare one.
    assert (await api.transfer(alice, bob.number, TL, key='"q-1"')).status_code == 201
    assert (await api.transfer(alice, bob.number, TL, key="q-1")).headers["idempotent-replayed"] == "true"


async def test_while_the_first_is_running_409(api: WalletApi) -> None:
    """Hold the key's lock as a running first request does: the second is answered 409 at once."""
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    caller = await api.pool.fetchval(
        "SELECT issuer || '#' || subject FROM wallet.members WHERE account_id = $1", alice.account_id
    )
    conn = await asyncpg.connect(db.owner_dsn(api.database))
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1)", _lock_key(int(alice.wallet_id[:4]), caller, "busy")
            )
            running = await api.transfer(alice, bob.number, 10 * TL, key="busy")
            assert_problem(running, "idempotency-in-progress", 409)
            other_key = await api.transfer(alice, bob.number, 10 * TL, key="free")
            assert other_key.status_code == 201
    finally:
        await conn.close()
    # Once the first is done (here: it went away), the key works.
    assert (await api.transfer(alice, bob.number, 10 * TL, key="busy")).status_code == 201
    assert await api.balance(bob.wallet_id) == {"cash": 20 * TL, "promo": 0, "held": 0}


async def test_concurrent_requests_with_one_key_move_money_once(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    answers = await asyncio.gather(*(api.transfer(alice, bob.number, 10 * TL, key="same") for _ in range(10)))
    statuses = [r.status_code for r in answers]
    assert set(statuses) <= {201, 409} and statuses.count(201) >= 1
    created = [r.json() for r in answers if r.status_code == 201]
    assert all(body == created[0] for body in created)
    for r in answers:
        if r.status_code == 409:
            assert_problem(r, "idempotency-in-progress", 409)
    assert await api.balance(bob.wallet_id) == {"cash": 10 * TL, "promo": 0, "held": 0}
    assert (await api.counts())["keys"] == 1
    await api.verify()


async def test_a_refused_request_is_not_stored_so_its_key_can_be_retried(api: WalletApi) -> None:
    """Refusals (funds, limits, tier) leave nothing, the key included (SYSTEM.md: a refused
    movement leaves nothing behind, so its id can be tried again)."""
    alice = await api.customer(funds=5 * TL)
    bob = await api.customer()
    assert_problem(await api.transfer(alice, bob.number, 10 * TL, key="retry-me"), "insufficient-funds", 422)
    assert (await api.counts())["keys"] == 0
    await api.fund(alice.wallet_id, 10 * TL)
    ok = await api.transfer(alice, bob.number, 10 * TL, key="retry-me")
    assert ok.status_code == 201 and "idempotent-replayed" not in ok.headers
    await api.verify()
