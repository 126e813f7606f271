"""Concurrent notifications share one statement and one commit (topup.ingest_batch through the
store's coalescer): each answered exactly as if the notifications had come one after the other,
and one that the database cannot hold does not fail its neighbours."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import httpx
import orjson
import pytest

from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.topup_webhook import providers
from hiwallet.topup_webhook.app import database_spec
from hiwallet.topup_webhook.providers import Notification
from hiwallet.topup_webhook.store import IngestItem, Outcome, TopupStore, Unstorable
from tests.topup_webhook.conftest import (
    STRIPE_PATH,
    bank_notification,
    running,
    stored,
    stripe_events,
    stripe_signed,
    topup_settings,
    wallet_id,
    wire,
)
from tests.waiting import until

EXCHANGE = "hwt.topups"


@pytest.fixture
async def pool(topup_db: str) -> AsyncIterator[asyncpg.Pool]:
    # as the service connects: the application role, through the SECURITY DEFINER functions
    p = await database_spec(topup_settings(topup_db)).create_pool(get_settings(), max_size=2)
    yield p
    await p.close()


def stripe(event: dict[str, object]) -> Notification:
    return providers.read("stripe", orjson.dumps(event))


async def test_a_batch_answers_each_notification_as_one_after_the_other(
    pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    wallet = wallet_id()
    checkout, intent = stripe_events(wallet=wallet, amount=700)
    other_checkout, other_intent = stripe_events(wallet=wallet, amount=300)
    other_intent["data"]["object"].update(amount=999, amount_received=999)  # type: ignore[attr-defined]
    w = wire(reference=None)
    unknown = {**checkout, "id": "evt_unknown_type", "type": "customer.created"}
    items = [
        stripe(checkout),  # the payment recorded
        stripe(intent),  # the same payment, another notification: its id appended
        stripe(checkout),  # the same notification again: nothing new
        stripe(unknown),  # a type we do nothing with: stored
        stripe(other_checkout),
        stripe(other_intent),  # another amount than the record: kept as it is
        providers.read("bank", bank_notification(w), "msg_batch_1"),
    ]
    recorded: list[int] = []
    store = TopupStore(pool, EXCHANGE, on_recorded=lambda: recorded.append(1))
    answers = await store.ingest_batch([_item(n) for n in items])
    assert answers == [
        Outcome.RECORDED,
        Outcome.REPORTED,
        Outcome.DUPLICATE,
        Outcome.STORED,
        Outcome.RECORDED,
        Outcome.MISMATCH,
        Outcome.RECORDED,
    ]
    assert recorded == [1]  # one wake-up for the batch's commit
    s = await stored(owner)
    assert len(s.inbox) == 6
    by_pi = {p["provider_payment_id"]: p for p in s.payments}
    first = by_pi[intent["data"]["object"]["id"]]  # type: ignore[index]
    assert first["reported_by"] == [checkout["id"], intent["id"]]  # in the batch's order
    assert by_pi[other_intent["data"]["object"]["id"]]["amount_minor"] == 300  # type: ignore[index]
    assert len(s.outbox) == 3  # one TopupRecorded per payment
    assert sorted(json.loads(m["body"])["amount_minor"] for m in s.outbox) == [300, 700, 25_000]

    # and the same notifications one at a time, after the batch: all seen
    alone = TopupStore(pool, EXCHANGE)
    assert {await alone.ingest(n, "webhook", None) for n in items} == {Outcome.DUPLICATE}


async def test_a_batch_of_distinct_notifications_is_answered_as_one_after_the_other(
    pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    """Every item its own event and payment: topup.ingest_batch's set-based path. The same
    answers, rows and messages as item by item, for each kind of answer at once."""
    wallet = wallet_id()
    first, first_again = stripe_events(wallet=wallet, amount=700)
    second, second_again = stripe_events(wallet=wallet, amount=300)
    second_again["data"]["object"].update(amount=999, amount_received=999)  # type: ignore[attr-defined]
    seen, _ = stripe_events(wallet=wallet_id())
    new, _ = stripe_events(wallet=None)  # no wallet: routed by the payment's id
    unknown = {**new, "id": "evt_distinct_unknown", "type": "customer.created"}
    w = wire(reference=wallet)
    alone = TopupStore(pool, EXCHANGE)
    for earlier in (first, second, seen):
        assert await alone.ingest(stripe(earlier), "webhook", "req-alone") is Outcome.RECORDED
    before = await stored(owner)

    recorded: list[int] = []
    store = TopupStore(pool, EXCHANGE, on_recorded=lambda: recorded.append(1))
    items = [
        stripe(first_again),  # recorded before: its id appended
        stripe(second_again),  # another amount than the record: kept as it is
        stripe(seen),  # the same notification again: nothing new
        stripe(new),
        stripe(unknown),  # a type we do nothing with: stored
        providers.read("bank", bank_notification(w), "msg_distinct_1"),
    ]
    answers = await store.ingest_batch([IngestItem(n, "webhook", f"req-{i}") for i, n in enumerate(items)])
    assert answers == [
        Outcome.REPORTED,
        Outcome.MISMATCH,
        Outcome.DUPLICATE,
        Outcome.RECORDED,
        Outcome.STORED,
        Outcome.RECORDED,
    ]
    assert recorded == [1]
    s = await stored(owner)
    assert len(s.inbox) == len(before.inbox) + 5
    assert [r["event_id"] for r in s.inbox[len(before.inbox) :]] == [
        first_again["id"],
        second_again["id"],
        new["id"],
        unknown["id"],
        "msg_distinct_1",
    ]  # in the batch's order
    assert {r["event_id"]: r["payment_id"] for r in s.inbox}[unknown["id"]] is None
    by_pi = {p["provider_payment_id"]: p for p in s.payments}
    assert by_pi[first_again["data"]["object"]["id"]]["reported_by"] == [first["id"], first_again["id"]]  # type: ignore[index]
    mismatched = by_pi[second_again["data"]["object"]["id"]]  # type: ignore[index]
    assert (mismatched["amount_minor"], mismatched["reported_by"]) == (
        300,
        [second["id"], second_again["id"]],
    )
    # One TopupRecorded per new payment, shaped as the one-at-a-time path shapes it.
    announced = s.outbox[len(before.outbox) :]
    assert len(announced) == 2
    by_payment = {p["id"]: p for p in s.payments}
    for message, request_id in zip(announced, ("req-3", "req-5"), strict=True):
        body = json.loads(message["body"])
        payment = by_payment[body["payment_id"]]
        assert message["routing_key"] == (payment["wallet"] or payment["id"])
        assert message["message_type"] == "TopupRecorded"
        assert json.loads(message["headers"]) == {
            "x-hiwallet-correlation-id": payment["id"],
            "x-request-id": request_id,
        }
        assert set(body) == set(json.loads(before.outbox[0]["body"]))
        assert (body["amount_minor"], body["wallet"], body["route"]) == (
            payment["amount_minor"],
            payment["wallet"],
            "webhook",
        )
    assert json.loads(announced[1]["body"])["wallet"] == wallet


async def test_a_payment_committed_while_the_batch_waited_on_it_is_reported(
    pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    """A batch whose INSERT waits on another transaction's uncommitted record of the same payment
    reports to that record once it commits (the report's statement sees what the batch's own
    snapshot could not), and does not record it twice."""
    checkout, intent = stripe_events(wallet=wallet_id())
    store = TopupStore(pool, EXCHANGE)
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        first = await holder.fetchval(
            "SELECT topup.ingest($1, $2, $3, 'webhook', $4::jsonb, $5, $6, $7, NULL, $8, $9, $10, $11, NULL)",
            *_ingest_args(stripe(checkout)),
        )
        assert first == "recorded"
        waiting = asyncio.create_task(store.ingest_batch([_item(stripe(intent))]))
        await until(
            lambda: owner.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ),
            10,
            "the batch waiting on the uncommitted record",
            interval_s=0.01,
        )
        await transaction.commit()
    assert await asyncio.wait_for(waiting, 10) == [Outcome.REPORTED]
    s = await stored(owner)
    [payment] = s.payments
    assert payment["reported_by"] == [checkout["id"], intent["id"]]
    assert len(s.outbox) == 1


def _ingest_args(n: Notification) -> tuple[object, ...]:
    p = n.payment
    assert p is not None
    return (
        n.provider,
        n.event_id,
        n.event_type,
        n.payload,
        p.id,
        p.provider_payment_id,
        p.wallet,
        p.amount_minor,
        p.currency,
        f"msg-{n.event_id}",
        EXCHANGE,
    )


async def test_a_notification_the_database_cannot_hold_does_not_fail_its_batch(
    pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    good, _ = stripe_events(wallet=wallet_id())
    also_good, _ = stripe_events(wallet=wallet_id())
    bad = providers.read("stripe", b'{"type": "x", "id": "evt_nul", "data": {"object": {"note": "\\u0000"}}}')
    store = TopupStore(pool, EXCHANGE)
    answers = await store.ingest_batch([_item(stripe(good)), _item(bad), _item(stripe(also_good))])
    assert answers[0] == answers[2] == Outcome.RECORDED
    assert isinstance(answers[1], Unstorable)
    s = await stored(owner)
    assert sorted(r["event_id"] for r in s.inbox) == sorted([good["id"], also_good["id"]])
    assert len(s.outbox) == 2


async def test_concurrent_webhooks_share_statements_and_each_is_answered_after_its_commit(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    settings = topup_settings(topup_db, ingest_writers=1, ingest_max_batch=8)
    readers = await asyncpg.create_pool(db.owner_dsn(topup_db), min_size=1, max_size=4)
    async with readers, running(settings) as client:
        store: TopupStore = client.app.state.store  # type: ignore[attr-defined]
        batches: list[int] = []
        call_batch = store.ingest_batch

        async def counted(items: list[IngestItem]) -> list[Outcome | Exception]:
            batches.append(len(items))
            return await call_batch(items)

        store._coalescer._call_batch = counted  # type: ignore[union-attr]
        events = [e for _ in range(12) for e in stripe_events(wallet=wallet_id())]

        async def post(event: dict[str, object]) -> httpx.Response:
            body = orjson.dumps(event)
            response = await client.post(STRIPE_PATH, content=body, headers=stripe_signed(body))
            # 202 only once committed: the row is there for any other session to see
            assert (
                await readers.fetchval("SELECT count(*) FROM topup.inbox WHERE event_id = $1", event["id"])
                == 1
            )
            return response

        answers = await asyncio.gather(*(post(e) for e in events))
    assert {a.status_code for a in answers} == {202}
    assert sum(batches) == 24 and max(batches) <= 8
    assert len(batches) < 24  # shared
    s = await stored(owner)
    assert (len(s.inbox), len(s.payments), len(s.outbox)) == (24, 12, 12)
    assert all(len(p["reported_by"]) == 2 for p in s.payments)


def _item(notification: Notification) -> IngestItem:
    return IngestItem(notification, "webhook", None)
