"""Concurrency against the real PostgreSQL, and faults injected before, inside and at commit."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from hiwallet.ledger.errors import InsufficientFunds, LedgerError, LedgerInternalError, LedgerUnavailable
from hiwallet.ledger.faults import FaultPlan, FaultPoint
from hiwallet.ledger.model import Posting, PostResult
from hiwallet.ledger.service import Ledger
from hiwallet.ledger.store import LedgerStore
from tests.ledger.conftest import FEES, TL, assert_verified, cash, funded_wallet, snapshot


async def test_simultaneous_payments_never_spend_more_than_the_wallet_has(ledger: Ledger) -> None:
    payer = await funded_wallet(ledger, "alice", 100 * TL, bucket=11)
    merchant = await funded_wallet(ledger, "shop", 0, bucket=12)
    # 10 TL + 2 % fee = 10.20 each: 9 fit in 100 TL, the tenth does not
    results = await asyncio.gather(
        *(
            ledger.payment(f"pay-{i}", payer, merchant, 10 * TL, actor="alice", ref=f"o{i}")
            for i in range(40)
        ),
        return_exceptions=True,
    )
    ok = [r for r in results if isinstance(r, PostResult)]
    refused = [r for r in results if isinstance(r, InsufficientFunds)]
    assert (len(ok), len(refused)) == (9, 31), results
    assert await cash(ledger, payer) == 100 * TL - 9 * 1020
    assert await cash(ledger, merchant) == 90 * TL
    await assert_verified(ledger.store)


async def test_simultaneous_holds_and_payments_respect_available(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 100 * TL, bucket=11)
    other = await funded_wallet(ledger, "bob", 0, bucket=12)
    work = [ledger.hold(w, f"h{i}", 30 * TL) for i in range(5)]
    work += [ledger.transfer(f"t{i}", w, other, 30 * TL, actor="alice", ref="x") for i in range(5)]
    results = await asyncio.gather(*work, return_exceptions=True)
    succeeded = [r for r in results if not isinstance(r, BaseException)]
    assert len(succeeded) == 3  # 3 × 30 of 100; the rest refused for funds
    assert all(isinstance(r, InsufficientFunds) for r in results if isinstance(r, BaseException))
    balance = await ledger.store.wallet_balance(w)
    assert balance.available == 10 * TL
    await assert_verified(ledger.store)


async def test_simultaneous_posts_of_one_id_post_once(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=11)
    b = await funded_wallet(ledger, "bob", 0, bucket=12)
    results = await asyncio.gather(
        *(ledger.transfer("same", a, b, 7 * TL, actor="alice", ref="x") for _ in range(30))
    )
    assert sum(not r.replayed for r in results) == 1
    assert len({(r.id, r.lines) for r in results}) == 1
    assert await cash(ledger, a) == 93 * TL and await cash(ledger, b) == 7 * TL
    await assert_verified(ledger.store)


async def test_opposite_transfers_in_parallel_finish_without_deadlock(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 1_000 * TL, bucket=11)
    b = await funded_wallet(ledger, "bob", 1_000 * TL, bucket=12)
    c = await funded_wallet(ledger, "carol", 1_000 * TL, bucket=11)
    pairs = [(a, b), (b, a), (b, c), (c, a), (a, c), (c, b)]
    work = [
        ledger.transfer(f"x{i}-{j}", s, r, TL, actor="t", ref="x")
        for i in range(40)
        for j, (s, r) in enumerate(pairs)
    ]
    results = await asyncio.gather(*work, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    # every wallet sent and received the same, so all are back where they started
    assert [await cash(ledger, w) for w in (a, b, c)] == [1_000 * TL] * 3
    await assert_verified(ledger.store)


async def test_batched_posting_gives_a_result_for_each(ledger: Ledger) -> None:
    from hiwallet.ledger import rules

    a = await funded_wallet(ledger, "alice", 10 * TL, bucket=11)
    b = await funded_wallet(ledger, "bob", 0, bucket=12)
    postings = [rules.transfer(f"b{i}", a, b, 3 * TL, "TRY", actor="a", ref="x") for i in range(5)]
    results = await ledger.store.post_batch([*postings, postings[0]])
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["PostResult"] * 3 + ["InsufficientFunds"] * 2 + ["PostResult"]
    assert isinstance(results[3], InsufficientFunds) and results[3].fields["available"] == TL
    assert isinstance(results[5], PostResult) and results[5].replayed
    assert await cash(ledger, b) == 9 * TL
    await assert_verified(ledger.store)


# ---------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("point", "kill"),
    [
        (FaultPoint.BEFORE, False),
        (FaultPoint.INSIDE, False),
        (FaultPoint.INSIDE, True),  # the backend dies with the transaction open
        (FaultPoint.AT_COMMIT, True),  # the backend dies as COMMIT is sent
        (FaultPoint.AFTER_COMMIT, False),  # committed, answer lost
    ],
)
async def test_a_fault_never_leaves_half_a_transaction(
    ledger: Ledger, pool: asyncpg.Pool, dsn: str, transit: bool, point: FaultPoint, kill: bool
) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=11)
    b = await funded_wallet(ledger, "bob", 0, bucket=12)
    plan = FaultPlan(point, kill_dsn=dsn if kill else None)
    faulty = Ledger(LedgerStore(pool, faults=plan, transit_legs=transit), FEES)
    before = await snapshot(pool)

    with pytest.raises(LedgerError) as err:
        await faulty.payment("pay-1", a, b, 10 * TL, actor="alice", ref="o1")
    assert isinstance(err.value, LedgerUnavailable)
    assert plan.fired == 1
    await assert_verified(ledger.store)
    committed = point is FaultPoint.AFTER_COMMIT
    assert (await snapshot(pool) != before) is committed

    # the caller retries with the same id: it posts exactly once
    retry = await ledger.payment("pay-1", a, b, 10 * TL, actor="alice", ref="o1")
    assert retry.replayed is committed
    again = await ledger.payment("pay-1", a, b, 10 * TL, actor="alice", ref="o1")
    assert again.replayed
    assert await cash(ledger, a) == 100 * TL - 1020
    assert await cash(ledger, b) == 10 * TL
    await assert_verified(ledger.store)


async def test_database_down_is_unavailable(ledger: Ledger, pool: asyncpg.Pool) -> None:
    """A pool whose server is gone answers LedgerUnavailable, not a driver error."""
    from hiwallet.ledger import rules

    broken = await asyncpg.create_pool("postgresql://127.0.0.1:1/none", min_size=0, max_size=1, timeout=1)
    store = LedgerStore(broken)
    posting = rules.transfer("k", "0001:w:a", "0002:w:b", 1, "TRY", actor="a", ref="r")
    with pytest.raises(LedgerUnavailable):
        await store.post(posting)
    await broken.close()


async def test_a_batch_answers_as_the_same_postings_one_at_a_time(ledger: Ledger) -> None:
    """The set-based batch and posting one at a time agree, posting by posting: the same
    answers (ok, refused and why, replayed) and the same balances, over a random sequence with
    overdrafts, repeats and reused ids."""
    await _batch_against_one_at_a_time(ledger, seed=20261129, rounds=3, wallets=5, postings=60)


async def test_a_batch_over_hundreds_of_accounts_answers_as_one_at_a_time(ledger: Ledger) -> None:
    """The same over more accounts than post_batch looks up by array_position (200, migration
    0026): its jsonb map of the locked accounts gives the same answers, an unknown account's
    refusal included."""
    await _batch_against_one_at_a_time(
        ledger, seed=20261205, rounds=1, wallets=260, postings=400, unknown=True
    )


async def _batch_against_one_at_a_time(
    ledger: Ledger, *, seed: int, rounds: int, wallets: int, postings: int, unknown: bool = False
) -> None:
    import random

    from hiwallet.ledger import rules
    from hiwallet.ledger.accounts import new_wallet_id

    rng = random.Random(seed)
    for round_ in range(rounds):
        # two identical worlds: one posts the batch, the other one posting at a time
        worlds = []
        funding = [rng.randint(0, 20) * TL if i else 0 for i in range(wallets)]
        for side in (0, 1):
            # ids are scoped by the sender's bucket: the two worlds live in different buckets
            worlds.append(
                [
                    await funded_wallet(
                        ledger,
                        f"w{side}-{round_}-{i}",
                        funding[i],
                        bucket=1 + (i * 100 + side * 50) % 1000 if wallets <= 10 else 1 + i * 2 + side,
                    )
                    for i in range(wallets)
                ]
            )
            if unknown:  # a wallet never opened: its transfers are refused as AccountNotFound
                worlds[side].append(new_wallet_id(1 + side))
        plan = []
        for n in range(postings):
            if n % 7 == 6:
                plan.append(rng.choice(plan))  # the same request again: a replay
                continue
            a, b = rng.sample(range(len(worlds[0])), 2)
            key = f"r{round_}-{rng.randint(0, postings * 2 // 3)}"  # repeats: replays, or reused
            plan.append((key, a, b, rng.randint(1, 8) * TL))
        batch = [
            rules.transfer(k, worlds[0][a], worlds[0][b], m, "TRY", actor="t", ref="r") for k, a, b, m in plan
        ]
        if wallets > 200:  # the jsonb map's path: more than 200 accounts locked
            assert len({leg.account for p in batch for leg in p.legs}) > 200
        answers_batch = await ledger.store.post_batch(batch)
        answers_alone = []
        for k, a, b, m in plan:
            try:
                answers_alone.append(
                    await ledger.transfer(k, worlds[1][a], worlds[1][b], m, actor="t", ref="r")
                )
            except LedgerError as refused:
                answers_alone.append(refused)

        def kind(answer: object) -> str:
            if isinstance(answer, PostResult):
                return "replayed" if answer.replayed else "posted"
            return type(answer).__name__

        assert [kind(x) for x in answers_batch] == [kind(x) for x in answers_alone]
        expected = {"posted", "replayed", "InsufficientFunds"} | ({"AccountNotFound"} if unknown else set())
        assert {kind(x) for x in answers_batch} >= expected
        assert [await cash(ledger, w) for w in worlds[0][:wallets]] == [
            await cash(ledger, w) for w in worlds[1][:wallets]
        ]
    await assert_verified(ledger.store)


async def test_coalesced_postings_share_batches_and_a_bad_one_fails_alone(
    ledger: Ledger, pool: asyncpg.Pool
) -> None:
    from hiwallet.ledger import rules
    from hiwallet.ledger.accounts import cash_account
    from hiwallet.ledger.model import Leg, TxType

    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=11)
    b = await funded_wallet(ledger, "bob", 0, bucket=12)
    # unbalanced: only the database's balance trigger can refuse it, and it does so for the
    # whole batch's statement it is in
    bad = Posting(
        id="0011:bad",
        type=TxType.P2P,
        actor="x",
        ref="x",
        legs=(Leg(cash_account(a), -TL, "TRY"), Leg(cash_account(b), 2 * TL, "TRY")),
    )
    good = [rules.transfer(f"g{i}", a, b, TL, "TRY", actor="a", ref="r") for i in range(5)]
    results = await asyncio.gather(
        *(ledger.store.post(p) for p in [good[0], bad, *good[1:]]), return_exceptions=True
    )
    # a defect (the balance trigger fired), not "retry": the bad one fails alone
    assert isinstance(results[1], LedgerInternalError) and "unbalanced" in str(results[1])
    assert (results[1].sqlstate, results[1].constraint) == ("HW011", "lines_balanced")
    assert all(isinstance(r, PostResult) and not r.replayed for i, r in enumerate(results) if i != 1)
    assert await cash(ledger, b) == 5 * TL
    await assert_verified(ledger.store)


async def test_the_coalescer_batches_what_arrives_together() -> None:
    from hiwallet.core.coalesce import Coalescer

    sizes: list[int] = []

    async def post_batch(postings: object) -> list[object]:
        batch = list(postings)  # type: ignore[call-overload]
        sizes.append(len(batch))
        await asyncio.sleep(0.01)  # a batch call takes a while: the others arrive meanwhile
        return [f"answer-{p}" for p in batch]

    coalescer = Coalescer(post_batch, writers=2, max_batch=4)  # type: ignore[arg-type]
    answers = await asyncio.gather(*(coalescer.submit(i) for i in range(10)))  # type: ignore[arg-type]
    assert answers == [f"answer-{i}" for i in range(10)]  # each caller its own answer
    assert sum(sizes) == 10 and max(sizes) == 4 and len(sizes) < 10


async def test_the_coalescer_never_strands_a_posting() -> None:
    """A posting that arrives just as the only writer finds the queue empty still gets a writer."""
    from hiwallet.core.coalesce import Coalescer

    async def post_batch(postings: object) -> list[object]:
        return [f"answer-{p}" for p in postings]  # type: ignore[attr-defined]

    coalescer = Coalescer(post_batch, writers=1, max_batch=10)  # type: ignore[arg-type]
    for i in range(200):  # one at a time: each arrives as the previous writer is finishing
        # (asyncio.timeout, not wait_for: wait_for would run the post in a task of its own,
        # scheduled after the finished writer is reaped, and hide the race)
        async with asyncio.timeout(2):
            assert await coalescer.submit(i) == f"answer-{i}"  # type: ignore[arg-type]


async def test_a_batch_with_options_answers_as_the_same_postings_one_at_a_time(ledger: Ledger) -> None:
    """Refunds, promo and holds in one set-based call (migration 0008; before, such a batch
    went one posting at a time): each posting is answered as it is alone, and sees what an
    earlier one of the batch did (a payment spends promo a refund just gave back, or a grant
    just opened; a second capture of a hold replays the first); refusals move nothing; and the
    batch is posted at one time."""
    from datetime import UTC, datetime, timedelta

    from hiwallet.ledger import rules
    from hiwallet.ledger.accounts import cash_account, promo_account

    later = datetime.now(UTC) + timedelta(days=30)

    async def world(side: int) -> tuple[list[str], list[Posting]]:
        # ids are scoped by the home bucket: the two worlds live in different buckets
        c = await funded_wallet(ledger, f"c{side}", 50 * TL, bucket=21 + side)
        d = await funded_wallet(ledger, f"d{side}", 20 * TL, bucket=31 + side)
        shop = await funded_wallet(ledger, f"shop{side}", 0, bucket=41 + side)
        await ledger.promo_grant("g0", c, 10 * TL, expires_at=later, actor="ops", ref="campaign")
        paid = await ledger.payment("p0", c, shop, 5 * TL, actor="c", ref="order")  # all promo
        await ledger.hold(c, "h", 10 * TL)
        fee = FEES.payment
        batch = [
            rules.refund(await ledger.store.transaction(paid.id), actor="shop"),
            rules.payment("p1", c, shop, 9 * TL, "TRY", fee=fee, actor="c", ref="o1"),
            rules.transfer("t1", c, d, TL, "TRY", actor="c", ref="t"),
            rules.capture_hold(c, "h", 8 * TL, "TRY", cash_account(shop), actor="shop", ref="cap"),
            rules.capture_hold(c, "h", 8 * TL, "TRY", cash_account(shop), actor="shop", ref="cap"),
            rules.payment("p2", d, shop, 100 * TL, "TRY", fee=fee, actor="d", ref="o2"),
            rules.promo_grant("g1", d, 5 * TL, "TRY", expires_at=later, actor="shop", ref="w", business=shop),
            rules.payment("p3", d, shop, 3 * TL, "TRY", fee=fee, actor="d", ref="o3"),
        ]
        return [c, d, shop], batch

    wallets_batch, batch = await world(0)
    wallets_alone, alone = await world(1)
    answers_batch = await ledger.store.post_batch(batch)
    answers_alone: list[PostResult | LedgerError] = []
    for posting in alone:
        try:
            answers_alone.append(await ledger.store.post(posting))
        except LedgerError as refused:
            answers_alone.append(refused)

    def seen(answer: PostResult | LedgerError) -> object:
        if isinstance(answer, PostResult):
            return answer.replayed, sorted(line.amount for line in answer.lines)
        return type(answer).__name__

    assert [seen(a) for a in answers_batch] == [seen(a) for a in answers_alone]
    second_capture, too_much = answers_batch[4:6]
    assert isinstance(second_capture, PostResult) and second_capture.replayed
    assert isinstance(too_much, InsufficientFunds)
    # the refund gave the promo back, and the payment after it spent promo only
    payment = answers_batch[1]
    assert isinstance(payment, PostResult)
    moved = {line.account: line.amount for line in payment.lines}
    c = wallets_batch[0]
    assert moved[promo_account(c)] == -(9 * TL + FEES.payment.fee(9 * TL)) and cash_account(c) not in moved
    for got, want in zip(wallets_batch, wallets_alone, strict=True):
        a, b = await ledger.store.wallet_balance(got), await ledger.store.wallet_balance(want)
        assert (a.cash, a.promo, a.held) == (b.cash, b.promo, b.held)
    posted = [a for a in answers_batch if isinstance(a, PostResult) and not a.replayed]
    assert len(posted) == 6 and len({a.posted_at for a in posted}) == 1
    await assert_verified(ledger.store)


async def test_a_posting_whose_twin_commits_first_is_answered_as_a_replay(
    ledger: Ledger, store: LedgerStore, pool: asyncpg.Pool
) -> None:
    """A posting alone claims its id with ON CONFLICT (migration 0008, as ledger.post did): the
    same posting running meanwhile waits for the first one's locks, finds the id taken, and is
    answered with what the first one posted, not an error."""
    from hiwallet.ledger import rules

    a = await funded_wallet(ledger, "alice", 10 * TL, bucket=11)
    b = await funded_wallet(ledger, "bob", 0, bucket=12)
    posting = rules.transfer("twin", a, b, TL, "TRY", actor="a", ref="r")
    async with pool.acquire() as first, pool.acquire() as second:
        tx = first.transaction()
        await tx.start()
        mine = await store.post(posting, conn=first)
        twin_pid = await second.fetchval("SELECT pg_backend_pid()")
        twin = asyncio.create_task(store.post(posting, conn=second))  # autocommit
        # the twin has read no id yet (the first is not committed) and waits for its locks:
        # wait for that state, on the server
        await pool.execute(
            "DO $$ BEGIN WHILE NOT EXISTS (SELECT 1 FROM pg_stat_activity"
            f" WHERE pid = {int(twin_pid)} AND wait_event_type = 'Lock') LOOP"
            " PERFORM pg_sleep(0.005); END LOOP; END $$"
        )
        await tx.commit()
        answer = await twin
    assert not mine.replayed and answer.replayed
    assert answer.lines == mine.lines and answer.posted_at == mine.posted_at
    assert await cash(ledger, b) == TL
    await assert_verified(ledger.store)


async def test_ledger_post_in_sql_is_a_batch_of_one(
    ledger: Ledger, store: LedgerStore, pool: asyncpg.Pool
) -> None:
    """ledger.post keeps 0002's signature for SQL callers (docs/ledger-citus.md) and answers as
    the store's posting does, replays included."""
    from hiwallet.ledger import rules

    a = await funded_wallet(ledger, "alice", 10 * TL, bucket=11)
    b = await funded_wallet(ledger, "bob", 0, bucket=12)
    posting = rules.transfer("sql", a, b, 3 * TL, "TRY", actor="a", ref="r")
    call = "SELECT ledger.post($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
    first = await pool.fetchval(call, *store._arguments(posting))
    again = await store.post(posting)
    assert not first["replayed"] and again.replayed and again.id == first["id"]
    assert {(line.account, line.amount) for line in again.lines} == {
        (line["account"], line["amount"]) for line in first["lines"]
    }
    refused = await pool.fetchval(
        call, *store._arguments(rules.transfer("sql2", a, b, 8 * TL, "TRY", actor="a", ref="r"))
    )
    assert refused["error"]["sqlstate"] == "HW001"
    await assert_verified(ledger.store)


