"""The merchants' withdrawal events (docs/webhooks.md): withdrawal.completed when a business's
withdrawal settles, withdrawal.failed when it is refunded, each written in the command's own
transaction (on the one-command path and the batch path), once; none for a personal wallet."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson
import pytest

from hiwallet.contracts import merchant_events as me
from hiwallet.contracts.withdrawals import WITHDRAWALS_EXCHANGE
from hiwallet.ledger import Ledger
from hiwallet.wallet_consumer import WithdrawalHandler
from tests.wallet_consumer.conftest import TL
from tests.wallet_consumer.withdrawals import (
    LIMITS,
    command,
    consume,
    debit_body,
    holder,
    refund_body,
    settle_body,
)

OWNER_QUERY = "SELECT type, id, resource_id, account_id, payload FROM wallet.webhook_events ORDER BY seq"


@pytest.fixture
def woken() -> list[int]:
    return []


@pytest.fixture
def handler(consumer_ledger: Ledger, woken: list[int]) -> WithdrawalHandler:
    return WithdrawalHandler(
        consumer_ledger, exchange=WITHDRAWALS_EXCHANGE, limits=LIMITS, on_events=lambda: woken.append(1)
    )


async def events(api_pool: asyncpg.Pool) -> list[dict[str, Any]]:
    rows = await api_pool.fetch(OWNER_QUERY)
    return [
        {**dict(r), "payload": orjson.loads(r["payload"]) if isinstance(r["payload"], str) else r["payload"]}
        for r in rows
    ]


async def debited(pool: asyncpg.Pool, handler: WithdrawalHandler, body: dict[str, Any]) -> str:
    done = await consume(pool, handler, command("DebitForWithdrawal", body))
    assert done is not None and done["result"] == "debited", done
    return str(done["transaction_id"])


async def test_a_business_withdrawal_settled_or_refunded_is_told_once(
    pool: asyncpg.Pool, api_pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler, woken: list[int]
) -> None:
    shop = await holder(ledger, bucket=31, funded=500 * TL, kind="business")
    settled = debit_body(shop, 100 * TL)
    settled_debit = await debited(pool, handler, settled)
    refunded = debit_body(shop, 40 * TL)
    refunded_debit = await debited(pool, handler, refunded)
    assert await events(api_pool) == []  # a debit is no event

    done = await consume(pool, handler, command("SettleWithdrawal", settle_body(settled, settled_debit)))
    assert done is not None and done["result"] == "settled"
    back = await consume(pool, handler, command("RefundWithdrawal", refund_body(refunded, refunded_debit)))
    assert back is not None and back["result"] == "refunded"
    # again: answered from the stored response, no second event
    await consume(pool, handler, command("SettleWithdrawal", settle_body(settled, settled_debit)))
    await consume(pool, handler, command("RefundWithdrawal", refund_body(refunded, refunded_debit)))

    completed, failed = await events(api_pool)
    assert completed["type"] == "withdrawal.completed" and completed["resource_id"] == settled["saga_id"]
    assert completed["id"] == me.event_id("withdrawal.completed", settled["saga_id"])
    assert completed["account_id"] == shop.account
    assert completed["payload"] == {
        "account_id": shop.account,
        "wallet_id": shop.wallet,
        "withdrawal_id": settled["saga_id"],
        "transaction_id": done["transaction_id"],
        "amount_minor": 100 * TL,
        "currency": "TRY",
    }
    assert failed["type"] == "withdrawal.failed" and failed["resource_id"] == refunded["saga_id"]
    assert failed["payload"]["amount_minor"] == 40 * TL
    assert failed["payload"]["transaction_id"] == back["transaction_id"]
    assert len(woken) == 2


async def test_the_batch_path_writes_the_events_with_the_settlements(
    pool: asyncpg.Pool, api_pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    shop = await holder(ledger, bucket=32, funded=500 * TL, kind="business")
    person = await holder(ledger, bucket=33, funded=500 * TL)
    a, b = debit_body(shop, 10 * TL), debit_body(person, 10 * TL)
    da, db_ = await debited(pool, handler, a), await debited(pool, handler, b)
    async with pool.acquire() as conn, conn.transaction():
        outcomes = await handler.batch(
            conn,
            [
                command("SettleWithdrawal", settle_body(a, da)),
                command("SettleWithdrawal", settle_body(b, db_)),
            ],
        )
    assert [o["result"] for o in outcomes] == ["settled", "settled"]
    # the business's only: a person's withdrawal tells no merchant
    assert [(e["type"], e["resource_id"]) for e in await events(api_pool)] == [
        ("withdrawal.completed", a["saga_id"])
    ]


async def test_a_personal_withdrawal_writes_no_event(
    pool: asyncpg.Pool, api_pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler, woken: list[int]
) -> None:
    person = await holder(ledger, bucket=34, funded=500 * TL)
    body = debit_body(person, 10 * TL)
    debit = await debited(pool, handler, body)
    await consume(pool, handler, command("SettleWithdrawal", settle_body(body, debit)))
    assert await events(api_pool) == []
    assert woken == []
