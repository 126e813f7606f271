"""The orchestrator as it runs: the app with its background (the topology declared, the results
consumer, the relay, the jobs) on real RabbitMQ, in a virtual host of this module's own (the
saga's queue and exchange names are fixed). What wallet-consumer and the bank would answer is
published into ``hiwallet.withdrawals`` by the test; what the orchestrator sends is read from
the commands' queues."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aio_pika.abc
import httpx
import orjson
import pytest

from hiwallet.contracts.withdrawals import (
    BANK_QUEUE,
    WALLET_QUEUE,
    WITHDRAWALS_DEAD_LETTER_QUEUE,
    WITHDRAWALS_EXCHANGE,
    command_id,
)
from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.ids import new_id
from hiwallet.core.settings import Settings
from hiwallet.withdrawals.app import create_withdrawal_app
from tests import pgtemplate
from tests.e2e import harness
from tests.waiting import until
from tests.withdrawals.conftest import WalletApiStub, customer, key_header, settings_for, verifier, withdrawal

WAIT_S = 15.0


@pytest.fixture(scope="module")
async def vhost() -> AsyncIterator[str]:
    name = f"hwt-withdrawal-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(name)
    yield name
    await harness.delete_vhost(name)


@pytest.fixture
async def bus(vhost: str) -> AsyncIterator[Broker]:
    b = Broker(harness.amqp_url(vhost), client_name="hiwallet-tests", confirm_timeout_s=5.0)
    await b.start()
    yield b
    await b.close()


@pytest.fixture
async def service_client(withdrawal_db: str, vhost: str) -> AsyncIterator[httpx.AsyncClient]:
    core = Settings(amqp_url=harness.amqp_url(vhost))
    # The relay's poll is far beyond the waits below: what is sent in time was sent because each
    # commit woke the relay (RelayHint; the consumer's through db.committing and after_commit).
    settings = settings_for(withdrawal_db, relay_poll_s=60.0, metrics_interval_s=0.2)
    wallet_api = WalletApiStub().client()
    app = create_withdrawal_app(settings, core_settings=core, verifier=verifier(), wallet_api=wallet_api)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://withdrawal") as client:
            client.app = app  # type: ignore[attr-defined]
            await app.state.consumer.wait_started()
            yield client
    await wallet_api.aclose()


async def next_message(
    bus: Broker,
    queue: str,
    wanted: Callable[[aio_pika.abc.AbstractIncomingMessage], bool],
    timeout_s: float = WAIT_S,
) -> aio_pika.abc.AbstractIncomingMessage:
    """The first message of ``queue`` that ``wanted`` accepts; every message read is acked (what
    an earlier test left is dropped on the way)."""
    found: asyncio.Future[aio_pika.abc.AbstractIncomingMessage] = asyncio.get_running_loop().create_future()
    channel = await bus.consumer_channel(prefetch=50)

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.ack()
        if not found.done() and wanted(message):
            found.set_result(message)

    try:
        q = await channel.get_queue(queue, ensure=False)
        await q.consume(on_message, no_ack=False)
        return await asyncio.wait_for(found, timeout_s)
    finally:
        with contextlib.suppress(Exception):
            await channel.close()


def of_saga(saga_id: str, kind: str) -> Callable[[aio_pika.abc.AbstractIncomingMessage], bool]:
    return lambda m: m.correlation_id == saga_id and m.type == kind


async def answer(bus: Broker, kind: str, body: dict[str, Any], message_id: str | None = None) -> str:
    message_id = message_id or new_id()
    await bus.publish(
        [
            OutgoingMessage(
                message_id=message_id,
                exchange=WITHDRAWALS_EXCHANGE,
                routing_key=kind,
                type=kind,
                body=orjson.dumps(body),
                correlation_id=str(body.get("saga_id", "")),
            )
        ]
    )
    return message_id


async def state_of(client: httpx.AsyncClient, saga_id: str, state: str) -> None:
    service = client.app.state.service  # type: ignore[attr-defined]

    async def reached() -> bool:
        row = await service.saga(saga_id)
        return row is not None and row["state"] == state

    await until(reached, WAIT_S, f"saga {saga_id} {state}", interval_s=0.05)


async def processed(withdrawal_db: str, count: int, timeout_s: float = 10.0) -> None:
    """Until ``count`` results are recorded in withdrawal.processed_events (a redelivery of the
    same message id adds none)."""
    async with pgtemplate.owner_connection(withdrawal_db) as owner:

        async def recorded() -> bool:
            got: int = await owner.fetchval("SELECT count(*) FROM withdrawal.processed_events")
            return got >= count

        await until(recorded, timeout_s, f"{count} results processed", interval_s=0.05)


async def test_a_withdrawal_goes_round_the_queues_to_completed(
    service_client: httpx.AsyncClient, bus: Broker, withdrawal_db: str
) -> None:
    client = service_client
    ready = await client.get("/ready")
    assert ready.status_code == 200, ready.text
    c = customer()
    created = await client.post(
        "/v1/withdrawals", json=withdrawal(c, amount=5_000), headers={**c.auth, **key_header()}
    )
    assert created.status_code == 202
    s = created.json()["id"]

    debit = await next_message(bus, WALLET_QUEUE, of_saga(s, "DebitForWithdrawal"))
    body = orjson.loads(debit.body)
    assert body["command_id"] == command_id(s, "debit")
    assert debit.routing_key == "DebitForWithdrawal"

    debited = {
        "command_id": command_id(s, "debit"),
        "saga_id": s,
        "transaction_id": "tx-1",
        "amount_minor": 5_000,
        "fee_minor": 200,
        "currency": "TRY",
    }
    first = await answer(bus, "WithdrawalDebited", debited)
    bank = await next_message(bus, BANK_QUEUE, of_saga(s, "StartBankTransfer"))
    assert orjson.loads(bank.body)["command_id"] == command_id(s, "bank")
    await state_of(client, s, "bank_transfer_pending")
    # the same message again (a redelivery) and the same result under a new id (a stored
    # response published again): neither sends the bank a second command
    await answer(bus, "WithdrawalDebited", debited, message_id=first)
    await answer(bus, "WithdrawalDebited", debited)
    # Handled before the bank's result is sent: the consumer handles several results at once
    # (consumer_concurrency), and this test asserts what the copy met (bank_transfer_pending).
    await processed(withdrawal_db, 2)  # the first and the copy (the redelivery adds no row)

    await answer(
        bus,
        "BankTransferSucceeded",
        {"command_id": command_id(s, "bank"), "saga_id": s, "bank_reference": "trf_9"},
    )
    settle = await next_message(bus, WALLET_QUEUE, of_saga(s, "SettleWithdrawal"))
    assert orjson.loads(settle.body)["debit_transaction_id"] == "tx-1"
    await answer(
        bus,
        "WithdrawalSettled",
        {"command_id": command_id(s, "settle"), "saga_id": s, "transaction_id": "tx-2"},
    )
    await state_of(client, s, "completed")

    got = await client.get(f"/v1/withdrawals/{s}", headers=c.auth)
    assert got.json()["state"] == "completed"
    async with pgtemplate.owner_connection(withdrawal_db) as owner:
        kinds = [
            r["message_type"]
            for r in await owner.fetch("SELECT message_type FROM withdrawal.outbox ORDER BY id")
        ]
        assert kinds == ["DebitForWithdrawal", "StartBankTransfer", "SettleWithdrawal"]
        assert await owner.fetchval("SELECT count(*) FROM withdrawal.outbox WHERE sent_at IS NULL") == 0
        outcomes = await owner.fetch(
            "SELECT outcome::text AS o FROM withdrawal.processed_events ORDER BY processed_at"
        )
        assert len(outcomes) == 4  # the redelivered message was not handled twice
        assert orjson.loads(outcomes[1]["o"]) == {"ignored": "bank_transfer_pending"}
    metrics = (await client.get("/metrics")).text
    assert 'hiwallet_withdrawal_transitions_total{from_state="settling",to_state="completed"} 1.0' in metrics
    ignored = (
        'hiwallet_withdrawal_results_ignored_total{state="bank_transfer_pending",type="WithdrawalDebited"}'
    )
    assert f"{ignored} 1.0" in metrics
    assert "hiwallet_relay_published_total 3.0" in metrics


async def test_a_result_that_can_never_be_handled_is_dead_lettered(
    service_client: httpx.AsyncClient, bus: Broker
) -> None:
    message_id = await answer(bus, "WithdrawalDebited", {"saga_id": str(uuid.uuid4()), "nonsense": True})
    dead = await next_message(bus, WITHDRAWALS_DEAD_LETTER_QUEUE, lambda m: m.message_id == message_id)
    assert "malformed WithdrawalDebited" in str(dead.headers["x-hiwallet-dead-reason"])


async def test_the_stuck_scan_publishes_the_command_again_with_the_same_command_id(
    service_client: httpx.AsyncClient, bus: Broker, withdrawal_db: str
) -> None:
    client = service_client
    c = customer()
    s = (await client.post("/v1/withdrawals", json=withdrawal(c), headers={**c.auth, **key_header()})).json()[
        "id"
    ]
    first = await next_message(bus, WALLET_QUEUE, of_saga(s, "DebitForWithdrawal"))
    async with pgtemplate.owner_connection(withdrawal_db) as owner:
        await owner.execute(
            "UPDATE withdrawal.sagas SET last_published_at = now() - interval '1 hour' WHERE id = $1", s
        )
    assert await client.app.state.stuck_scan.run_once()  # type: ignore[attr-defined]
    again = await next_message(bus, WALLET_QUEUE, of_saga(s, "DebitForWithdrawal"))
    assert again.message_id != first.message_id
    assert orjson.loads(again.body) == orjson.loads(first.body)
    metrics = (await client.get("/metrics")).text
    assert 'hiwallet_withdrawal_stuck_republished_total{state="initiated"} 1.0' in metrics
