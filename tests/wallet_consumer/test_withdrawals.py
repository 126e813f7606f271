"""The withdrawal saga's wallet commands, called as core's Consumer calls the handler (one
transaction with the message's processed_events row; tests/wallet_consumer/withdrawals.py),
on a fresh wallet database as the application role: each command's effect on the ledger, its
stored response and outbox row; every rejection reason with nothing moved; a command that comes
again (another message id) answered from its stored response without a second posting; the
ledger verified after each."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Any

import asyncpg
import pytest

from hiwallet.contracts.withdrawals import (
    WITHDRAWALS_EXCHANGE,
    WithdrawalDebited,
    WithdrawalDebitRejected,
    WithdrawalRefunded,
    WithdrawalSettled,
)
from hiwallet.core.consumer import Unprocessable
from hiwallet.core.outbox import CORRELATION_ID_KEY
from hiwallet.ledger import Ledger
from hiwallet.wallet_consumer import WithdrawalHandler
from hiwallet.wallet_consumer.withdrawals import ledger_key
from tests.wallet_consumer.conftest import TL, cash, verified
from tests.wallet_consumer.withdrawals import (
    FEE,
    LIMITS,
    Holder,
    bank_clearing,
    command,
    consume,
    debit_body,
    holder,
    nostro,
    outbox,
    refund_body,
    revenue,
    settle_body,
    withdrawal_used,
)


@pytest.fixture
def handler(consumer_ledger: Ledger) -> WithdrawalHandler:
    return WithdrawalHandler(consumer_ledger, exchange=WITHDRAWALS_EXCHANGE, limits=LIMITS)


async def stored(pool: asyncpg.Pool, command_id: str) -> asyncpg.Record | None:
    return await pool.fetchrow(
        "SELECT command_type, saga_id, response_type, response FROM wallet.processed_messages"
        " WHERE command_id = $1",
        command_id,
    )


async def debited(pool: asyncpg.Pool, handler: WithdrawalHandler, body: dict[str, Any]) -> str:
    done = await consume(pool, handler, command("DebitForWithdrawal", body))
    assert done is not None and done["result"] == "debited", done
    return str(done["transaction_id"])


async def test_a_debit_moves_amount_and_fee_and_answers_withdrawal_debited(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    ayla = await holder(ledger, bucket=421, funded=500 * TL)
    body = debit_body(ayla, 100 * TL)

    done = await consume(pool, handler, command("DebitForWithdrawal", body))

    assert done is not None and done["result"] == "debited"
    # wallet −(amount+fee), the bank's clearing in the wallet's bucket +amount, revenue +fee
    assert await cash(ledger, ayla.wallet) == 500 * TL - 100 * TL - FEE
    assert await bank_clearing(ledger, 421) == 100 * TL
    assert await revenue(ledger) == FEE
    tx = await ledger.transaction(done["transaction_id"])
    assert (tx.type, tx.actor, tx.ref) == (
        "withdrawal",
        f"customer:{ayla.subject}",
        f"withdrawal:{body['saga_id']}",
    )
    assert tx.id == f"0421:{ledger_key('withdrawal', body['saga_id'])}"
    # the response stored under the command id, and in the outbox for the orchestrator
    expected = WithdrawalDebited(
        command_id=body["command_id"],
        saga_id=body["saga_id"],
        transaction_id=tx.id,
        amount_minor=100 * TL,
        fee_minor=FEE,
        currency="TRY",
    ).model_dump(mode="json")
    row = await stored(pool, body["command_id"])
    assert row is not None
    assert (row["command_type"], row["response_type"], row["response"]) == (
        "DebitForWithdrawal",
        "WithdrawalDebited",
        expected,
    )
    [sent] = await outbox(pool)
    assert (sent["exchange"], sent["routing_key"], sent["message_type"]) == (
        WITHDRAWALS_EXCHANGE,
        "WithdrawalDebited",
        "WithdrawalDebited",
    )
    assert sent["body"] == expected
    assert sent["headers"][CORRELATION_ID_KEY] == body["saga_id"]
    # counted against the verified tier's monthly withdrawal limit
    assert await withdrawal_used(pool, ayla) == 100 * TL
    await verified(ledger)


async def test_a_command_that_comes_again_is_answered_from_its_stored_response(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    """The stuck saga scan publishes the command again: the same command id, another message
    id. No second posting, no second count; the stored response is published again (a new
    message id, the same body). A redelivery of the same message is a repeat: nothing."""
    ayla = await holder(ledger, bucket=7, funded=500 * TL)
    body = debit_body(ayla, 100 * TL)
    first_message = command("DebitForWithdrawal", body)
    first = await consume(pool, handler, first_message)
    assert first is not None
    lines_before = await pool.fetchval("SELECT count(*) FROM ledger.lines")

    again = await consume(pool, handler, command("DebitForWithdrawal", body))
    assert again is not None
    assert again["result"] == "republished"
    assert again["transaction_id"] == first["transaction_id"]
    assert await consume(pool, handler, first_message) is None  # a redelivery

    assert await pool.fetchval("SELECT count(*) FROM ledger.lines") == lines_before
    assert await cash(ledger, ayla.wallet) == 500 * TL - 100 * TL - FEE
    assert await withdrawal_used(pool, ayla) == 100 * TL
    one, two = await outbox(pool)
    assert one["message_id"] != two["message_id"]
    assert one["body"] == two["body"] and one["message_type"] == two["message_type"] == "WithdrawalDebited"
    assert await pool.fetchval("SELECT count(*) FROM wallet.processed_messages") == 1
    await verified(ledger)


async def test_the_same_command_twice_at_once_is_debited_once(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    """Two deliveries of one command under two message ids, handled at the same moment (the
    scan re-published it while the first was in hand): the command's lock makes the second
    wait, then find the first's response."""
    ayla = await holder(ledger, bucket=8, funded=500 * TL)
    body = debit_body(ayla, 100 * TL)
    results = await asyncio.gather(
        *(consume(pool, handler, command("DebitForWithdrawal", body)) for _ in range(2))
    )
    assert sorted(r["result"] for r in results if r is not None) == ["debited", "republished"]
    assert await cash(ledger, ayla.wallet) == 500 * TL - 100 * TL - FEE
    assert await withdrawal_used(pool, ayla) == 100 * TL
    assert len(await outbox(pool)) == 2
    await verified(ledger)


