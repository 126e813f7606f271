"""The saga's state machine: each result moves it on with the command that follows, in the
result's transaction, each change leaving its history row; late and duplicate results change
nothing; the review's release and cancel; the stuck saga scan; and the database's own guards
(a change the diagram does not have, a command the saga does not call for)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import orjson
import pytest

from hiwallet.contracts.withdrawals import (
    RefundWithdrawal,
    Requester,
    SettleWithdrawal,
    StartBankTransfer,
    command_id,
)
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.db import committing
from hiwallet.core.http import ProblemError
from hiwallet.core.logging import REQUEST_ID
from hiwallet.core.settings import get_settings
from hiwallet.withdrawals import errors
from hiwallet.withdrawals.app import database_spec, retention_job
from hiwallet.withdrawals.domain import ALLOWED, State
from hiwallet.withdrawals.metrics import WithdrawalMetrics
from hiwallet.withdrawals.service import WithdrawalService, _lock_key, view
from tests.withdrawals.conftest import IBAN, result, settings_for

REVIEW_ABOVE = 1_000_000


@pytest.fixture
async def service(withdrawal_db: str) -> AsyncIterator[WithdrawalService]:
    settings = settings_for(withdrawal_db, review_above_minor_by_currency={"EUR": 50_000})
    pool = await database_spec(settings).create_pool(get_settings(), max_size=4)
    woken: list[int] = []
    svc = WithdrawalService(pool, settings, WithdrawalMetrics(), on_committed=lambda: woken.append(1))
    svc.woken = woken  # type: ignore[attr-defined]
    yield svc
    await pool.close()


async def start(service: WithdrawalService, amount: int = 10_000, currency: str = "TRY") -> str:
    answer = await service.request(
        Requester(issuer="http://identity.test/realms/hiwallet", subject="u-1"),
        "customer:u-1",
        str(uuid.uuid4()),
        wallet=f"0421:w:{uuid.uuid4()}",
        amount_minor=amount,
        currency=currency,
        destination_iban=IBAN,
    )
    return answer.saga_id


async def deliver(service: WithdrawalService, kind: str, body: dict[str, Any]) -> Any:
    async with service.pool.acquire() as conn, conn.transaction():
        return await service.handle(conn, result(kind, body))


async def saga(service: WithdrawalService, saga_id: str) -> asyncpg.Record:
    row = await service.saga(saga_id)
    assert row is not None
    return row


async def history(service: WithdrawalService, saga_id: str) -> list[tuple[str | None, str, str]]:
    return [(r["from_state"], r["to_state"], r["actor"]) for r in await service.history(saga_id)]


async def commands(service: WithdrawalService, saga_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = await service.pool.fetch(
        "SELECT message_type, body::text AS body FROM withdrawal.outbox"
        " WHERE body ->> 'saga_id' = $1 ORDER BY id",
        saga_id,
    )
    return [(r["message_type"], orjson.loads(r["body"])) for r in rows]


def debited(saga_id: str, amount: int = 10_000, currency: str = "TRY", fee: int = 200) -> dict[str, Any]:
    return {
        "command_id": command_id(saga_id, "debit"),
        "saga_id": saga_id,
        "transaction_id": f"tx-{saga_id}",
        "amount_minor": amount,
        "fee_minor": fee,
        "currency": currency,
    }


def ids(saga_id: str, step: str) -> dict[str, Any]:
    return {"command_id": command_id(saga_id, step), "saga_id": saga_id}  # type: ignore[arg-type]


async def test_the_happy_path_to_completed(service: WithdrawalService) -> None:
    s = await start(service)
    assert await deliver(service, "WithdrawalDebited", debited(s)) == {"state": "bank_transfer_pending"}
    row = await saga(service, s)
    assert (row["state"], row["fee_minor"], row["debit_transaction_id"]) == (
        "bank_transfer_pending",
        200,
        f"tx-{s}",
    )
    sent = await commands(service, s)
    assert [kind for kind, _ in sent] == ["DebitForWithdrawal", "StartBankTransfer"]
    bank = StartBankTransfer.model_validate(sent[1][1])
    assert bank.command_id == command_id(s, "bank")
    assert (bank.amount_minor, bank.currency, bank.destination_iban) == (10_000, "TRY", IBAN)

    out = await deliver(service, "BankTransferSucceeded", {**ids(s, "bank"), "bank_reference": "trf_1"})
    assert out == {"state": "settling"}
    sent = await commands(service, s)
    settle = SettleWithdrawal.model_validate(sent[-1][1])
    assert settle.command_id == command_id(s, "settle")
    assert settle.debit_transaction_id == f"tx-{s}"
    assert (await saga(service, s))["bank_reference"] == "trf_1"

    assert await deliver(service, "WithdrawalSettled", {**ids(s, "settle"), "transaction_id": "tx-s"}) == {
        "state": "completed"
    }
    row = await saga(service, s)
    assert row["state"] == "completed"
    assert row["last_command"] is None  # waits on nobody: the scan leaves it alone
    assert await history(service, s) == [
        (None, "initiated", "customer:u-1"),
        ("initiated", "debited", "system"),
        ("debited", "bank_transfer_pending", "system"),
        ("bank_transfer_pending", "settling", "system"),
        ("settling", "completed", "system"),
    ]
    assert len(await commands(service, s)) == 3


async def test_the_bank_refuses_and_the_debit_is_refunded(service: WithdrawalService) -> None:
    s = await start(service)
    await deliver(service, "WithdrawalDebited", debited(s))
    out = await deliver(
        service,
        "BankTransferFailed",
        {**ids(s, "bank"), "bank_reference": "trf_2", "reason": "account_closed"},
    )
    assert out == {"state": "compensating"}
    refund = RefundWithdrawal.model_validate((await commands(service, s))[-1][1])
    assert refund.command_id == command_id(s, "refund")
    assert (refund.debit_transaction_id, refund.actor) == (f"tx-{s}", "system")
    assert await deliver(service, "WithdrawalRefunded", {**ids(s, "refund"), "transaction_id": "tx-r"}) == {
        "state": "failed"
    }
    row = await saga(service, s)
    assert (row["state"], row["reason"]) == ("failed", "account_closed")
    assert [h[1] for h in await history(service, s)][-2:] == ["compensating", "failed"]


async def test_a_rejected_debit_ends_the_saga_with_its_reason(service: WithdrawalService) -> None:
    s = await start(service)
    body = {**ids(s, "debit"), "reason": "insufficient_funds", "detail": "available 5"}
    assert await deliver(service, "WithdrawalDebitRejected", body) == {"state": "rejected"}
    row = await saga(service, s)
    assert (row["state"], row["reason"], row["reason_detail"]) == (
        "rejected",
        "insufficient_funds",
        "available 5",
    )
    assert [k for k, _ in await commands(service, s)] == ["DebitForWithdrawal"]


async def test_late_and_duplicate_results_change_nothing(service: WithdrawalService) -> None:
    s = await start(service)
    # a bank result before the debit: late for another saga's life, early for this one
    early = await deliver(service, "BankTransferSucceeded", {**ids(s, "bank"), "bank_reference": "trf"})
    assert early == {"ignored": "initiated"}
    await deliver(service, "WithdrawalDebited", debited(s))
    before = await commands(service, s)
    # the same result again, under a new message id (a re-published command's stored response)
    assert await deliver(service, "WithdrawalDebited", debited(s)) == {"ignored": "bank_transfer_pending"}
    assert await deliver(service, "WithdrawalDebitRejected", {**ids(s, "debit"), "reason": "tier"}) == {
        "ignored": "bank_transfer_pending"
    }
    assert await deliver(service, "WithdrawalRefunded", {**ids(s, "refund"), "transaction_id": "x"}) == {
        "ignored": "bank_transfer_pending"
    }
    assert await commands(service, s) == before
    assert (await saga(service, s))["state"] == "bank_transfer_pending"
    assert len(await history(service, s)) == 3
    ignored = service.metrics.ignored.labels("WithdrawalDebited", "bank_transfer_pending")
    assert ignored._value.get() == 1


async def test_what_can_never_be_handled_is_unprocessable_and_changes_nothing(
    service: WithdrawalService,
) -> None:
    s = await start(service)
    cases = [
        ("WithdrawalDebited", {**debited(s), "amount_minor": "lots"}),
        ("WithdrawalDebited", {k: v for k, v in debited(s).items() if k != "transaction_id"}),
        ("WithdrawalDebited", debited(str(uuid.uuid4()))),  # no such saga
        ("WithdrawalDebited", {**debited(s), "command_id": command_id(s, "bank")}),  # answers no command
        ("WithdrawalDebited", debited(s, amount=10_001)),  # another amount than asked
        ("DebitForWithdrawal", debited(s)),  # a command is no result
        ("Nonsense", {}),
    ]
    for kind, body in cases:
        with pytest.raises(Unprocessable):
            await deliver(service, kind, body)
    assert (await saga(service, s))["state"] == "initiated"
    assert len(await commands(service, s)) == 1


async def test_above_the_threshold_it_waits_for_a_review_then_is_released(service: WithdrawalService) -> None:
    s = await start(service, amount=REVIEW_ABOVE + 1)
    assert await deliver(service, "WithdrawalDebited", debited(s, amount=REVIEW_ABOVE + 1)) == {
        "state": "under_review"
    }
    assert [k for k, _ in await commands(service, s)] == ["DebitForWithdrawal"]  # no bank yet
    assert [r["id"] for r in await service.under_review()] == [s]
    service.woken.clear()  # type: ignore[attr-defined]
    released = await service.release(s, "ayse.ops")
    assert released["state"] == "bank_transfer_pending"
    assert service.woken  # type: ignore[attr-defined]
    sent = await commands(service, s)
    assert sent[-1][0] == "StartBankTransfer"
    assert StartBankTransfer.model_validate(sent[-1][1]).command_id == command_id(s, "bank")
    row = await saga(service, s)
    assert row["reviewed_by"] == "ayse.ops"
    assert (await history(service, s))[-1] == ("under_review", "bank_transfer_pending", "ayse.ops")
    with pytest.raises(errors.NotUnderReview):
        await service.release(s, "ayse.ops")
    with pytest.raises(errors.NotUnderReview):
        await service.cancel(s, "ayse.ops")
    with pytest.raises(errors.SagaNotFound):
        await service.release(str(uuid.uuid4()), "ayse.ops")
    assert len(await commands(service, s)) == 2


async def test_exactly_the_threshold_goes_to_the_bank_and_the_threshold_is_per_currency(
    service: WithdrawalService,
) -> None:
    s = await start(service, amount=REVIEW_ABOVE)
    assert await deliver(service, "WithdrawalDebited", debited(s, amount=REVIEW_ABOVE)) == {
        "state": "bank_transfer_pending"
    }
    e = await start(service, amount=50_001, currency="EUR")
    assert await deliver(service, "WithdrawalDebited", debited(e, amount=50_001, currency="EUR")) == {
        "state": "under_review"
    }


async def test_a_cancelled_review_is_refunded_in_the_name_of_its_reviewer(service: WithdrawalService) -> None:
    s = await start(service, amount=REVIEW_ABOVE + 5)
    await deliver(service, "WithdrawalDebited", debited(s, amount=REVIEW_ABOVE + 5))
    cancelled = await service.cancel(s, "operator:ops-desk")
    assert cancelled["state"] == "cancelling"
    refund = RefundWithdrawal.model_validate((await commands(service, s))[-1][1])
    assert refund.actor == "operator:ops-desk"
    assert refund.command_id == command_id(s, "refund")
    assert await deliver(service, "WithdrawalRefunded", {**ids(s, "refund"), "transaction_id": "tx-r"}) == {
        "state": "cancelled"
    }
    assert [h[1:] for h in await history(service, s)][-3:] == [
        ("under_review", "system"),
        ("cancelling", "operator:ops-desk"),
        ("cancelled", "system"),
    ]
    for bad in ("  ", "x" * 201, "a\nb"):
        with pytest.raises(errors.InvalidActor):
            await service.cancel(s, bad)


async def age(service: WithdrawalService, owner: asyncpg.Connection, saga_id: str, seconds: int) -> None:
    await owner.execute(
        "UPDATE withdrawal.sagas SET last_published_at = now() - make_interval(secs => $2) WHERE id = $1",
        saga_id,
        seconds,
    )


async def test_the_stuck_scan_publishes_the_waiting_command_again(
    service: WithdrawalService, owner: asyncpg.Connection
) -> None:
    initiated = await start(service)
    pending = await start(service)
    await deliver(service, "WithdrawalDebited", debited(pending))
    review = await start(service, amount=REVIEW_ABOVE + 1)
    await deliver(service, "WithdrawalDebited", debited(review, amount=REVIEW_ABOVE + 1))
    rejected = await start(service)
    await deliver(service, "WithdrawalDebitRejected", {**ids(rejected, "debit"), "reason": "limit"})
    recent = await start(service)
    for s in (initiated, pending, review, rejected):
        await age(service, owner, s, 3600)
    before = {s: await commands(service, s) for s in (initiated, pending, review, rejected, recent)}
    service.woken.clear()  # type: ignore[attr-defined]

    assert await service.scan_stuck() == 2
    assert service.woken  # type: ignore[attr-defined]
    for s, kind in ((initiated, "DebitForWithdrawal"), (pending, "StartBankTransfer")):
        now = await commands(service, s)
        assert len(now) == len(before[s]) + 1
        assert now[-1] == (kind, before[s][-1][1])  # the same command: the same command_id, body
        row = await saga(service, s)
        assert row["republished"] == 1
    ids_sent = await owner.fetch(
        "SELECT message_id FROM withdrawal.outbox WHERE body ->> 'saga_id' = $1", pending
    )
    assert len({r["message_id"] for r in ids_sent}) == len(ids_sent)  # each publish its own message id
    for s in (review, rejected, recent):
        assert await commands(service, s) == before[s]
    # just published again: not stuck until stuck_after has passed once more
    assert await service.scan_stuck() == 0
    assert service.metrics.republished.labels("initiated")._value.get() == 1
    assert service.metrics.republished.labels("bank_transfer_pending")._value.get() == 1


async def test_the_gauges_count_each_state_and_age_its_oldest_saga(
    service: WithdrawalService, owner: asyncpg.Connection
) -> None:
    """count_by_state, the gauges' figures: how many, and how long the oldest has been in the
    state (hiwallet_withdrawal_oldest_in_state_seconds, the "withdrawal stuck" alert's signal)."""
    old, new = await start(service), await start(service)
    pending = await start(service)
    await deliver(service, "WithdrawalDebited", debited(pending))
    for saga_id, seconds in ((old, 3600), (new, 60)):
        await owner.execute(
            "UPDATE withdrawal.sagas SET state_changed_at = now() - make_interval(secs => $2) WHERE id = $1",
            saga_id,
            seconds,
        )
    counts = await service.count_by_state()
    assert set(counts) == {"initiated", "bank_transfer_pending"}
    assert counts["initiated"][0] == 2 and 3600 <= counts["initiated"][1] < 3700
    assert counts["bank_transfer_pending"][0] == 1 and 0 <= counts["bank_transfer_pending"][1] < 600


async def test_the_stuck_scan_is_bounded_per_round(withdrawal_db: str, owner: asyncpg.Connection) -> None:
    settings = settings_for(withdrawal_db, stuck_scan_batch=3)
    pool = await database_spec(settings).create_pool(get_settings(), max_size=2)
    try:
        service = WithdrawalService(pool, settings, WithdrawalMetrics())
        sagas = [await start(service) for _ in range(5)]
        for s in sagas:
            await age(service, owner, s, 3600)
        assert [await service.scan_stuck() for _ in range(3)] == [3, 2, 0]
    finally:
        await pool.close()


# ---- the database's own guards ----------------------------------------------------------------


def test_the_diagram_in_python_is_the_one_in_the_database_too() -> None:
    migration = (get_settings().migrations_dir / "withdrawal" / "0001_withdrawal.sql").read_text()
    for a, b in ALLOWED:
        assert f"('{a.value}', '{b.value}')" in migration
    assert migration.count("', '") >= len(ALLOWED)
    assert {s.value for s in State} <= set(migration.replace("'", " ").split())


async def test_the_database_refuses_a_change_the_diagram_does_not_have(
    service: WithdrawalService, owner: asyncpg.Connection
) -> None:
    s = await start(service)
    async with service.pool.acquire() as conn:
        for statement in (
            "UPDATE withdrawal.sagas SET state = 'completed' WHERE id = $1",
            "UPDATE withdrawal.sagas SET state = 'bank_transfer_pending' WHERE id = $1",
            "UPDATE withdrawal.sagas SET state = 'nonsense' WHERE id = $1",
        ):
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(statement, s)
        # what was asked is not the app's to change (no grant) ...
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE withdrawal.sagas SET amount_minor = 1 WHERE id = $1", s)
        # ... nor the owner's (the trigger)
    with pytest.raises(asyncpg.CheckViolationError):
        await owner.execute(
            "UPDATE withdrawal.sagas SET destination_iban = 'DE89370400440532013000' WHERE id = $1", s
        )
    with pytest.raises(asyncpg.CheckViolationError):
        await owner.execute("UPDATE withdrawal.sagas SET state = 'failed' WHERE id = $1", s)
    # an allowed change leaves its history row, whoever makes it
    await owner.execute(
        "UPDATE withdrawal.sagas SET state = 'rejected', state_actor = 'dba' WHERE id = $1", s
    )
    assert (await history(service, s))[-1] == ("initiated", "rejected", "dba")


async def test_the_outbox_takes_only_the_command_the_saga_calls_for(service: WithdrawalService) -> None:
    s = await start(service)
    row = await saga(service, s)
    refund = RefundWithdrawal(
        command_id=command_id(s, "refund"),
        saga_id=s,
        wallet=row["wallet"],
        debit_transaction_id="tx",
        actor="x",
    )
    bank = StartBankTransfer(
        command_id="c", saga_id=s, amount_minor=10_000, currency="TRY", destination_iban=IBAN
    )
    debit = orjson.loads(row["last_command"])["body"]
    forged = [
        ("RefundWithdrawal", refund.model_dump(mode="json")),  # not compensating
        ("StartBankTransfer", bank.model_dump(mode="json")),  # not released to the bank
        ("DebitForWithdrawal", {**debit, "amount_minor": 10**9}),  # another amount than asked
        ("DebitForWithdrawal", {**debit, "wallet": "0421:w:someone-else"}),
        ("DebitForWithdrawal", {**debit, "saga_id": str(uuid.uuid4())}),  # no such saga
        ("TopupRecorded", debit),
    ]
    async with service.pool.acquire() as conn:
        for kind, body in forged:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(
                    "INSERT INTO withdrawal.outbox (message_id, exchange, routing_key, message_type, body)"
                    " VALUES ($1, 'hiwallet.withdrawals', $2, $2, $3::text::jsonb)",
                    str(uuid.uuid4()),
                    kind,
                    orjson.dumps(body).decode(),
                )
        # the command its state calls for is taken (what the scan does)
        await conn.execute(
            "INSERT INTO withdrawal.outbox (message_id, exchange, routing_key, message_type, body)"
            " VALUES ($1, 'hiwallet.withdrawals', 'DebitForWithdrawal', 'DebitForWithdrawal',"
            " $2::text::jsonb)",
            str(uuid.uuid4()),
            orjson.dumps(debit).decode(),
        )


async def test_results_of_one_saga_at_once_move_it_once(service: WithdrawalService) -> None:
    """Several consumers (instances) handling copies of one result at the same moment: the
    saga's row lock makes them one after the other; one moves it, the others find it moved."""
    s = await start(service)
    outcomes = await asyncio.gather(*(deliver(service, "WithdrawalDebited", debited(s)) for _ in range(4)))
    assert sorted(o.get("state", "-") for o in outcomes) == ["-", "-", "-", "bank_transfer_pending"]
    assert [k for k, _ in await commands(service, s)] == ["DebitForWithdrawal", "StartBankTransfer"]
    assert len(await history(service, s)) == 3


async def test_the_retention_purges_old_keys_and_sent_commands_only(
    service: WithdrawalService, owner: asyncpg.Connection
) -> None:
    old, fresh = await start(service), await start(service)
    await owner.execute(
        "UPDATE withdrawal.idempotency_keys SET created_at = now() - interval '49 hours' WHERE saga_id = $1",
        old,
    )
    assert await service.purge_idempotency() == 1
    assert await owner.fetchval("SELECT array_agg(saga_id) FROM withdrawal.idempotency_keys") == [fresh]
    await owner.execute("UPDATE withdrawal.outbox SET created_at = now() - interval '49 hours'")
    await owner.execute(
        "UPDATE withdrawal.outbox SET sent_at = now() - interval '49 hours' WHERE body ->> 'saga_id' = $1",
        old,
    )
    job = retention_job(service, service.settings, database_spec(service.settings).dedicated(get_settings()))
    assert await job.run_once()
    remaining = await owner.fetch("SELECT body ->> 'saga_id' AS s FROM withdrawal.outbox")
    assert [r["s"] for r in remaining] == [fresh]  # the unsent one stays, however old


async def test_a_rolled_back_result_is_neither_counted_nor_announced(service: WithdrawalService) -> None:
    """What a result asks for after its commit (the relay's wake-up, the transition's count)
    runs after the commit only, as core's Consumer runs each handler (db.committing): a
    transaction that rolls back leaves no trace."""
    pool = service.pool
    s = await start(service)
    service.woken.clear()  # type: ignore[attr-defined]
    moved = service.metrics.transitions.labels("initiated", "debited")
    with pytest.raises(RuntimeError):
        async with committing(), pool.acquire() as conn, conn.transaction():
            await service.handle(conn, result("WithdrawalDebited", debited(s)))
            raise RuntimeError("the consumer failed to store the outcome")
    assert not service.woken  # type: ignore[attr-defined]
    assert moved._value.get() == 0
    assert (await saga(service, s))["state"] == "initiated"
    async with committing(), pool.acquire() as conn, conn.transaction():
        await service.handle(conn, result("WithdrawalDebited", debited(s)))
    assert service.woken == [1]  # type: ignore[attr-defined]
    assert moved._value.get() == 1


async def test_a_batch_of_results_moves_each_saga_as_one_after_the_other(service: WithdrawalService) -> None:
    """The results consumer's batch path (handle_batch, one transaction): two sagas' results and
    a repeat of one under another message id, in one batch; each moves as it would alone, and
    the repeat sees the first's move and changes nothing."""
    first, second = await start(service), await start(service)
    batch = [
        result("WithdrawalDebited", debited(first)),
        result("WithdrawalDebited", debited(second)),
        result("WithdrawalDebited", debited(first)),  # published again: another message id
        result("BankTransferSucceeded", {**ids(second, "bank"), "bank_reference": "trf_b"}),
    ]
    async with service.pool.acquire() as conn, conn.transaction():
        outcomes = await service.handle_batch(conn, batch)
    assert outcomes == [
        {"state": "bank_transfer_pending"},
        {"state": "bank_transfer_pending"},
        {"ignored": "bank_transfer_pending"},
        {"state": "settling"},
    ]
    assert [kind for kind, _ in await commands(service, first)] == ["DebitForWithdrawal", "StartBankTransfer"]
    assert [kind for kind, _ in await commands(service, second)] == [
        "DebitForWithdrawal",
        "StartBankTransfer",
        "SettleWithdrawal",
    ]
    assert (await saga(service, second))["bank_reference"] == "trf_b"


# ---- the batch path: what N results at a time do ----------------------------------------------


async def batch_of(
    service: WithdrawalService, messages: list[IncomingMessage]
) -> tuple[list[Any], list[str]]:
    """handle_batch in one transaction (as core's Consumer runs it, db.committing around it):
    its outcomes and the statements it sent (not asyncpg's own: the introspection of a type it
    meets the first time on a connection)."""
    statements: list[str] = []

    def logged(record: Any) -> None:
        if not any(mark in record.query for mark in ("typeinfo_tree", "'jit'")):
            statements.append(record.query)

    async with committing(), service.pool.acquire() as conn, conn.transaction():
        conn.add_query_logger(logged)
        try:
            outcomes = await service.handle_batch(conn, messages)
        finally:
            conn.remove_query_logger(logged)
    return outcomes, statements


async def sagas_for_a_batch(service: WithdrawalService) -> list[str]:
    """Seven sagas in the states a batch meets: initiated (plain), initiated above the review
    threshold, initiated (to be refused), initiated (to fail at the bank), initiated (a bank
    result comes early), at the bank, settling."""
    sagas = [await start(service) for _ in range(7)]
    sagas[1] = await start(service, amount=REVIEW_ABOVE + 1)
    await deliver(service, "WithdrawalDebited", debited(sagas[5]))
    await deliver(service, "WithdrawalDebited", debited(sagas[6]))
    await deliver(service, "BankTransferSucceeded", {**ids(sagas[6], "bank"), "bank_reference": "trf-0"})
    return sagas


def results_for(sagas: list[str]) -> list[IncomingMessage]:
    """One batch for sagas_for_a_batch's sagas: several sagas, results of one saga twice and
    three times (each seeing the one before), a duplicate and an early result (ignored)."""
    plain, big, refused, failing, early, at_bank, settling = sagas
    return [
        result("WithdrawalDebited", debited(plain)),
        result("WithdrawalDebited", debited(big, amount=REVIEW_ABOVE + 1)),
        result("WithdrawalDebitRejected", {**ids(refused, "debit"), "reason": "limit", "detail": "d"}),
        result("WithdrawalDebited", debited(failing)),
        result("BankTransferSucceeded", {**ids(early, "bank"), "bank_reference": "trf-early"}),
        result("BankTransferSucceeded", {**ids(at_bank, "bank"), "bank_reference": "trf-1"}),
        result("WithdrawalDebited", debited(plain)),  # published again: another message id
        result("BankTransferFailed", {**ids(failing, "bank"), "bank_reference": "trf-2", "reason": "closed"}),
        result("WithdrawalSettled", {**ids(settling, "settle"), "transaction_id": "tx-s"}),
        result("WithdrawalRefunded", {**ids(failing, "refund"), "transaction_id": "tx-r"}),
    ]


EXPECTED_OUTCOMES = [
    {"state": "bank_transfer_pending"},
    {"state": "under_review"},
    {"state": "rejected"},
    {"state": "bank_transfer_pending"},
    {"ignored": "initiated"},
    {"state": "settling"},
    {"ignored": "bank_transfer_pending"},
    {"state": "compensating"},
    {"state": "completed"},
    {"state": "failed"},
]


async def written(
    service: WithdrawalService, owner: asyncpg.Connection, sagas: list[str], after_outbox_id: int
) -> dict[str, Any]:
    """What the database holds of ``sagas`` with their ids (and what is derived from them) made
    positional, to compare two runs of the same results on two sets of sagas."""
    names: dict[str, str] = {}
    for i, s in enumerate(sagas):
        row = await saga(service, s)
        names[s] = f"S{i}"
        names[row["wallet"]] = f"W{i}"
        for step in ("debit", "bank", "settle", "refund"):
            names[command_id(s, step)] = f"C{i}-{step}"  # type: ignore[arg-type]

    def plain(text: str | None) -> str | None:
        if text is None:
            return None
        for real, name in names.items():
            text = text.replace(real, name)
        return text

    rows = [
        {
            k: plain(str(v)) if v is not None else None
            for k, v in dict(await saga(service, s)).items()
            if k not in ("id", "wallet", "created_at", "state_changed_at", "last_published_at")
        }
        for s in sagas
    ]
    outbox = await owner.fetch(
        "SELECT exchange, routing_key, message_type, headers::text AS headers, body::text AS body"
        " FROM withdrawal.outbox WHERE id > $1 ORDER BY id",
        after_outbox_id,
    )
    return {
        "sagas": rows,
        "history": [await history(service, s) for s in sagas],
        "outbox": [{k: plain(v) for k, v in dict(r).items()} for r in outbox],
    }


async def test_a_batch_writes_what_its_results_one_at_a_time_would(
    service: WithdrawalService, owner: asyncpg.Connection
) -> None:
    """Ten results of seven sagas, in one batch and one at a time (each in its own transaction,
    as the single path takes them): the same outcomes, and the same rows in sagas, history and
    outbox, the outbox in the same order."""
    one_at_a_time = await sagas_for_a_batch(service)
    mark = await owner.fetchval("SELECT max(id) FROM withdrawal.outbox")
    singles = [await deliver(service, m.type, m.body) for m in results_for(one_at_a_time)]
    expected = await written(service, owner, one_at_a_time, mark)

    batched = await sagas_for_a_batch(service)
    mark = await owner.fetchval("SELECT max(id) FROM withdrawal.outbox")
    outcomes, _ = await batch_of(service, results_for(batched))

    assert singles == outcomes == EXPECTED_OUTCOMES
    assert await written(service, owner, batched, mark) == expected
    # and what that is, in the results' order: the first bank transfer, the settlement, the
    # failing saga's bank transfer then its refund; nothing for the review, the refusal, the
    # ignored ones and the ends
    plain, big, refused, failing, early, at_bank, settling = batched
    sent = await owner.fetch(
        "SELECT message_type, body ->> 'saga_id' AS saga FROM withdrawal.outbox WHERE id > $1 ORDER BY id",
        mark,
    )
    assert [(r["message_type"], r["saga"]) for r in sent] == [
        ("StartBankTransfer", plain),
        ("StartBankTransfer", failing),
        ("SettleWithdrawal", at_bank),
        ("RefundWithdrawal", failing),
    ]
    refund = RefundWithdrawal.model_validate((await commands(service, failing))[-1][1])
    assert (refund.debit_transaction_id, refund.actor) == (f"tx-{failing}", "system")
    row = await saga(service, failing)
    assert (row["state"], row["reason"], row["bank_reference"], row["last_command"]) == (
        "failed",
        "closed",
        "trf-2",
        None,
    )
    assert [h[1] for h in await history(service, failing)] == [
        "initiated",
        "debited",
        "bank_transfer_pending",
        "compensating",
        "failed",
    ]
    row = await saga(service, big)
    assert (row["state"], row["fee_minor"], row["last_command"]) == ("under_review", 200, None)
    assert [k for k, _ in await commands(service, big)] == ["DebitForWithdrawal"]
    row = await saga(service, refused)
    assert (row["state"], row["reason"], row["reason_detail"]) == ("rejected", "limit", "d")
    assert (await saga(service, early))["state"] == "initiated"
    assert (await saga(service, settling))["state"] == "completed"
    # counted once committed, as one at a time (each kind twice: both runs)
    assert service.metrics.ignored.labels("BankTransferSucceeded", "initiated")._value.get() == 2
    assert service.metrics.ignored.labels("WithdrawalDebited", "bank_transfer_pending")._value.get() == 2
    assert service.metrics.transitions.labels("compensating", "failed")._value.get() == 2


async def test_a_batch_is_three_statements_whatever_its_size(service: WithdrawalService) -> None:
    """One lock of every saga it names, one statement for every change of state, one for every
    command: for 1 result as for 12 (a saga that moves on after a command of the same batch
    takes one more pair; test_a_batch_writes_what_its_results_one_at_a_time_would)."""
    sagas = [await start(service) for _ in range(12)]
    outcomes, statements = await batch_of(service, [result("WithdrawalDebited", debited(s)) for s in sagas])
    assert outcomes == [{"state": "bank_transfer_pending"}] * 12
    assert len(statements) == 3, [q[:80] for q in statements]
    assert "FOR UPDATE" in statements[0]
    assert "move_sagas" in statements[1]
    assert "outbox" in statements[2]
    service.woken.clear()  # type: ignore[attr-defined]
    one = [result("BankTransferSucceeded", {**ids(sagas[0], "bank"), "bank_reference": "t"})]
    outcomes, statements = await batch_of(service, one)
    assert (outcomes, len(statements)) == ([{"state": "settling"}], 3)
    assert service.woken == [1]  # type: ignore[attr-defined]
    # only ignored results: the lock, nothing written, nobody woken
    service.woken.clear()  # type: ignore[attr-defined]
    outcomes, statements = await batch_of(service, one + one)
    assert (outcomes, len(statements)) == ([{"ignored": "settling"}] * 2, 1)
    assert not service.woken  # type: ignore[attr-defined]


async def test_a_batch_with_a_result_that_can_never_be_handled_raises_and_writes_nothing(
    service: WithdrawalService,
) -> None:
    """Any message of the batch Unprocessable, as it is alone: core's Consumer rolls the batch
    back and takes its messages one at a time (tests/core/test_consumer_batch.py)."""
    s, other = await start(service), await start(service)
    bad = [
        ("WithdrawalDebited", {**debited(s), "amount_minor": "lots"}),
        ("WithdrawalDebited", debited(str(uuid.uuid4()))),  # no such saga
        ("WithdrawalDebited", {**debited(s), "command_id": command_id(s, "bank")}),  # answers no command
        ("WithdrawalDebited", debited(s, amount=10_001)),  # another amount than asked
        ("Nonsense", {}),
    ]
    for kind, body in bad:
        good = result("WithdrawalDebited", debited(other))
        for batch in ([good, result(kind, body)], [result(kind, body), good]):
            with pytest.raises(Unprocessable):
                await batch_of(service, batch)
    for each in (s, other):
        assert (await saga(service, each))["state"] == "initiated"
        assert len(await commands(service, each)) == 1
    assert service.metrics.transitions.labels("initiated", "debited")._value.get() == 0


# ---- the request: one statement ---------------------------------------------------------------


class CountingPool:
    """The service's pool, each statement sent on it counted (asyncpg's type introspection
    left out, as batch_of does)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.statements: list[str] = []

    def _logged(self, record: Any) -> None:
        if not any(mark in record.query for mark in ("typeinfo_tree", "'jit'")):
            self.statements.append(record.query)

    def __getattr__(self, name: str) -> Any:  # the reads (service.saga): not counted
        return getattr(self.pool, name)

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        async with self.pool.acquire() as conn:
            conn.add_query_logger(self._logged)
            try:
                yield conn
            finally:
                conn.remove_query_logger(self._logged)


async def test_a_request_is_one_statement_and_its_key_busy_is_409(
    service: WithdrawalService, owner: asyncpg.Connection
) -> None:
    """POST /v1/withdrawals's work (withdrawal.request): the saga, its first command and the
    answer in one statement, no BEGIN or COMMIT; a replay and a busy key one statement too. A
    key held by a request still running (its try-lock) is 409 at once, and nothing written."""
    requester = Requester(issuer="http://identity.test/realms/hiwallet", subject="u-9")
    key = str(uuid.uuid4())
    ask = {"wallet": "0421:w:one", "amount_minor": 500, "currency": "TRY", "destination_iban": IBAN}
    counting = CountingPool(service.pool)
    service.pool = counting  # type: ignore[assignment]
    scope = "http://identity.test/realms/hiwallet#u-9"
    await owner.execute("SELECT pg_advisory_lock($1)", _lock_key(scope, key))
    try:
        with pytest.raises(ProblemError) as busy:
            await service.request(requester, "customer:u-9", key, **ask)
        assert busy.value.status == 409
        assert len(counting.statements) == 1
        assert await owner.fetchval("SELECT count(*) FROM withdrawal.sagas") == 0
    finally:
        await owner.execute("SELECT pg_advisory_unlock_all()")
    service.woken.clear()  # type: ignore[attr-defined]
    counting.statements.clear()
    token = REQUEST_ID.set("req-post-1")
    try:
        first = await service.request(requester, "customer:u-9", key, **ask)
    finally:
        REQUEST_ID.reset(token)
    assert len(counting.statements) == 1, counting.statements
    assert service.woken == [1]  # type: ignore[attr-defined]  # after its commit
    assert (first.status, first.replayed) == (202, False)
    assert first.body == view(await saga(service, first.saga_id))
    row = await owner.fetchrow("SELECT * FROM withdrawal.outbox")
    assert orjson.loads(row["headers"]) == {
        "x-request-id": "req-post-1",
        "x-hiwallet-correlation-id": first.saga_id,
    }
    assert (row["exchange"], row["routing_key"], row["message_type"]) == (
        "hiwallet.withdrawals",
        "DebitForWithdrawal",
        "DebitForWithdrawal",
    )
    command = orjson.loads((await saga(service, first.saga_id))["last_command"])
    assert orjson.loads(row["body"]) == command["body"]
    service.woken.clear()  # type: ignore[attr-defined]
    again = await service.request(requester, "customer:u-9", key, **ask)
    assert (again.status, again.body, again.replayed) == (202, first.body, True)
    assert not service.woken  # type: ignore[attr-defined]
    with pytest.raises(ProblemError) as other:
        await service.request(requester, "customer:u-9", key, **{**ask, "amount_minor": 501})
    assert other.value.status == 422
    assert len(counting.statements) == 3
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.sagas") == 1
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.outbox") == 1


async def test_the_stored_answer_writes_times_as_python_does(owner: asyncpg.Connection) -> None:
    """withdrawal.iso_utc is datetime.isoformat() of an aware UTC datetime (view): the answer a
    request stores is the very answer it gave, whatever the microseconds (none among them)."""
    times = [
        datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC),
        datetime(2026, 12, 1, 10, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 6, 1, 12, 30, 0, 500, tzinfo=timezone(timedelta(hours=3))),
    ]
    await owner.execute("SET TimeZone = 'Europe/Istanbul'")
    for t in times:
        stored = await owner.fetchval("SELECT withdrawal.iso_utc($1)", t)
        decoded = await owner.fetchval("SELECT $1::timestamptz", t)  # as asyncpg hands a row's
        assert stored == decoded.isoformat(), t
