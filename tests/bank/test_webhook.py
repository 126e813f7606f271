"""bank-webhook: ``POST /v1/webhooks/bank``, the bank's signed transfer outcomes. Verified → in
one transaction the inbox row, the outcome recorded once on the transfer, its announcement in
bank.outbox; a repeat stores nothing new; forged, stale, altered or unsigned → 400 problem and
nothing stored; a callback that comes before bank-adapter recorded the transfer is applied when
it does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import orjson
import pytest

from hiwallet.bank.store import BankStore, Recorded
from hiwallet.contracts.withdrawals import BankTransferFailed, BankTransferSucceeded, StartBankTransfer
from hiwallet.core import db
from tests.bank.conftest import (
    BANK_SECRET,
    BANK_SECRET_NEW,
    bank_settings,
    body_of,
    callback_body,
    inbox,
    outbox,
    post_callback,
    signed,
    start_command,
    transfers,
    webhook_client,
)

EXCHANGE = "hwtest.withdrawals"


@pytest.fixture
async def client(bank_db: str) -> AsyncIterator[httpx.AsyncClient]:
    async with webhook_client(bank_settings(bank_db, exchange=EXCHANGE)) as c:
        yield c


async def record_pending(database: str, command: StartBankTransfer, reference: str | None) -> Recorded:
    """What bank-adapter records once the bank took the transfer (as the application role)."""
    pool = await db.create_pool(database, role=db.app_role("bank"), max_size=1)
    try:
        async with pool.acquire() as conn, conn.transaction():
            return await BankStore(pool, EXCHANGE).record_transfer(
                conn,
                command_id=command.command_id,
                saga_id=command.saga_id,
                amount_minor=command.amount_minor,
                currency=command.currency,
                destination_iban=command.destination_iban,
                bank_reference=reference,
            )
    finally:
        await pool.close()


async def test_a_success_is_recorded_once_and_announced_in_one_transaction(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection
) -> None:
    command = start_command()
    assert await record_pending(bank_db, command, "trf_ok1") is Recorded.PENDING
    assert await outbox(owner) == []

    body = callback_body("transfer.succeeded", "trf_ok1", command.command_id)
    answer = await post_callback(client, body, message_id="msg_ok1")
    assert (answer.status_code, answer.content) == (202, b"")

    [row] = await inbox(owner)
    assert (row["webhook_id"], row["type"], row["bank_reference"]) == (
        "msg_ok1",
        "transfer.succeeded",
        "trf_ok1",
    )
    assert row["applied_at"] is not None
    assert orjson.loads(row["body"]) == orjson.loads(body)
    [transfer] = await transfers(owner)
    assert (transfer["state"], transfer["outcome_source"], transfer["reason"]) == (
        "succeeded",
        "callback",
        None,
    )
    [message] = await outbox(owner)
    assert (message["exchange"], message["routing_key"], message["message_type"]) == (
        EXCHANGE,
        "BankTransferSucceeded",
        "BankTransferSucceeded",
    )
    announced = BankTransferSucceeded.model_validate(body_of(message))
    assert announced == BankTransferSucceeded(
        command_id=command.command_id, saga_id=command.saga_id, bank_reference="trf_ok1"
    )
    assert orjson.loads(message["headers"])["x-hiwallet-correlation-id"] == command.saga_id


async def test_a_failure_is_announced_with_the_banks_reason(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection
) -> None:
    command = start_command()
    await record_pending(bank_db, command, "trf_no1")
    body = callback_body("transfer.failed", "trf_no1", command.command_id, reason="account_closed")
    assert (await post_callback(client, body)).status_code == 202
    [transfer] = await transfers(owner)
    assert (transfer["state"], transfer["reason"]) == ("failed", "account_closed")
    [message] = await outbox(owner)
    assert message["message_type"] == "BankTransferFailed"
    assert BankTransferFailed.model_validate(body_of(message)) == BankTransferFailed(
        command_id=command.command_id,
        saga_id=command.saga_id,
        bank_reference="trf_no1",
        reason="account_closed",
    )


async def test_the_same_webhook_again_stores_nothing_new(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection
) -> None:
    command = start_command()
    await record_pending(bank_db, command, "trf_dup")
    body = callback_body("transfer.succeeded", "trf_dup", command.command_id)
    for _ in range(3):
        assert (await post_callback(client, body, message_id="msg_dup")).status_code == 202
    assert len(await inbox(owner)) == 1
    assert len(await outbox(owner)) == 1


async def test_a_second_callback_of_one_transfer_announces_nothing_more(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection
) -> None:
    """Another webhook id for the same outcome (a bank that sends twice), or another outcome
    afterwards: kept in the inbox, the first outcome stands, one announcement."""
    command = start_command()
    await record_pending(bank_db, command, "trf_twice")
    first = callback_body("transfer.succeeded", "trf_twice", command.command_id)
    later = callback_body("transfer.failed", "trf_twice", command.command_id, reason="late")
    assert (await post_callback(client, first)).status_code == 202
    assert (await post_callback(client, first)).status_code == 202
    assert (await post_callback(client, later)).status_code == 202
    assert len(await inbox(owner)) == 3
    [transfer] = await transfers(owner)
    assert transfer["state"] == "succeeded"
    [message] = await outbox(owner)
    assert message["message_type"] == "BankTransferSucceeded"


def _forged(body: bytes) -> dict[str, str]:
    return signed(body, secrets=["whsec_Zm9yZ2VkLXNlY3JldC1mb3ItdGVzdGluZy0wMTIz"])


def _stale(body: bytes) -> dict[str, str]:
    return signed(body, timestamp=int(time.time()) - 3_600)


def _future(body: bytes) -> dict[str, str]:
    return signed(body, timestamp=int(time.time()) + 3_600)


def _unsigned(body: bytes) -> dict[str, str]:
    return {k: v for k, v in signed(body).items() if k != "webhook-signature"}


def _other_id(body: bytes) -> dict[str, str]:
    # a genuine signature replayed under another webhook id
    return {**signed(body), "webhook-id": "msg_replayed"}


@pytest.mark.parametrize(
    ("sign", "reason"),
    [
        (_forged, "signature-mismatch"),
        (_stale, "stale-timestamp"),
        (_future, "future-timestamp"),
        (_unsigned, "unsigned"),
        (_other_id, "signature-mismatch"),
    ],
)
async def test_what_the_bank_did_not_sign_is_refused_and_nothing_stored(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection, sign: object, reason: str
) -> None:
    command = start_command()
    await record_pending(bank_db, command, "trf_forged")
    body = callback_body("transfer.succeeded", "trf_forged", command.command_id)
    answer = await client.post("/v1/webhooks/bank", content=body, headers=sign(body))  # type: ignore[operator]
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert (problem["reason"], problem["status"]) == (reason, 400)
    assert "trf_forged" not in answer.text  # nothing of the body echoed
    assert await inbox(owner) == []
    assert await outbox(owner) == []
    assert (await transfers(owner))[0]["state"] == "pending"


async def test_an_altered_body_is_refused(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection
) -> None:
    command = start_command()
    await record_pending(bank_db, command, "trf_alt")
    genuine = callback_body("transfer.failed", "trf_alt", command.command_id, reason="x")
    headers = signed(genuine)
    altered = genuine.replace(b"transfer.failed", b"transfer.succeeded")
    answer = await client.post("/v1/webhooks/bank", content=altered, headers=headers)
    assert (answer.status_code, answer.json()["reason"]) == (400, "signature-mismatch")
    assert await inbox(owner) == [] and await outbox(owner) == []


async def test_either_secret_verifies_during_a_rotation(bank_db: str, owner: asyncpg.Connection) -> None:
    settings = bank_settings(bank_db, exchange=EXCHANGE, webhook_secrets=[BANK_SECRET, BANK_SECRET_NEW])
    async with webhook_client(settings) as client:
        for n, secret in enumerate((BANK_SECRET, BANK_SECRET_NEW)):
            body = callback_body("transfer.succeeded", f"trf_rotation_{n}")
            assert (await post_callback(client, body, secrets=[secret])).status_code == 202
    assert len(await inbox(owner)) == 2


async def test_a_callback_before_the_transfer_is_recorded_is_applied_then(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection
) -> None:
    """The bank's callback can beat bank-adapter's commit: it is kept (202), applied to nothing;
    bank.record_transfer finds it and records the outcome, announced once, in its transaction."""
    command = start_command()
    body = callback_body("transfer.succeeded", "trf_early", command.command_id)
    assert (await post_callback(client, body)).status_code == 202
    [early] = await inbox(owner)
    assert early["applied_at"] is None
    assert await transfers(owner) == [] and await outbox(owner) == []

    assert await record_pending(bank_db, command, "trf_early") is Recorded.SUCCEEDED
    [transfer] = await transfers(owner)
    assert (transfer["state"], transfer["outcome_source"]) == ("succeeded", "callback")
    [message] = await outbox(owner)
    assert BankTransferSucceeded.model_validate(body_of(message)).command_id == command.command_id
    assert (await inbox(owner))[0]["applied_at"] is not None
    # the same callback again, now that the transfer is known: nothing more
    assert (await post_callback(client, body)).status_code == 202
    assert len(await outbox(owner)) == 1


async def test_a_verified_body_that_is_no_callback_is_422_and_nothing_stored(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    for body in (
        b"[1, 2]",
        b'{"data": {"reference": "trf_x"}}',
        callback_body("transfer.succeeded", None),
        b'{"type": "transfer.succeeded", "data": {"reference": "trf_\\u0000"}}',
    ):
        answer = await post_callback(client, body)
        assert answer.status_code == 422, body
        assert answer.json()["type"].endswith("/webhook-unreadable")
    assert await inbox(owner) == []


async def test_another_type_is_kept_and_announces_nothing(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    body = orjson.dumps({"type": "transfer.created", "data": {"reference": "trf_info"}})
    assert (await post_callback(client, body)).status_code == 202
    [row] = await inbox(owner)
    assert (row["type"], row["applied_at"] is not None) == ("transfer.created", True)
    assert await outbox(owner) == []


async def test_a_body_over_the_limit_is_413_and_nothing_stored(
    bank_db: str, owner: asyncpg.Connection
) -> None:
    async with webhook_client(bank_settings(bank_db, max_body_bytes=1_024)) as client:
        body = orjson.dumps(
            {"type": "transfer.succeeded", "data": {"reference": "trf_big", "pad": "x" * 2_000}}
        )
        answer = await post_callback(client, body)
    assert answer.status_code == 413
    assert await inbox(owner) == []


async def test_the_metrics_count_outcomes(client: httpx.AsyncClient) -> None:
    body = callback_body("transfer.succeeded", "trf_nobody")
    await post_callback(client, body)
    await client.post("/v1/webhooks/bank", content=body, headers=_forged(body))
    text = (await client.get("/metrics")).text
    assert 'hiwallet_bank_webhooks_total{outcome="unknown"} 1.0' in text
    assert 'hiwallet_bank_webhooks_total{outcome="refused"} 1.0' in text


async def test_callbacks_at_once_share_commits_and_each_is_answered_for_itself(
    client: httpx.AsyncClient, bank_db: str, owner: asyncpg.Connection
) -> None:
    """Concurrent callbacks are kept together (bank.receive_callbacks, one commit a batch), each
    as alone: every transfer's outcome recorded and announced once, a replay in the same moment
    stores nothing new, one early callback waits for its transfer, and a body the database
    cannot hold is answered 422 on its own while its neighbours are kept (202)."""
    commands = [start_command() for _ in range(12)]
    for i, command in enumerate(commands[:10]):
        await record_pending(bank_db, command, f"trf_many_{i}")
    bodies = [
        callback_body("transfer.succeeded", f"trf_many_{i}", c.command_id) for i, c in enumerate(commands)
    ]
    # a jsonb cannot hold \u0000: the database refuses that body, not its neighbours
    bad = orjson.dumps(
        {"type": "transfer.succeeded", "data": {"reference": "trf_many_bad", "note": "\u0000"}}
    )
    answers = await asyncio.gather(
        *(post_callback(client, b, message_id=f"msg_many_{i}") for i, b in enumerate(bodies)),
        *(post_callback(client, b, message_id=f"msg_many_{i}") for i, b in enumerate(bodies[:5])),
        post_callback(client, bad, message_id="msg_many_bad"),
    )
    assert [a.status_code for a in answers] == [202] * 17 + [422]
    assert answers[-1].json()["type"].endswith("/webhook-unreadable")
    kept = await inbox(owner)
    assert sorted(r["webhook_id"] for r in kept) == sorted(f"msg_many_{i}" for i in range(12))
    assert {r["bank_reference"]: r["applied_at"] is not None for r in kept} == {
        f"trf_many_{i}": i < 10 for i in range(12)
    }
    assert sorted(t["state"] for t in await transfers(owner)) == ["succeeded"] * 10
    assert len(await outbox(owner)) == 10
    # the two early ones are applied when bank-adapter records their transfers
    for i in (10, 11):
        assert await record_pending(bank_db, commands[i], f"trf_many_{i}") is Recorded.SUCCEEDED
    assert len(await outbox(owner)) == 12