async def nothing_moved(pool: asyncpg.Pool, ledger: Ledger, who: Holder, funded: int) -> None:
    assert await cash(ledger, who.wallet) == funded
    assert await bank_clearing(ledger) == 0
    assert await revenue(ledger) == 0
    assert await withdrawal_used(pool, who) == 0
    assert await pool.fetchval("SELECT count(*) FROM wallet.withdrawal_counts") == 0
    assert await pool.fetchval("SELECT count(*) FROM ledger.transactions WHERE type = 'withdrawal'") == 0


async def rejected(pool: asyncpg.Pool, handler: WithdrawalHandler, body: dict[str, Any]) -> dict[str, Any]:
    done = await consume(pool, handler, command("DebitForWithdrawal", body))
    assert done is not None and done["result"] == "rejected", done
    row = await stored(pool, body["command_id"])
    assert row is not None and row["response_type"] == "WithdrawalDebitRejected"
    [sent] = await outbox(pool)
    assert sent["message_type"] == "WithdrawalDebitRejected" and sent["body"] == row["response"]
    WithdrawalDebitRejected.model_validate(row["response"])
    assert row["response"]["command_id"] == body["command_id"]
    return dict(row["response"])


@pytest.mark.parametrize(
    "case",
    [
        "stranger",
        "unknown-wallet",
        "ledger-only-wallet",
        "unknown-tier",
        "unverified-tier",
        "over-the-limit",
        "currency",
        "insufficient-funds",
        "invalid",
    ],
)
async def test_every_rejection_reason_moves_nothing(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler, case: str
) -> None:
    funded = 300 * TL
    tier = {"unknown-tier": "unknown", "unverified-tier": "unverified"}.get(case, "verified")
    subject = "ayla\x07" if case == "invalid" else None  # a subject the ledger refuses as an actor
    who = await holder(ledger, bucket=33, funded=funded, tier=tier, subject=subject)
    body = debit_body(who, 100 * TL)
    reason = {
        "stranger": "membership",
        "unknown-wallet": "membership",
        "ledger-only-wallet": "membership",
        "unknown-tier": "tier",
        "unverified-tier": "tier",
        "over-the-limit": "limit",
        "currency": "currency",
        "insufficient-funds": "insufficient_funds",
        "invalid": "invalid",
    }[case]
    if case == "stranger":
        body = debit_body(who, 100 * TL, subject="someone-else")
    elif case == "unknown-wallet":
        body = debit_body(who, 100 * TL, wallet="0033:w:no-such-wallet")
    elif case == "ledger-only-wallet":
        # a wallet the ledger opened, without wallet-api's record (so without members)
        bare = (await ledger.open_wallet("bare", bucket=33)).wallet_id
        await ledger.topup("fund-bare", bare, funded, provider="stripe", actor="test", ref="funding")
        body = debit_body(who, 100 * TL, wallet=bare)
    elif case == "over-the-limit":
        body = debit_body(who, LIMITS.verified_minor + 1)
        await ledger.topup(
            "more", who.wallet, 2 * LIMITS.verified_minor, provider="stripe", actor="t", ref="r"
        )
        funded += 2 * LIMITS.verified_minor
    elif case == "currency":
        body = debit_body(who, 100 * TL, currency="EUR")
    elif case == "insufficient-funds":
        body = debit_body(who, funded - FEE + 1)

    answer = await rejected(pool, handler, body)

    assert answer["reason"] == reason
    if reason == "membership":
        assert answer["detail"] == ""  # nothing said about a wallet the requester may not see
    await nothing_moved(pool, ledger, who, funded)
    # asked again: the same rejection, still nothing moved
    again = await consume(pool, handler, command("DebitForWithdrawal", body))
    assert again is not None and again["result"] == "republished" and again["reason"] == reason
    await nothing_moved(pool, ledger, who, funded)
    await verified(ledger)


