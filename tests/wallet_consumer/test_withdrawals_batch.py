"""WithdrawalHandler.batch's set-based path: a batch of new debits and settlements, each saga
once, is handled with a statement for each step of the whole batch, and answers, stores, posts
and queues exactly what the commands one at a time would. A batch that holds anything else (a
refusal, a limit reached, a refund, a command answered before) goes one command at a time in
the same transaction, with nothing of the set-based attempt left behind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import orjson
import pytest

from hiwallet.contracts.withdrawals import WITHDRAWALS_EXCHANGE
from hiwallet.core.consumer import IncomingMessage
from hiwallet.ledger import Ledger
from hiwallet.wallet_consumer import WithdrawalHandler
from tests.wallet_consumer.conftest import TL, cash, verified
from tests.wallet_consumer.withdrawals import (
    FEE,
    LIMITS,
    Holder,
    bank_clearing,
    command,
    debit_body,
    holder,
    nostro,
    outbox,
    refund_body,
    settle_body,
    withdrawal_used,
)


@pytest.fixture
def handler(consumer_ledger: Ledger) -> WithdrawalHandler:
    return WithdrawalHandler(consumer_ledger, exchange=WITHDRAWALS_EXCHANGE, limits=LIMITS)


async def in_batch(
    pool: asyncpg.Pool, handler: WithdrawalHandler, messages: Sequence[IncomingMessage]
) -> tuple[list[Mapping[str, Any]], int]:
    """The batch in one transaction, as core's Consumer runs it; its outcomes and how many
    statements the handler sent."""
    statements: list[str] = []
    async with pool.acquire() as conn, conn.transaction():
        conn.add_query_logger(lambda record: statements.append(record.query))
        try:
            outcomes = await handler.batch(conn, messages)
        finally:
            conn.remove_query_logger(statements.append)
    return outcomes, len(statements)


async def one_by_one(
    pool: asyncpg.Pool, handler: WithdrawalHandler, messages: Sequence[IncomingMessage]
) -> list[Mapping[str, Any]]:
    outcomes = []
    for message in messages:
        async with pool.acquire() as conn, conn.transaction():
            outcomes.append(await handler(conn, message))
    return outcomes


async def responses(pool: asyncpg.Pool, saga_ids: Sequence[str]) -> list[tuple[str, str, dict[str, Any]]]:
    rows = await pool.fetch(
        "SELECT command_type, saga_id, response_type, response FROM wallet.processed_messages"
        " WHERE saga_id = ANY($1::text[])",
        list(saga_ids),
    )
    by_saga = {(r["saga_id"], r["command_type"]): r for r in rows}
    out = []
    for saga in saga_ids:
        for kind in ("DebitForWithdrawal", "SettleWithdrawal"):
            row = by_saga.get((saga, kind))
            if row is not None:
                body = row["response"]
                out.append(
                    (kind, row["response_type"], orjson.loads(body) if isinstance(body, str) else body)
                )
    return out


def _object(value: Any) -> dict[str, Any]:
    return orjson.loads(value) if isinstance(value, str | bytes) else dict(value)


def _shape(outcomes: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    return [(o["result"], o["response"], "transaction_id" in o) for o in outcomes]


async def test_a_batch_of_new_debits_and_settlements_does_what_one_at_a_time_does_in_few_statements(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    batched = [await holder(ledger, bucket=b, funded=500 * TL) for b in (3, 4, 5, 5)]
    alone = [await holder(ledger, bucket=b, funded=500 * TL) for b in (3, 4, 5, 5)]
    business = await holder(ledger, bucket=6, funded=500 * TL, kind="business")
    amounts = [100 * TL, 7 * TL, 250 * TL, 1 * TL]

    def debits(people: Sequence[Holder]) -> list[dict[str, Any]]:
        return [debit_body(who, amount) for who, amount in zip(people, amounts, strict=True)]

    batch_debits = [*debits(batched), debit_body(business, 30 * TL)]
    alone_debits = debits(alone)
    got, statements = await in_batch(pool, handler, [command("DebitForWithdrawal", b) for b in batch_debits])
    want = await one_by_one(pool, handler, [command("DebitForWithdrawal", b) for b in alone_debits])
    assert _shape(got) == [*_shape(want), ("debited", "WithdrawalDebited", True)]
    # Set-based: a statement a step (lock, stored responses, parties, the savepoint, the limit,
    # store, outbox, post, its release), not about nine a command.
    assert statements <= 10, statements
    for who, amount in zip(batched + alone, amounts + amounts, strict=True):
        assert await cash(ledger, who.wallet) == 500 * TL - amount - FEE
    assert await withdrawal_used(pool, batched[0]) == await withdrawal_used(pool, alone[0]) == 100 * TL
    # two debits of one account (bucket 5's holders are two accounts; each counted its own)
    assert await withdrawal_used(pool, batched[2]) == 250 * TL
    assert await withdrawal_used(pool, business) == 0  # a business account has no limit

    def settles(
        bodies: Sequence[dict[str, Any]], outcomes: Sequence[Mapping[str, Any]]
    ) -> list[IncomingMessage]:
        return [
            command("SettleWithdrawal", settle_body(body, o["transaction_id"]))
            for body, o in zip(bodies, outcomes, strict=True)
        ]

    clearing_before = await bank_clearing(ledger)
    got_settled, statements = await in_batch(pool, handler, settles(batch_debits, got))
    want_settled = await one_by_one(pool, handler, settles(alone_debits, want))
    assert _shape(got_settled) == [*_shape(want_settled), ("settled", "WithdrawalSettled", True)]
    # 8, and the merchants' withdrawal events of the batch's settlements (one statement)
    assert statements <= 9, statements
    assert await bank_clearing(ledger) == clearing_before - 2 * sum(amounts) - 30 * TL
    assert await nostro(ledger) == 2 * sum(amounts) + 30 * TL

    # The same stored responses, but for the ids, as one at a time stored.
    def without_ids(rows: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[Any, ...]]:
        return [
            (
                kind,
                response,
                sorted(
                    (k, v) for k, v in body.items() if k not in {"command_id", "saga_id", "transaction_id"}
                ),
            )
            for kind, response, body in rows
        ]

    stored_batch = await responses(pool, [b["saga_id"] for b in batch_debits[:4]])
    stored_alone = await responses(pool, [b["saga_id"] for b in alone_debits])
    assert without_ids(stored_batch) == without_ids(stored_alone)
    for (_, _, body), original in zip(stored_batch[::2], batch_debits, strict=False):
        assert body["command_id"] == original["command_id"]
    # The outbox: each command's response once, the batch's in the batch's order.
    sent = await outbox(pool)
    assert [m["message_type"] for m in sent] == ["WithdrawalDebited"] * 9 + ["WithdrawalSettled"] * 9
    assert [_object(m["body"])["saga_id"] for m in sent[:5]] == [b["saga_id"] for b in batch_debits]
    await verified(ledger)


async def test_a_refusal_in_a_batch_sends_the_batch_one_command_at_a_time(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    """Too little money, found by the ledger after the set-based path counted the limits and
    stored the responses: all of that rolled back (its savepoint), then one at a time."""
    ayla = await holder(ledger, bucket=7, funded=500 * TL)
    bora = await holder(ledger, bucket=8, funded=20 * TL)
    batch = [
        command("DebitForWithdrawal", debit_body(ayla, 100 * TL)),
        command("DebitForWithdrawal", debit_body(bora, 50 * TL)),  # more than bora has
    ]
    outcomes, _ = await in_batch(pool, handler, batch)
    assert [(o["result"], o.get("reason")) for o in outcomes] == [
        ("debited", None),
        ("rejected", "insufficient_funds"),
    ]
    assert await cash(ledger, bora.wallet) == 20 * TL
    assert await withdrawal_used(pool, bora) == 0  # the set-based count did not survive
    assert await withdrawal_used(pool, ayla) == 100 * TL
    assert [m["message_type"] for m in await outbox(pool)] == ["WithdrawalDebited", "WithdrawalDebitRejected"]
    await verified(ledger)


async def test_two_debits_of_one_account_past_its_limit_in_one_batch(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    """Each under the limit, together over it: the set-based count sees the first when it
    counts the second; the one-at-a-time path then debits the first and refuses the second."""
    ayla = await holder(ledger, bucket=9, funded=3_000 * TL)
    batch = [
        command("DebitForWithdrawal", debit_body(ayla, 600 * TL)),
        command("DebitForWithdrawal", debit_body(ayla, 600 * TL)),
    ]
    outcomes, _ = await in_batch(pool, handler, batch)
    assert [(o["result"], o.get("reason")) for o in outcomes] == [("debited", None), ("rejected", "limit")]
    assert await withdrawal_used(pool, ayla) == 600 * TL
    assert await cash(ledger, ayla.wallet) == 3_000 * TL - 600 * TL - FEE
    await verified(ledger)


async def test_a_batch_with_a_refund_or_a_repeat_goes_one_at_a_time(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    ayla = await holder(ledger, bucket=10, funded=500 * TL)
    bora = await holder(ledger, bucket=10, funded=500 * TL)
    first, second = debit_body(ayla, 100 * TL), debit_body(bora, 100 * TL)
    outcomes, _ = await in_batch(
        pool, handler, [command("DebitForWithdrawal", first), command("DebitForWithdrawal", second)]
    )
    refund = command("RefundWithdrawal", refund_body(first, outcomes[0]["transaction_id"]))
    settle = command("SettleWithdrawal", settle_body(second, outcomes[1]["transaction_id"]))
    again = command("DebitForWithdrawal", second)  # answered before: published again
    done, _ = await in_batch(pool, handler, [refund, settle, again])
    assert [o["result"] for o in done] == ["refunded", "settled", "republished"]
    assert await cash(ledger, ayla.wallet) == 500 * TL
    assert await withdrawal_used(pool, ayla) == 0
    assert await cash(ledger, bora.wallet) == 500 * TL - 100 * TL - FEE
    await verified(ledger)
