"""The batched handler of TopupRecorded (``TopupHandler.batch``, core.consumer's batch mode):
every outcome the same as one at a time, one wallet's lines in message order; a malformed body
fails the batch (the consumer then goes one at a time); through the app, a poison message among
good ones is dead-lettered alone and its neighbours are credited in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import pytest

from hiwallet.core.broker import Broker
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.deadletters import list_dead_letters
from hiwallet.ledger import Ledger, cash_account
from hiwallet.wallet_consumer import CONSUMER_NAME, TopupHandler
from hiwallet.wallet_consumer.app import topology_of
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.wallet_consumer.conftest import (
    TL,
    cash,
    message,
    outgoing,
    running,
    topup_body,
    until,
    verified,
)


async def consume_batch(
    pool: asyncpg.Pool, handler: TopupHandler, messages: Sequence[IncomingMessage]
) -> list[Mapping[str, Any] | None]:
    """What core.consumer.Consumer does with a batch, without the broker: in one transaction,
    claim every id; handle the new ones as a batch; store their outcomes. None for a repeat."""
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(
            "INSERT INTO processed_events (consumer, message_id) SELECT $1, unnest($2::text[])"
            " ON CONFLICT DO NOTHING RETURNING message_id",
            CONSUMER_NAME,
            [m.message_id for m in messages],
        )
        new = {r["message_id"] for r in rows}
        fresh = [m for m in messages if m.message_id in new]
        answers = list(await handler.batch(conn, fresh)) if fresh else []
        assert len(answers) == len(fresh)
        for m, answer in zip(fresh, answers, strict=True):
            await conn.execute(
                "UPDATE processed_events SET outcome = $3 WHERE consumer = $1 AND message_id = $2",
                CONSUMER_NAME,
                m.message_id,
                dict(answer),
            )
        by_id = {m.message_id: a for m, a in zip(fresh, answers, strict=True)}
        return [by_id.get(m.message_id) for m in messages]


async def test_a_mixed_batch_answers_as_one_at_a_time_and_keeps_each_wallets_order(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler, closed_wallet: str
) -> None:
    a = (await ledger.open_wallet("ayla", bucket=421)).wallet_id
    b = (await ledger.open_wallet("bora", bucket=17)).wallet_id
    eur = (await ledger.open_wallet("euro", "EUR", bucket=9)).wallet_id
    before = topup_body(a, 1 * TL)
    (first,) = await consume_batch(pool, handler, [message(before)])
    assert first is not None and first["result"] == "credited"
    by_operator = topup_body(b, 4 * TL)
    await ledger.topup(
        by_operator["payment_id"],
        b,
        4 * TL,
        provider="stripe",
        actor="operator:ayla",
        ref=by_operator["provider_payment_id"],
    )
    a_bodies = [topup_body(a, (i + 2) * TL) for i in range(3)]
    cases = [
        (a_bodies[0], "credited"),
        (topup_body("0421:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000", 5 * TL), "unattributed"),
        (a_bodies[1], "credited"),
        (topup_body(b, 6 * TL), "credited"),
        (topup_body(eur, 7 * TL), "unattributed"),
        (topup_body(closed_wallet, 8 * TL), "unattributed"),
        ({**before, "route": "reconciliation"}, "replayed"),
        (by_operator, "credited-already"),
        (topup_body(None, 9 * TL, reference="havale"), "unattributed"),
        (a_bodies[2], "credited"),
    ]
    batch = [message(body) for body, _ in cases]
    done = await consume_batch(pool, handler, batch)
    assert [d["result"] if d else None for d in done] == [result for _, result in cases]
    reasons = [d.get("reason") for d in done if d and d["result"] == "unattributed"]
    assert reasons == ["unknown-wallet", "currency-mismatch", "closed-wallet", "no-reference"]
    assert await cash(ledger, a) == 1 * TL + sum(x["amount_minor"] for x in a_bodies)
    assert await cash(ledger, b) == (4 + 6) * TL
    lines = (await ledger.statement(cash_account(a), limit=10)).lines
    assert [line.ref for line in lines] == [x["provider_payment_id"] for x in (before, *a_bodies)]
    stored = await pool.fetch("SELECT outcome FROM processed_events")
    assert len(stored) == 1 + len(cases) and all(r["outcome"]["result"] for r in stored)
    assert await pool.fetchval("SELECT count(*) FROM wallet.unattributed_topups") == 4
    # the whole batch again (redelivered): every message a repeat, nothing done
    assert await consume_batch(pool, handler, batch) == [None] * len(cases)
    assert await cash(ledger, a) == 1 * TL + sum(x["amount_minor"] for x in a_bodies)
    await verified(ledger)


async def test_one_payment_twice_in_a_batch_is_credited_once(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    body = topup_body(wallet, 11 * TL)
    done = await consume_batch(pool, handler, [message(body), message({**body, "route": "reconciliation"})])
    assert [d["result"] if d else None for d in done] == ["credited", "replayed"]
    assert await cash(ledger, wallet) == 11 * TL
    await verified(ledger)


async def test_a_malformed_body_fails_the_batch_and_leaves_nothing(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    good = [topup_body(wallet, TL), topup_body(wallet, 2 * TL)]
    batch = [message(good[0]), message({**good[1], "amount_minor": "a lot"}), message(good[1])]
    with pytest.raises(Unprocessable, match="amount_minor"):
        await consume_batch(pool, handler, batch)
    assert await cash(ledger, wallet) == 0
    assert await pool.fetchval("SELECT count(*) FROM processed_events") == 0


async def test_the_app_dead_letters_a_poison_message_alone_and_credits_its_batch_in_order(
    wallet_db: str, pool: asyncpg.Pool, ledger: Ledger, broker: Broker, settings: WalletConsumerSettings
) -> None:
    """A provider without clearing accounts in the middle of one wallet's top-ups, all waiting
    in the queue when the consumer starts (delivered at once, handled in batches): the ledger
    refuses that posting, the batch falls back to one message at a time, that one alone is
    dead-lettered, and the others are credited once, in the order published."""
    wallet = (await ledger.open_wallet("ayla", bucket=8)).wallet_id
    bodies = [topup_body(wallet, (i + 1) * TL, provider_payment_id=f"pi_batch_{i:03d}") for i in range(30)]
    poison = {**topup_body(wallet, 99 * TL), "provider": "papara"}
    messages = [outgoing(settings, body) for body in bodies]
    messages.insert(15, outgoing(settings, poison))
    await broker.declare(topology_of(settings))
    await broker.publish(messages)
    async with running(settings, wallet_db) as client:

        async def dead_lettered() -> bool:
            return len(await list_dead_letters(broker, settings.dead_letter_queue)) == 1

        await until(dead_lettered)
        await until(lambda: _processed_is(pool, len(bodies)))
        (letter,) = await list_dead_letters(broker, settings.dead_letter_queue)
        assert "no ledger account 0008:sys:clearing:papara:TRY" in letter.reason
        assert letter.message_id == messages[15].message_id
        metrics = (await client.get("/metrics")).text
        assert "hiwallet_consumer_batch_fallbacks_total" in metrics
    assert await cash(ledger, wallet) == sum(b["amount_minor"] for b in bodies)
    lines = (await ledger.statement(cash_account(wallet), limit=100)).lines
    assert [line.ref for line in lines] == [b["provider_payment_id"] for b in bodies]
    await verified(ledger)


async def _processed_is(pool: asyncpg.Pool, n: int) -> bool:
    return int(await pool.fetchval("SELECT count(*) FROM processed_events")) == n