async def test_the_monthly_limit_counts_the_months_withdrawals(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger
) -> None:
    month = date(2026, 12, 1)
    handler = WithdrawalHandler(consumer_ledger, exchange="x", limits=LIMITS, this_month=lambda: month)
    ayla = await holder(ledger, bucket=12, funded=3_000 * TL)
    await debited(pool, handler, debit_body(ayla, 600 * TL))
    await debited(pool, handler, debit_body(ayla, 400 * TL))  # exactly at the limit: allowed
    over = await consume(pool, handler, command("DebitForWithdrawal", debit_body(ayla, 1)))
    assert over is not None and over["reason"] == "limit"
    assert await withdrawal_used(pool, ayla) == 1_000 * TL
    month = date(2027, 1, 1)  # a new month, a new total
    await debited(pool, handler, debit_body(ayla, 1))
    assert await cash(ledger, ayla.wallet) == 3_000 * TL - 1_000 * TL - 1 - 3 * FEE
    await verified(ledger)


async def test_a_contracted_account_has_its_own_limit_and_a_business_none(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    big = LIMITS.verified_minor * 2
    contracted = await holder(ledger, bucket=14, funded=3 * big, tier="contracted")
    await debited(pool, handler, debit_body(contracted, big))
    business = await holder(ledger, bucket=15, funded=3 * LIMITS.contracted_minor, kind="business")
    await debited(pool, handler, debit_body(business, 2 * LIMITS.contracted_minor))
    assert await withdrawal_used(pool, business) == 0
    assert await withdrawal_used(pool, contracted) == big
    await verified(ledger)


async def test_settle_clears_the_wallets_bucket_into_nostro(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    ayla = await holder(ledger, bucket=421, funded=500 * TL)
    body = debit_body(ayla, 100 * TL)
    debit_id = await debited(pool, handler, body)
    before = await nostro(ledger)

    settle = settle_body(body, debit_id)
    done = await consume(pool, handler, command("SettleWithdrawal", settle))

    assert done is not None and done["result"] == "settled"
    assert await bank_clearing(ledger, 421) == 0
    assert await nostro(ledger) == before + 100 * TL
    tx = await ledger.transaction(done["transaction_id"])
    assert tx.type == "settlement_withdrawal" and tx.id.startswith("0421:")
    assert {leg.account: leg.amount for leg in tx.legs} == {
        "0421:sys:clearing:bank:TRY": -100 * TL,
        "0000:sys:nostro:TRY": 100 * TL,
    }
    expected = WithdrawalSettled(
        command_id=settle["command_id"], saga_id=body["saga_id"], transaction_id=tx.id
    ).model_dump(mode="json")
    assert (await outbox(pool))[-1]["body"] == expected
    # again: the stored response, no second settlement
    again = await consume(pool, handler, command("SettleWithdrawal", settle))
    assert again is not None and again["result"] == "republished"
    assert await nostro(ledger) == before + 100 * TL
    assert [r["body"] for r in await outbox(pool)][-2:] == [expected, expected]
    # a settled withdrawal is not refunded
    with pytest.raises(Unprocessable, match="settled"):
        await consume(pool, handler, command("RefundWithdrawal", refund_body(body, debit_id)))
    await verified(ledger)


async def test_refund_negates_all_three_legs_and_gives_the_limit_back(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    ayla = await holder(ledger, bucket=77, funded=500 * TL)
    body = debit_body(ayla, 100 * TL)
    debit_id = await debited(pool, handler, body)
    assert await withdrawal_used(pool, ayla) == 100 * TL

    refund = refund_body(body, debit_id, actor="staff:deniz")
    done = await consume(pool, handler, command("RefundWithdrawal", refund))

    assert done is not None and done["result"] == "refunded"
    assert await cash(ledger, ayla.wallet) == 500 * TL
    assert await bank_clearing(ledger) == 0
    assert await revenue(ledger) == 0
    tx = await ledger.transaction(done["transaction_id"])
    assert (tx.type, tx.refund_of, tx.actor) == ("refund", debit_id, "staff:deniz")
    assert len(tx.legs) == 3
    assert await withdrawal_used(pool, ayla) == 0
    assert (await outbox(pool))[-1]["body"] == WithdrawalRefunded(
        command_id=refund["command_id"], saga_id=body["saga_id"], transaction_id=tx.id
    ).model_dump(mode="json")
    # again: the stored response; nothing refunded or given back twice
    again = await consume(pool, handler, command("RefundWithdrawal", refund))
    assert again is not None and again["result"] == "republished" and again["transaction_id"] == tx.id
    assert await cash(ledger, ayla.wallet) == 500 * TL
    assert await withdrawal_used(pool, ayla) == 0
    assert await pool.fetchval("SELECT count(*) FROM ledger.transactions WHERE type = 'refund'") == 1
    # a refunded withdrawal is not settled
    with pytest.raises(Unprocessable, match="refunded"):
        await consume(pool, handler, command("SettleWithdrawal", settle_body(body, debit_id)))
    await verified(ledger)


@pytest.mark.parametrize(
    "change",
    [
        {"amount_minor": 99 * TL},
        {"currency": "EUR"},
        {"debit_transaction_id": "0005:withdrawal:another"},
        {"wallet": "0005:w:elsewhere"},
    ],
)
async def test_a_settlement_that_is_not_the_sagas_debit_is_unprocessable(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler, change: dict[str, Any]
) -> None:
    ayla = await holder(ledger, bucket=5, funded=500 * TL)
    body = debit_body(ayla, 100 * TL)
    debit_id = await debited(pool, handler, body)
    with pytest.raises(Unprocessable):
        await consume(pool, handler, command("SettleWithdrawal", settle_body(body, debit_id, **change)))
    assert await bank_clearing(ledger, 5) == 100 * TL
    assert await pool.fetchval("SELECT count(*) FROM wallet.processed_messages") == 1


async def test_settle_or_refund_of_a_saga_without_a_debit_is_unprocessable(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    ayla = await holder(ledger, bucket=5, funded=500 * TL)
    body = debit_body(ayla, 100 * TL)  # never debited
    with pytest.raises(Unprocessable, match="no debit"):
        await consume(pool, handler, command("SettleWithdrawal", settle_body(body, "0005:withdrawal:x")))
    with pytest.raises(Unprocessable, match="no debit"):
        await consume(pool, handler, command("RefundWithdrawal", refund_body(body, "0005:withdrawal:x")))


@pytest.mark.parametrize(
    ("kind", "body", "why"),
    [
        ("DebitForWithdrawal", {"command_id": "c", "saga_id": "s"}, "malformed DebitForWithdrawal"),
        ("DebitForWithdrawal", {"command_id": "c", "saga_id": "s", "wallet": "w", "amount_minor": -1,
                                "currency": "TRY", "requested_by": {"issuer": "i", "subject": "s"}},
         "amount_minor"),
        ("SettleWithdrawal", [1, 2], "not a JSON object"),
        ("WithdrawalDebited", {"command_id": "c", "saga_id": "s"}, "unknown withdrawal command"),
    ],
)  # fmt: skip
async def test_a_malformed_command_is_unprocessable_and_changes_nothing(
    pool: asyncpg.Pool, handler: WithdrawalHandler, kind: str, body: Any, why: str
) -> None:
    with pytest.raises(Unprocessable, match=why):
        await consume(pool, handler, command(kind, body))
    assert await pool.fetchval("SELECT count(*) FROM wallet.processed_messages") == 0
    assert await outbox(pool) == []


async def test_the_application_role_cannot_rewrite_a_response_or_drop_an_unsent_message(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    ayla = await holder(ledger, bucket=6, funded=500 * TL)
    await debited(pool, handler, debit_body(ayla, 100 * TL))
    for statement in (
        "DELETE FROM wallet.outbox",  # unsent: the trigger refuses (the grant allows sent rows)
        "UPDATE wallet.processed_messages SET response = '{}'::jsonb",
        "DELETE FROM wallet.processed_messages",
        "UPDATE wallet.limit_usage SET used = 0",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await pool.execute(statement)
    assert len(await outbox(pool)) == 1
    assert await withdrawal_used(pool, ayla) == 100 * TL


async def test_two_debits_at_the_limit_at_once_do_not_both_pass(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger
) -> None:
    """Two sagas of one account at the same moment, each within the limit, together over it:
    the limit's lock decides them one after the other; one is debited, one refused."""
    handler = WithdrawalHandler(consumer_ledger, exchange="x", limits=LIMITS)
    ayla = await holder(ledger, bucket=19, funded=3_000 * TL)
    results = await asyncio.gather(
        *(consume(pool, handler, command("DebitForWithdrawal", debit_body(ayla, 600 * TL))) for _ in range(2))
    )
    assert sorted((r["result"], r.get("reason")) for r in results if r is not None) == [
        ("debited", None),
        ("rejected", "limit"),
    ]
    assert await withdrawal_used(pool, ayla) == 600 * TL
    assert await cash(ledger, ayla.wallet) == 3_000 * TL - 600 * TL - FEE
    await verified(ledger)


async def test_a_refund_gives_the_limit_back_to_the_month_of_its_debit(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger
) -> None:
    month = date(2026, 12, 1)
    handler = WithdrawalHandler(consumer_ledger, exchange="x", limits=LIMITS, this_month=lambda: month)
    ayla = await holder(ledger, bucket=23, funded=3_000 * TL)
    body = debit_body(ayla, 700 * TL)
    debit_id = await debited(pool, handler, body)
    month = date(2027, 1, 1)
    await debited(pool, handler, debit_body(ayla, 100 * TL))
    await consume(pool, handler, command("RefundWithdrawal", refund_body(body, debit_id)))
    rows = await pool.fetch(
        "SELECT month, used FROM wallet.limit_usage WHERE account_id = $1 AND kind = 'withdrawal'"
        " ORDER BY month",
        ayla.account,
    )
    assert [(r["month"], r["used"]) for r in rows] == [(date(2026, 12, 1), 0), (date(2027, 1, 1), 100 * TL)]
    # given back once: the function asked again gives nothing
    assert await pool.fetchval("SELECT wallet.return_withdrawal(23::smallint, $1)", body["command_id"]) == 0
    await verified(ledger)


async def test_a_batch_of_commands_is_handled_as_one_after_the_other(
    pool: asyncpg.Pool, ledger: Ledger, handler: WithdrawalHandler
) -> None:
    """core.consumer's batch path (WithdrawalHandler.batch, one transaction): two debits, a
    refusal, and the first debit's command again (another message id), which sees the first's
    stored response and posts nothing."""
    ayla = await holder(ledger, bucket=11, funded=500 * TL)
    bora = await holder(ledger, bucket=12, funded=50 * TL)
    first = debit_body(ayla, 100 * TL)
    batch = [
        command("DebitForWithdrawal", first),
        command("DebitForWithdrawal", debit_body(bora, 10 * TL)),
        command("DebitForWithdrawal", debit_body(bora, 500 * TL)),  # more than bora has
        command("DebitForWithdrawal", first),
    ]
    async with pool.acquire() as conn, conn.transaction():
        outcomes = await handler.batch(conn, batch)
    assert [o["result"] for o in outcomes] == ["debited", "debited", "rejected", "republished"]
    assert outcomes[3]["transaction_id"] == outcomes[0]["transaction_id"]
    assert await cash(ledger, ayla.wallet) == 500 * TL - 100 * TL - FEE
    assert await cash(ledger, bora.wallet) == 50 * TL - 10 * TL - FEE
    assert [m["message_type"] for m in await outbox(pool)] == [
        "WithdrawalDebited",
        "WithdrawalDebited",
        "WithdrawalDebitRejected",
        "WithdrawalDebited",
    ]
    await verified(ledger)
