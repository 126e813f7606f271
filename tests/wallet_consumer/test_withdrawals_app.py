"""wallet-consumer's withdrawal commands as the process runs them: core's Consumer on the
(test-prefixed) ``hiwallet.withdrawals.wallet``, the responses published by the relay of
wallet.outbox inside the process to the orchestrator's queue, real RabbitMQ and PostgreSQL. A
command published again is answered again from its stored response (no second posting); a
malformed one is dead-lettered with its reason."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from hiwallet.contracts.withdrawals import ORCHESTRATOR_QUEUE, WithdrawalDebited, WithdrawalSettled
from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.consumer import DEAD_REASON_HEADER
from hiwallet.core.ids import new_id
from hiwallet.ledger import Ledger
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.core.spine import collect
from tests.wallet_consumer.conftest import TL, cash, running, until, verified
from tests.wallet_consumer.withdrawals import FEE, bank_clearing, debit_body, holder, settle_body


def published(
    settings: WalletConsumerSettings, kind: str, body: Any, message_id: str | None = None
) -> OutgoingMessage:
    """As the orchestrator's relay publishes a command (CONTRACT-11)."""
    return OutgoingMessage(
        message_id=message_id or new_id(),
        exchange=settings.withdrawals_exchange,
        routing_key=kind,
        type=kind,
        body=body if isinstance(body, bytes) else orjson.dumps(body),
        correlation_id=body.get("saga_id") if isinstance(body, dict) else None,
    )


async def test_commands_are_answered_to_the_orchestrator_through_the_outbox(
    wallet_db: str, pool: asyncpg.Pool, ledger: Ledger, broker: Broker, settings: WalletConsumerSettings
) -> None:
    # the outbox's purge job: every sent row is old enough at once, a round twice a second
    settings = settings.model_copy(update={"outbox_retention_s": 0.0, "outbox_purge_interval_s": 0.5})
    results = settings.withdrawals_queue_prefix + ORCHESTRATOR_QUEUE
    ayla = await holder(ledger, bucket=421, funded=500 * TL)
    debit = debit_body(ayla, 100 * TL)
    async with running(settings, wallet_db) as client:
        ready = await client.get("/ready")
        assert ready.status_code == 200, ready.text

        first = published(settings, "DebitForWithdrawal", debit)
        await broker.publish([first])
        [answer] = await collect(broker, [results], 1, timeout_s=20)
        assert (answer.type, answer.routing_key, answer.correlation_id) == (
            "WithdrawalDebited",
            "WithdrawalDebited",
            debit["saga_id"],
        )
        debited = WithdrawalDebited.model_validate_json(answer.body)
        assert (debited.command_id, debited.amount_minor, debited.fee_minor) == (
            debit["command_id"],
            100 * TL,
            FEE,
        )

        # the stuck saga scan publishes the command again (another message id); the relay
        # publishes the same message twice (the same id): one posting, the response again once
        await broker.publish([published(settings, "DebitForWithdrawal", debit), first])
        [again] = await collect(broker, [results], 1, timeout_s=20)
        assert again.body == answer.body and again.message_id != answer.message_id
        assert await cash(ledger, ayla.wallet) == 500 * TL - 100 * TL - FEE

        await broker.publish(
            [published(settings, "SettleWithdrawal", settle_body(debit, debited.transaction_id))]
        )
        [settled] = await collect(broker, [results], 1, timeout_s=20)
        assert settled.type == "WithdrawalSettled"
        assert (
            WithdrawalSettled.model_validate_json(settled.body).command_id
            == settle_body(debit, "x")["command_id"]
        )
        assert await bank_clearing(ledger, 421) == 0

        # a command that can never be handled: dead-lettered with its reason, nothing answered
        await broker.publish([published(settings, "DebitForWithdrawal", {**debit, "amount_minor": "a lot"})])
        [dead] = await collect(broker, [settings.withdrawals_dead_letter_queue], 1, timeout_s=20)
        assert str(dead.headers[DEAD_REASON_HEADER]).startswith("malformed DebitForWithdrawal (amount_minor")

        metrics = (await client.get("/metrics")).text
        assert 'hiwallet_withdrawal_commands_handled_total{result="debited"} 1.0' in metrics
        assert 'hiwallet_withdrawal_commands_handled_total{result="republished"} 1.0' in metrics
        assert 'hiwallet_withdrawal_commands_handled_total{result="settled"} 1.0' in metrics
        assert "hiwallet_relay_published_total 3.0" in metrics
        assert 'outcome="duplicate"' in metrics

        async def purged() -> bool:
            return await pool.fetchval("SELECT count(*) FROM wallet.outbox") == 0

        await until(purged, 10)  # sent, then purged by the job (an unsent row it may not delete)
    assert await pool.fetchval("SELECT count(*) FROM ledger.transactions WHERE type = 'withdrawal'") == 1
    await verified(ledger)


async def test_an_answer_leaves_at_once_though_the_relays_poll_is_a_minute(
    wallet_db: str, pool: asyncpg.Pool, ledger: Ledger, broker: Broker, settings: WalletConsumerSettings
) -> None:
    """wallet.outbox has no NOTIFY trigger (migration 0014): the handler's commit wakes the
    relay of its own process directly."""
    settings = settings.model_copy(update={"relay_poll_s": 60.0})
    results = settings.withdrawals_queue_prefix + ORCHESTRATOR_QUEUE
    ayla = await holder(ledger, bucket=422, funded=500 * TL)
    async with running(settings, wallet_db) as client:
        assert (await client.get("/ready")).status_code == 200
        await until(lambda: pool.fetchval("SELECT count(*) = 0 FROM wallet.outbox WHERE sent_at IS NULL"))
        for _ in range(2):  # a batch of one, then another once the relay waits on its poll
            await broker.publish([published(settings, "DebitForWithdrawal", debit_body(ayla, 10 * TL))])
            [answer] = await collect(broker, [results], 1, timeout_s=10)
            assert answer.type == "WithdrawalDebited"
    assert not await pool.fetchval(
        "SELECT count(*) FROM pg_trigger"
        " WHERE tgrelid = 'wallet.outbox'::regclass AND tgname = 'outbox_notify'"
    )