async def test_a_burst_goes_as_parts_that_share_no_account(ledger: Ledger, pool: asyncpg.Pool) -> None:
    """32 postings sent in one turn go as two batches at once (coalesce_parts), none locking an
    account of the other; top-ups through one clearing row stay one batch. Each answered as
    alone, and verify clean."""
    from hiwallet.ledger import rules

    spread = [await funded_wallet(ledger, f"s{i}", 0, bucket=100 + i) for i in range(32)]
    one_row = [await funded_wallet(ledger, f"o{i}", 0, bucket=200) for i in range(16)]
    store = ledger.store
    calls: list[list[str]] = []
    post_batch = store.post_batch

    async def recorded(postings: Sequence[Posting]) -> list[Any]:
        calls.append([leg.account for p in postings for leg in p.legs])
        return await post_batch(postings)

    assert store._coalescer is not None
    store._coalescer._call_batch = recorded  # type: ignore[assignment]
    for wallets, tag in ((spread, "s"), (one_row + one_row, "o")):
        calls.clear()
        postings = [
            rules.topup(f"burst-{tag}-{i}", w, TL, "TRY", provider="stripe", actor="t", ref="r")
            for i, w in enumerate(wallets)
        ]
        results = await asyncio.gather(*(store.post(p) for p in postings))
        assert all(isinstance(r, PostResult) and not r.replayed for r in results)
        if tag == "s":
            assert sorted(len(c) for c in calls) == [32, 32]  # 16 top-ups of two legs each
            assert not set(calls[0]) & set(calls[1])
        else:
            assert len(calls) == 1  # every top-up credits the bucket's one clearing row
    assert [await cash(ledger, w) for w in spread] == [TL] * 32
    assert [await cash(ledger, w) for w in one_row] == [2 * TL] * 16
    await assert_verified(ledger.store)
