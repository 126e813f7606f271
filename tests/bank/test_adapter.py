"""bank-adapter: StartBankTransfer from its queue → the bank asked (Idempotency-Key = the command
id) → the transfer recorded pending; a command published again gets the stored outcome announced
again; the bank away pauses the consumer (nothing dead-lettered); the outcomes leave through
the relay to the saga's exchange. Real PostgreSQL and RabbitMQ (the test's own names); the bank
is tests.bank.conftest.StubBank."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import orjson
import pytest
from prometheus_client import CollectorRegistry

from hiwallet.bank.client import BankClient, BankUnavailable
from hiwallet.bank.handler import TransferHandler
from hiwallet.bank.metrics import AdapterMetrics
from hiwallet.bank.store import BankStore
from hiwallet.contracts.withdrawals import BankTransferFailed, BankTransferSucceeded, StartBankTransfer
from hiwallet.core import db
from hiwallet.core.broker import Broker
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.ids import new_id
from tests.bank.conftest import (
    API_KEY,
    IBAN,
    Names,
    StubBank,
    adapter,
    bank_settings,
    body_of,
    callback_body,
    command_message,
    outbox,
    post_callback,
    start_command,
    transfers,
    webhook_client,
)
from tests.core import spine
from tests.waiting import until


async def count(owner: asyncpg.Connection, sql: str, *args: object) -> int:
    value: int = await owner.fetchval(sql, *args)
    return value


# ---- the handler alone (no broker) -------------------------------------------------------------


def incoming(
    command: StartBankTransfer | dict[str, object], message_id: str | None = None
) -> IncomingMessage:
    body = command.model_dump(mode="json") if isinstance(command, StartBankTransfer) else command
    return IncomingMessage(
        message_id=message_id or new_id(),
        type="StartBankTransfer",
        routing_key="StartBankTransfer",
        body=dict(body),
        headers={},
        redelivered=False,
        delivery_count=0,
    )


@pytest.fixture
async def handler(bank_db: str, bank: StubBank) -> AsyncIterator[tuple[TransferHandler, asyncpg.Pool]]:
    pool = await db.create_pool(bank_db, role=db.app_role("bank"), max_size=2)
    client = BankClient.from_settings(bank_settings(bank_db), bank.transport())
    try:
        yield (
            TransferHandler(
                BankStore(pool, "hwtest.withdrawals"), client, AdapterMetrics(CollectorRegistry())
            ),
            pool,
        )
    finally:
        await client.aclose()
        await pool.close()


async def test_a_crash_between_the_banks_answer_and_the_commit_asks_again_with_the_same_key(
    handler: tuple[TransferHandler, asyncpg.Pool], bank: StubBank, owner: asyncpg.Connection
) -> None:
    """The bank is called before the row is written: a transaction that never commits (the
    process killed) leaves no row; the redelivered command asks again under the same key, gets
    the same reference, and one transfer is recorded."""
    handle, pool = handler
    command = start_command()

    class Killed(Exception):
        pass

    with pytest.raises(Killed):
        async with pool.acquire() as conn, conn.transaction():
            await handle(conn, incoming(command))
            raise Killed
    assert await transfers(owner) == []
    async with pool.acquire() as conn, conn.transaction():
        outcome = await handle(conn, incoming(command))
    assert bank.posts == [command.command_id, command.command_id]
    assert len(bank.by_key) == 1
    [reference] = [answer["reference"] for _, answer in bank.by_key.values()]
    assert outcome == {"result": "pending", "bank_reference": reference}
    [row] = await transfers(owner)
    assert (row["command_id"], row["saga_id"], row["state"], row["bank_reference"]) == (
        command.command_id,
        command.saga_id,
        "pending",
        reference,
    )
    assert (row["amount_minor"], row["currency"], row["destination_iban"]) == (150_000, "TRY", IBAN)
    assert await outbox(owner) == []
    assert bank.auth == {f"Bearer {API_KEY}"}


async def test_a_batch_asks_the_bank_once_for_each_new_transfer_then_records_each(
    handler: tuple[TransferHandler, asyncpg.Pool], bank: StubBank, owner: asyncpg.Connection
) -> None:
    """The batch path (TransferHandler.batch, one transaction): the new transfers asked of the
    bank at once, before any is recorded; a command twice in the batch (published again) asked
    once, its second copy answered as the single path answers a command whose transfer is
    pending; a refusal failed and announced; a transfer recorded before only announced again."""
    handle, pool = handler
    refused_iban = "TR320010009999901234567890"
    first, second, earlier = start_command(), start_command(), start_command()
    refused = start_command(iban=refused_iban)
    bank.refused_ibans.add(refused_iban)
    async with pool.acquire() as conn, conn.transaction():  # recorded before the batch
        await handle(conn, incoming(earlier))
    bank.posts.clear()

    class Killed(Exception):
        pass

    batch = [incoming(first), incoming(second), incoming(first), incoming(refused), incoming(earlier)]
    with pytest.raises(Killed):  # killed after the bank's answers, before the commit
        async with pool.acquire() as conn, conn.transaction():
            await handle.batch(conn, batch)
            raise Killed
    assert [r["command_id"] for r in await transfers(owner)] == [earlier.command_id]
    async with pool.acquire() as conn, conn.transaction():
        outcomes = await handle.batch(conn, batch)
    # each new command asked once a try, under its own key: the same answer the second time
    assert sorted(bank.posts) == sorted([first.command_id, second.command_id, refused.command_id] * 2)
    assert [o["result"] for o in outcomes] == ["pending", "pending", "in_progress", "refused", "in_progress"]
    assert outcomes[2]["bank_reference"] == outcomes[0]["bank_reference"]
    rows = {r["command_id"]: r for r in await transfers(owner)}
    assert {k: r["state"] for k, r in rows.items()} == {
        earlier.command_id: "pending",
        first.command_id: "pending",
        second.command_id: "pending",
        refused.command_id: "failed",
    }
    [message] = await outbox(owner)
    assert BankTransferFailed.model_validate(body_of(message)).command_id == refused.command_id


@pytest.mark.parametrize("path", ["single", "batch"])
async def test_the_bank_away_is_transient_and_records_nothing(
    handler: tuple[TransferHandler, asyncpg.Pool], bank: StubBank, owner: asyncpg.Connection, path: str
) -> None:
    handle, pool = handler
    bank.down = True
    with pytest.raises(BankUnavailable):
        async with pool.acquire() as conn, conn.transaction():
            if path == "single":
                await handle(conn, incoming(start_command()))
            else:
                await handle.batch(conn, [incoming(start_command()), incoming(start_command())])
    assert await transfers(owner) == []


async def test_a_malformed_command_is_unprocessable_naming_fields_only(
    handler: tuple[TransferHandler, asyncpg.Pool], bank: StubBank
) -> None:
    handle, pool = handler
    body = start_command().model_dump(mode="json")
    body["destination_iban"] = "not an iban at all"
    del body["amount_minor"]
    with pytest.raises(Unprocessable) as caught:
        async with pool.acquire() as conn, conn.transaction():
            await handle(conn, incoming(body))
    assert caught.value.reason == "malformed StartBankTransfer: amount_minor, destination_iban"
    assert bank.posts == []


async def test_a_transfer_the_bank_refuses_is_failed_and_announced(
    handler: tuple[TransferHandler, asyncpg.Pool], bank: StubBank, owner: asyncpg.Connection
) -> None:
    handle, pool = handler
    bank.refused_ibans.add(IBAN)
    command = start_command()
    async with pool.acquire() as conn, conn.transaction():
        assert (await handle(conn, incoming(command)))["result"] == "refused"
    [row] = await transfers(owner)
    assert (row["state"], row["outcome_source"], row["bank_reference"]) == ("failed", "bank", None)
    [message] = await outbox(owner)
    assert BankTransferFailed.model_validate(body_of(message)) == BankTransferFailed(
        command_id=command.command_id, saga_id=command.saga_id, reason="refused by the bank: invalid_iban"
    )


async def test_an_idempotency_conflict_is_never_taken_for_a_refusal(
    handler: tuple[TransferHandler, asyncpg.Pool], bank: StubBank, owner: asyncpg.Connection
) -> None:
    """The bank knows our key with another body: a transfer may be under way. Not "failed"
    (that would refund money the bank may send): an error, dead-lettered for an operator."""
    handle, pool = handler
    command = start_command()
    bank.by_key[command.command_id] = (b"another body", {"reference": "trf_other"})
    with pytest.raises(Exception) as caught:
        async with pool.acquire() as conn, conn.transaction():
            await handle(conn, incoming(command))
    assert "idempotency_conflict" in str(caught.value)
    assert await transfers(owner) == [] and await outbox(owner) == []


# ---- the process's parts together (consumer, relay, broker) ------------------------------------


async def test_a_command_is_recorded_pending_and_its_callback_announced_once(
    bank_db: str, names: Names, broker: Broker, bank: StubBank, owner: asyncpg.Connection
) -> None:
    settings = bank_settings(bank_db, names)
    command = start_command()
    async with adapter(settings, names, bank), webhook_client(settings) as webhook:
        await broker.publish([command_message(names, command)])
        await until(lambda: count(owner, "SELECT count(*) FROM bank.transfers WHERE state = 'pending'"))
        [row] = await transfers(owner)
        assert bank.posts == [command.command_id]

        callback = callback_body("transfer.succeeded", row["bank_reference"], command.command_id)
        assert (await post_callback(webhook, callback)).status_code == 202
        [message] = await spine.collect(broker, [names.results_queue], 1)
        assert (message.type, message.routing_key, message.correlation_id) == (
            "BankTransferSucceeded",
            "BankTransferSucceeded",
            command.saga_id,
        )
        assert BankTransferSucceeded.model_validate(orjson.loads(message.body)) == BankTransferSucceeded(
            command_id=command.command_id, saga_id=command.saga_id, bank_reference=row["bank_reference"]
        )
        await until(lambda: count(owner, "SELECT count(*) FROM bank.outbox WHERE sent_at IS NOT NULL"))

        # the same command again, under a new message id (the stuck saga scan): the stored
        # outcome announced again, the bank not asked again
        await broker.publish([command_message(names, command)])
        [again] = await spine.collect(broker, [names.results_queue], 1)
        assert again.message_id != message.message_id
        assert orjson.loads(again.body) == orjson.loads(message.body)
        assert bank.posts == [command.command_id]
        assert await spine.collect(broker, [names.results_queue], 1, timeout_s=0.5) == []


async def test_a_command_again_while_its_transfer_is_pending_does_nothing(
    bank_db: str, names: Names, broker: Broker, bank: StubBank, owner: asyncpg.Connection
) -> None:
    settings = bank_settings(bank_db, names)
    command = start_command()
    async with adapter(settings, names, bank) as app:
        await broker.publish([command_message(names, command)])
        await until(lambda: count(owner, "SELECT count(*) FROM bank.processed_events"))
        redelivered = command_message(names, command)
        await broker.publish([redelivered, redelivered])  # and the same message twice
        registry = app.state.metrics_registry
        duplicates = {"queue": names.bank_queue, "outcome": "duplicate"}
        await until(lambda: _at_least(registry, "hiwallet_consumer_messages_total", 1, duplicates))
        assert (
            await count(
                owner,
                "SELECT count(*) FROM bank.processed_events WHERE message_id = $1",
                redelivered.message_id,
            )
            == 1
        )
    assert bank.posts == [command.command_id]
    assert len(await transfers(owner)) == 1
    assert await outbox(owner) == []
    assert registry.get_sample_value("hiwallet_bank_transfer_commands_total", {"result": "in_progress"}) == 1
    assert registry.get_sample_value("hiwallet_consumer_messages_total", duplicates) == 1


async def test_the_bank_away_pauses_the_consumer_and_dead_letters_nothing(
    bank_db: str, names: Names, broker: Broker, bank: StubBank, owner: asyncpg.Connection
) -> None:
    settings = bank_settings(bank_db, names, max_attempts=1)
    bank.down = True
    command = start_command()
    async with adapter(settings, names, bank) as app:
        await broker.publish([command_message(names, command)])
        registry = app.state.metrics_registry
        await until(lambda: _at_least(registry, "hiwallet_bank_unavailable_total", 2))
        assert await transfers(owner) == []
        assert await spine.queue_depth(broker, names.dlq) == 0
        bank.down = False
        await until(lambda: count(owner, "SELECT count(*) FROM bank.transfers WHERE state = 'pending'"))
    assert await spine.queue_depth(broker, names.dlq) == 0
    assert registry.get_sample_value("hiwallet_dead_letters_total", {"reason": "error"}) == 0


async def _at_least(
    registry: CollectorRegistry, name: str, n: float, labels: dict[str, str] | None = None
) -> bool:
    return (registry.get_sample_value(name, labels or {}) or 0) >= n


async def test_a_malformed_command_is_dead_lettered(
    bank_db: str, names: Names, broker: Broker, bank: StubBank, owner: asyncpg.Connection
) -> None:
    settings = bank_settings(bank_db, names, max_attempts=1)
    command = start_command()
    message = command_message(names, command)
    body = orjson.loads(message.body)
    body["currency"] = "lira"
    async with adapter(settings, names, bank):
        await broker.publish([message.__class__(**{**message.__dict__, "body": orjson.dumps(body)})])
        [dead] = await spine.collect(broker, [names.dlq], 1)
    assert dead.headers["x-hiwallet-dead-reason"] == "malformed StartBankTransfer: currency"
    assert bank.posts == []
    assert await transfers(owner) == []


async def test_ready_and_metrics(bank_db: str, names: Names, broker: Broker, bank: StubBank) -> None:
    import httpx

    settings = bank_settings(bank_db, names)
    async with adapter(settings, names, bank) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bank-adapter") as client:
            ready = await client.get("/ready")
            assert (ready.status_code, ready.json()["checks"]) == (
                200,
                {"database": "ok", "broker": "ok", "consumers": "ok", "background": "ok"},
            )
            text = (await client.get("/metrics")).text
    assert "hiwallet_bank_reconciliation_found_total" in text
    assert "hiwallet_outbox_unsent" in text


async def test_what_is_recorded_wakes_the_relay_at_once_not_at_its_poll(
    bank_db: str, names: Names, broker: Broker, bank: StubBank, owner: asyncpg.Connection
) -> None:
    """bank.outbox has no NOTIFY trigger (migration 0003): bank-adapter's own commits wake its
    relay directly, bank-webhook's by one pg_notify after its commit. With the relay's poll at
    a minute, both outcomes still leave within seconds."""
    settings = bank_settings(bank_db, names, relay_poll_s=60.0)
    bank.refused_ibans.add(IBAN)
    refused = start_command()
    accepted = start_command(iban="TR060006100519786457841327")
    async with adapter(settings, names, bank) as app, webhook_client(settings) as webhook:
        # The relay leads (its lock) and its first pass is behind it (so it listens).
        await until(lambda: app.state.relay._worked, 10, "the relay's first pass")
        started = asyncio.get_running_loop().time()
        await broker.publish([command_message(names, refused)])
        [failed] = await spine.collect(broker, [names.results_queue], 1, timeout_s=10)
        assert failed.type == "BankTransferFailed"
        await broker.publish([command_message(names, accepted)])
        await until(lambda: count(owner, "SELECT count(*) FROM bank.transfers WHERE state = 'pending'"))
        [row] = await owner.fetch("SELECT bank_reference FROM bank.transfers WHERE state = 'pending'")
        callback = callback_body("transfer.succeeded", row["bank_reference"], accepted.command_id)
        assert (await post_callback(webhook, callback)).status_code == 202
        [succeeded] = await spine.collect(broker, [names.results_queue], 1, timeout_s=10)
        assert succeeded.type == "BankTransferSucceeded"
        assert asyncio.get_running_loop().time() - started < 10  # far from the minute's poll
        assert webhook.app.state.relay_hint.sent >= 1  # type: ignore[attr-defined]
        assert app.state.relay_hint.sent == 0  # its own relay leads: woken without a NOTIFY
    assert not await owner.fetchval(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'bank.outbox'::regclass AND tgname = 'outbox_notify'"
    )
