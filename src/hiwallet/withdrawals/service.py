"""The withdrawal saga's use cases: a customer's request, what they may read, each result of
the other services moving the saga on, the review (release, cancel), and the stuck saga scan.

Every change of a saga and the command it calls for are written in one transaction (the
command through ``withdrawal.outbox``; the relay publishes it): the saga never waits on a
command that was not sent, nor sends one for a state it did not reach. A result is handled
in the results consumer's transaction (core.consumer: its message id recorded with the
effect). After each commit that wrote outbox rows, ``on_committed`` wakes the relay
(core.outbox.RelayHint; :func:`after_commit`)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import orjson
import structlog
from pydantic import BaseModel, ValidationError

from hiwallet.core.broker import OutgoingMessage
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.db import after_commit, committing, is_transient
from hiwallet.core.http import ProblemError
from hiwallet.core.http.idempotency import check_idempotency_key, in_progress, reused
from hiwallet.core.ids import new_id
from hiwallet.core.jobs import in_batches
from hiwallet.core.outbox import enqueue
from hiwallet.core.queries import load_queries
from hiwallet.core.withdrawals import (
    WITHDRAWALS_EXCHANGE,
    BankTransferFailed,
    BankTransferSucceeded,
    DebitForWithdrawal,
    RefundWithdrawal,
    Requester,
    SettleWithdrawal,
    StartBankTransfer,
    Step,
    WithdrawalDebited,
    WithdrawalDebitRejected,
    WithdrawalRefunded,
    WithdrawalSettled,
    command_id,
)
from hiwallet.withdrawals import errors
from hiwallet.withdrawals.domain import (
    WAITING,
    InvalidIban,
    State,
    check_transition,
    masked_iban,
    normalized_iban,
    request_hash,
    review_hash,
)
from hiwallet.withdrawals.metrics import WithdrawalMetrics
from hiwallet.withdrawals.settings import WithdrawalSettings

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")
log = structlog.get_logger(__name__)

OUTBOX_TABLE = "withdrawal.outbox"
OUTBOX_CHANNEL = "withdrawal_outbox"
# Who moves a saga when no person does (a result of another service, the bank's refusal).
SYSTEM = "system"
MAX_ACTOR = 200
# A transaction tried again after a deadlock, a serialization failure or a concurrent first
# answer for the same key (whose retry replays that answer).
RETRY_ATTEMPTS = 3
RETRY_PAUSE_S = 0.005
# The step of the command each result answers (core.withdrawals.command_id).
_STEP_OF: dict[str, Step] = {
    "WithdrawalDebited": "debit",
    "WithdrawalDebitRejected": "debit",
    "BankTransferSucceeded": "bank",
    "BankTransferFailed": "bank",
    "WithdrawalSettled": "settle",
    "WithdrawalRefunded": "refund",
}
RESULT_MODELS: dict[str, type[BaseModel]] = {
    model.__name__: model
    for model in (
        WithdrawalDebited,
        WithdrawalDebitRejected,
        BankTransferSucceeded,
        BankTransferFailed,
        WithdrawalSettled,
        WithdrawalRefunded,
    )
}
T = TypeVar("T")


@dataclass(frozen=True)
class Answer:
    """What POST /v1/withdrawals answers: status and body, first time or replayed."""

    status: int
    body: dict[str, Any]
    replayed: bool = False

    @property
    def saga_id(self) -> str:
        return str(self.body["id"])


def view(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the API shows of a saga: the IBAN masked, the reason of a refusal or a failure,
    nothing of the other services' internals (transaction ids, the bank's reference)."""
    return {
        "id": row["id"],
        "state": row["state"],
        "wallet": row["wallet"],
        "amount_minor": row["amount_minor"],
        "fee_minor": row["fee_minor"],
        "currency": row["currency"],
        "destination_iban": masked_iban(row["destination_iban"]),
        "reason": row["reason"],
        "created_at": _iso(row["created_at"]),
        "state_changed_at": _iso(row["state_changed_at"]),
    }


def _iso(value: datetime) -> str:
    return value.isoformat()


def _lock_key(scope: str, key: str) -> int:
    digest = hashlib.sha256(f"withdrawal\x1f{scope}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _command(model: BaseModel) -> dict[str, Any]:
    """A command as the saga keeps it (``last_command``) to publish it again."""
    return {"type": type(model).__name__, "body": model.model_dump(mode="json")}


def _json(value: object) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _is_busy_or_raced(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.UniqueViolationError):
        return bool(exc.constraint_name == "idempotency_keys_pkey")
    return isinstance(exc, asyncpg.DeadlockDetectedError | asyncpg.SerializationError)


def staff_actor(actor: str) -> str:
    """Who decided a review, as the history and the reversal entry record them."""
    actor = actor.strip()
    if not 1 <= len(actor) <= MAX_ACTOR or not actor.isprintable():
        raise errors.InvalidActor(f"the actor must be 1 to {MAX_ACTOR} printable characters", field="actor")
    return actor


class WithdrawalService:
    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: WithdrawalSettings,
        metrics: WithdrawalMetrics,
        *,
        on_committed: Callable[[], None] | None = None,
        exchange: str = WITHDRAWALS_EXCHANGE,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.metrics = metrics
        self.on_committed = on_committed or (lambda: None)
        self.exchange = exchange
        self.currencies = frozenset(settings.currencies)

    # -- the outbox -----------------------------------------------------------------------------

    async def _enqueue(self, conn: asyncpg.Connection, saga_id: str, command: Mapping[str, Any]) -> None:
        kind = str(command["type"])
        await enqueue(
            conn,
            OutgoingMessage(
                message_id=new_id(),
                exchange=self.exchange,
                routing_key=kind,
                type=kind,
                body=orjson.dumps(command["body"]),
                correlation_id=saga_id,
            ),
            table=OUTBOX_TABLE,
        )
        after_commit(self.on_committed, once=True)

    async def _in_transaction(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``work`` in one transaction, tried again after a deadlock, a serialization failure
        or a concurrent first answer for the same key; what a retry can cure is 503, a refusal
        (ProblemError) rolls everything back, anything else is a defect (500)."""
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                async with committing(), self.pool.acquire() as conn, conn.transaction():
                    return await work(conn)
            except ProblemError:
                raise
            except Exception as exc:
                if attempt < RETRY_ATTEMPTS and _is_busy_or_raced(exc):
                    await asyncio.sleep(RETRY_PAUSE_S * attempt)
                    continue
                if is_transient(exc) or _is_busy_or_raced(exc):
                    log.warning("database unavailable", error=type(exc).__name__)
                    raise errors.Unavailable(
                        "the database is not available; retry with the same Idempotency-Key",
                        headers={"Retry-After": "1"},
                    ) from exc
                raise
        raise AssertionError("unreachable")

    # -- the customer's request ---------------------------------------------------------------

    async def request(
        self,
        requester: Requester,
        actor: str,
        key: str | None,
        *,
        wallet: str,
        amount_minor: int,
        currency: str,
        destination_iban: str,
    ) -> Answer:
        """POST /v1/withdrawals: the saga (initiated), its first command (DebitForWithdrawal)
        and the answer under the caller's key, in one transaction. 202: nothing has moved yet."""
        key = check_idempotency_key(key)
        if currency not in self.currencies:
            raise errors.UnsupportedCurrency(
                f"withdrawals are in {', '.join(sorted(self.currencies))}",
                field="currency",
                supported=sorted(self.currencies),
            )
        try:
            iban = normalized_iban(destination_iban)
        except InvalidIban as exc:
            raise errors.InvalidIban(
                "the IBAN's checksum, length or country format is wrong", field="destination_iban"
            ) from exc
        scope = f"{requester.issuer}#{requester.subject}"
        fingerprint = request_hash(wallet, amount_minor, currency, iban)

        async def work(conn: asyncpg.Connection) -> Answer:
            begun = await conn.fetchrow(Q["idempotency_begin"], scope, key, _lock_key(scope, key))
            if begun is None or not begun["locked"]:
                raise in_progress()
            if begun["request_hash"] is not None:
                if bytes(begun["request_hash"]) != fingerprint:
                    raise reused()
                return Answer(int(begun["status"]), orjson.loads(begun["body"]), replayed=True)
            saga_id = new_id()
            debit = DebitForWithdrawal(
                command_id=command_id(saga_id, "debit"),
                saga_id=saga_id,
                wallet=wallet,
                amount_minor=amount_minor,
                currency=currency,
                requested_by=requester,
            )
            command = _command(debit)
            row = await conn.fetchrow(
                Q["create_saga"],
                saga_id,
                wallet,
                amount_minor,
                currency,
                iban,
                requester.issuer,
                requester.subject,
                actor[:MAX_ACTOR],
                _json(command),
            )
            if row is None:  # INSERT ... RETURNING answers its row
                raise AssertionError("the saga was not created")
            await self._enqueue(conn, saga_id, command)
            answer = Answer(202, view(row))
            await conn.execute(
                Q["idempotency_put"], scope, key, fingerprint, 202, _json(answer.body), saga_id
            )
            return answer

        answer = await self._in_transaction(work)
        if answer.replayed:
            self.metrics.requested.labels("replayed").inc()
        else:
            self.metrics.requested.labels("created").inc()
            self.metrics.transitions.labels("", State.INITIATED.value).inc()
            log.info(
                "withdrawal requested",
                saga_id=answer.saga_id,
                amount_minor=amount_minor,
                currency=currency,
                destination_iban=masked_iban(iban),
            )
        return answer

    # -- reading ------------------------------------------------------------------------------

    async def _read(self, query: str, *args: object) -> list[asyncpg.Record]:
        try:
            return list(await self.pool.fetch(query, *args))
        except Exception as exc:
            if is_transient(exc):
                raise errors.Unavailable("the database is not available; retry") from exc
            raise

    async def saga(self, saga_id: str) -> asyncpg.Record | None:
        rows = await self._read(Q["saga"], saga_id)
        return rows[0] if rows else None

    async def of_wallet(
        self, wallet: str, cursor: str | None, limit: int
    ) -> tuple[list[asyncpg.Record], str | None]:
        """A page of the wallet's withdrawals, newest first, and the cursor of the next page."""
        rows = await self._read(Q["list_by_wallet"], wallet, cursor, limit + 1)
        page = rows[:limit]
        return page, (page[-1]["id"] if len(rows) > limit else None)

    async def under_review(self, limit: int = 100) -> list[asyncpg.Record]:
        return await self._read(Q["under_review"], limit)

    async def under_review_page(
        self, cursor: str | None, limit: int
    ) -> tuple[list[asyncpg.Record], str | None]:
        """A page of the withdrawals waiting for a review, oldest first, and the next cursor."""
        rows = await self._read(Q["under_review_after"], cursor, limit + 1)
        page = rows[:limit]
        return page, (page[-1]["id"] if len(rows) > limit else None)

    async def history(self, saga_id: str) -> list[asyncpg.Record]:
        return await self._read(Q["history"], saga_id)

    async def count_by_state(self) -> dict[str, int]:
        return {row["state"]: int(row["n"]) for row in await self._read(Q["count_by_state"])}

    # -- moving a saga (inside a transaction that holds its row) -----------------------------

    async def _move(
        self,
        conn: asyncpg.Connection,
        saga: asyncpg.Record,
        target: State,
        actor: str,
        *,
        command: BaseModel | None = None,
        fee_minor: int | None = None,
        debit_transaction_id: str | None = None,
        bank_reference: str | None = None,
        reason: str | None = None,
        reason_detail: str | None = None,
        reviewed_by: str | None = None,
    ) -> asyncpg.Record:
        current = State(saga["state"])
        check_transition(current, target)
        stored = _command(command) if command is not None else None
        row = await conn.fetchrow(
            Q["move"],
            saga["id"],
            target.value,
            actor[:MAX_ACTOR],
            fee_minor,
            debit_transaction_id,
            bank_reference,
            reason,
            reason_detail,
            reviewed_by,
            _json(stored),
        )
        if row is None:
            raise AssertionError(f"saga {saga['id']} vanished while locked")
        if stored is not None:
            await self._enqueue(conn, str(saga["id"]), stored)
        after_commit(self.metrics.transitions.labels(current.value, target.value).inc)
        log.info("withdrawal moved", saga_id=saga["id"], from_state=current.value, to_state=target.value)
        return row

    def _start_bank_transfer(self, saga: asyncpg.Record) -> StartBankTransfer:
        return StartBankTransfer(
            command_id=command_id(saga["id"], "bank"),
            saga_id=saga["id"],
            amount_minor=saga["amount_minor"],
            currency=saga["currency"],
            destination_iban=saga["destination_iban"],
        )

    def _refund(self, saga: asyncpg.Record, actor: str) -> RefundWithdrawal:
        if saga["debit_transaction_id"] is None:
            raise AssertionError(f"saga {saga['id']} was debited without a transaction id")
        return RefundWithdrawal(
            command_id=command_id(saga["id"], "refund"),
            saga_id=saga["id"],
            wallet=saga["wallet"],
            debit_transaction_id=saga["debit_transaction_id"],
            actor=actor[:MAX_ACTOR],
        )

    # -- the results consumer -----------------------------------------------------------------

    async def handle(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        """One result (core.consumer.Handler), in the consumer's transaction: the saga moves on
        as the result says, with the command that follows; a result that does not fit the
        saga's state (late, or a duplicate under a new message id) changes nothing."""
        model = RESULT_MODELS.get(message.type)
        if model is None:
            raise Unprocessable(f"not a result of the withdrawal saga: type {message.type[:100]!r}")
        try:
            result = model.model_validate(message.body)
        except ValidationError as exc:
            raise Unprocessable(f"malformed {message.type}: {exc.error_count()} field(s) invalid") from exc
        saga_id = str(result.saga_id)  # type: ignore[attr-defined]
        saga = await conn.fetchrow(Q["saga_for_update"], saga_id)
        if saga is None:
            raise Unprocessable(f"{message.type} names no saga")
        if result.command_id != command_id(saga_id, _STEP_OF[message.type]):  # type: ignore[attr-defined]
            raise Unprocessable(f"{message.type} answers no command of its saga")
        state = State(saga["state"])
        moved = await self._apply(conn, saga, state, result)
        if moved is None:
            after_commit(self.metrics.ignored.labels(message.type, state.value).inc)
            log.info(
                "withdrawal result ignored: late or duplicate",
                saga_id=saga_id,
                type=message.type,
                state=state,
            )
            return {"ignored": state.value}
        return {"state": moved.value}

    async def handle_batch(
        self, conn: asyncpg.Connection, messages: Sequence[IncomingMessage]
    ) -> list[Mapping[str, Any]]:
        """Results in one transaction (core.consumer.BatchHandler), each as :meth:`handle`
        takes it, in delivery order (two results of one saga: the second sees the first)."""
        return [await self.handle(conn, message) for message in messages]

    async def _apply(
        self, conn: asyncpg.Connection, saga: asyncpg.Record, state: State, result: BaseModel
    ) -> State | None:
        if isinstance(result, WithdrawalDebited):
            if state is not State.INITIATED:
                return None
            if result.amount_minor != saga["amount_minor"] or result.currency != saga["currency"]:
                raise Unprocessable("WithdrawalDebited names another amount or currency than its saga")
            debited = await self._move(
                conn,
                saga,
                State.DEBITED,
                SYSTEM,
                fee_minor=result.fee_minor,
                debit_transaction_id=result.transaction_id,
            )
            if saga["amount_minor"] > self.settings.review_above(saga["currency"]):
                await self._move(conn, debited, State.UNDER_REVIEW, SYSTEM)
                return State.UNDER_REVIEW
            await self._move(
                conn, debited, State.BANK_TRANSFER_PENDING, SYSTEM, command=self._start_bank_transfer(debited)
            )
            return State.BANK_TRANSFER_PENDING
        if isinstance(result, WithdrawalDebitRejected):
            if state is not State.INITIATED:
                return None
            await self._move(
                conn, saga, State.REJECTED, SYSTEM, reason=result.reason, reason_detail=result.detail or None
            )
            return State.REJECTED
        if isinstance(result, BankTransferSucceeded):
            if state is not State.BANK_TRANSFER_PENDING:
                return None
            settle = SettleWithdrawal(
                command_id=command_id(saga["id"], "settle"),
                saga_id=saga["id"],
                wallet=saga["wallet"],
                amount_minor=saga["amount_minor"],
                currency=saga["currency"],
                debit_transaction_id=saga["debit_transaction_id"],
            )
            await self._move(
                conn, saga, State.SETTLING, SYSTEM, command=settle, bank_reference=result.bank_reference
            )
            return State.SETTLING
        if isinstance(result, BankTransferFailed):
            if state is not State.BANK_TRANSFER_PENDING:
                return None
            await self._move(
                conn,
                saga,
                State.COMPENSATING,
                SYSTEM,
                command=self._refund(saga, SYSTEM),
                bank_reference=result.bank_reference,
                reason=result.reason or "bank_refused",
            )
            return State.COMPENSATING
        if isinstance(result, WithdrawalSettled):
            if state is not State.SETTLING:
                return None
            await self._move(conn, saga, State.COMPLETED, SYSTEM)
            return State.COMPLETED
        if isinstance(result, WithdrawalRefunded):
            target = {State.COMPENSATING: State.FAILED, State.CANCELLING: State.CANCELLED}.get(state)
            if target is None:
                return None
            await self._move(conn, saga, target, SYSTEM)
            return target
        raise Unprocessable(f"no handling for {type(result).__name__}")

    # -- the review (staff: the CLI now, the staff endpoint of issue 13 later) ----------------

    async def release(self, saga_id: str, actor: str) -> dict[str, Any]:
        """A reviewed withdrawal goes to the bank: under_review → bank_transfer_pending, with
        StartBankTransfer. Raises SagaNotFound, NotUnderReview, InvalidActor."""
        actor = staff_actor(actor)
        return await self._reviewed(
            lambda conn: self._release(conn, saga_id, actor), saga_id, actor, "released"
        )

    async def cancel(self, saga_id: str, actor: str) -> dict[str, Any]:
        """A reviewed withdrawal is refused: under_review → cancelling, with RefundWithdrawal
        whose actor is the member of staff (the reversal entry names them). Raises
        SagaNotFound, NotUnderReview, InvalidActor."""
        actor = staff_actor(actor)
        return await self._reviewed(
            lambda conn: self._cancel(conn, saga_id, actor), saga_id, actor, "cancelled"
        )

    async def review(self, decision: str, saga_id: str, actor: str, scope: str, key: str | None) -> Answer:
        """The review over HTTP (POST /v1/staff/withdrawals/{id}/release|cancel): the decision
        as :meth:`release` / :meth:`cancel` make it, and its answer stored under the employee's
        ``Idempotency-Key`` in the same transaction, so a retry is answered the first answer
        (not 409 not-under-review) and the same key for another decision is 422."""
        key = check_idempotency_key(key)
        actor = staff_actor(actor)
        decide = {"release": self._release, "cancel": self._cancel}[decision]
        fingerprint = review_hash(decision, saga_id)

        async def work(conn: asyncpg.Connection) -> Answer:
            begun = await conn.fetchrow(Q["idempotency_begin"], scope, key, _lock_key(scope, key))
            if begun is None or not begun["locked"]:
                raise in_progress()
            if begun["request_hash"] is not None:
                if bytes(begun["request_hash"]) != fingerprint:
                    raise reused()
                return Answer(int(begun["status"]), orjson.loads(begun["body"]), replayed=True)
            answer = Answer(200, view(await decide(conn, saga_id, actor)))
            await conn.execute(
                Q["idempotency_put"], scope, key, fingerprint, 200, _json(answer.body), saga_id
            )
            return answer

        answer = await self._in_transaction(work)
        if not answer.replayed:
            log.info("withdrawal reviewed", saga_id=saga_id, decision=decision, actor=actor)
        return answer

    async def _release(self, conn: asyncpg.Connection, saga_id: str, actor: str) -> asyncpg.Record:
        saga = await self._under_review(conn, saga_id)
        return await self._move(
            conn,
            saga,
            State.BANK_TRANSFER_PENDING,
            actor,
            command=self._start_bank_transfer(saga),
            reviewed_by=actor,
        )

    async def _cancel(self, conn: asyncpg.Connection, saga_id: str, actor: str) -> asyncpg.Record:
        saga = await self._under_review(conn, saga_id)
        return await self._move(
            conn, saga, State.CANCELLING, actor, command=self._refund(saga, actor), reviewed_by=actor
        )

    async def _under_review(self, conn: asyncpg.Connection, saga_id: str) -> asyncpg.Record:
        saga = await conn.fetchrow(Q["saga_for_update"], saga_id)
        if saga is None:
            raise errors.SagaNotFound(f"no withdrawal {saga_id}")
        if saga["state"] != State.UNDER_REVIEW.value:
            raise errors.NotUnderReview(f"the withdrawal is {saga['state']}", state=saga["state"])
        return saga

    async def _reviewed(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[asyncpg.Record]],
        saga_id: str,
        actor: str,
        what: str,
    ) -> dict[str, Any]:
        row = await self._in_transaction(work)
        log.info("withdrawal reviewed", saga_id=saga_id, decision=what, actor=actor)
        return view(row)

    # -- the stuck saga scan ------------------------------------------------------------------

    async def scan_stuck(self) -> int:
        """One round: each saga that waited on its command's answer longer than stuck_after
        gets that command again (the same command_id, a new message id: the handler finds its
        stored response and publishes it again), at most stuck_scan_batch. Under review and
        terminal sagas wait on nobody's answer and are left alone."""
        counts: dict[str, int] = {}

        async def work(conn: asyncpg.Connection) -> int:
            counts.clear()
            rows = await conn.fetch(
                Q["stuck"], float(self.settings.stuck_after_s), self.settings.stuck_scan_batch
            )
            for saga in rows:
                command = saga["last_command"]
                if State(saga["state"]) not in WAITING or command is None:
                    continue  # the query asks for waiting states; one without a command is a defect
                await self._enqueue(conn, str(saga["id"]), orjson.loads(command))
                await conn.execute(Q["republished"], saga["id"])
                counts[saga["state"]] = counts.get(saga["state"], 0) + 1
            return sum(counts.values())

        done = await self._in_transaction(work)
        for state, n in counts.items():
            self.metrics.republished.labels(state).inc(n)
        if done:
            log.warning("stuck withdrawals: commands published again", count=done, by_state=counts)
        return done

    # -- housekeeping ---------------------------------------------------------------------------

    async def purge_idempotency(self) -> int:
        async def one_batch() -> int:
            status = await self.pool.execute(
                Q["idempotency_purge"], self.settings.retention_h, self.settings.retention_batch
            )
            return int(status.rsplit(" ", 1)[-1])

        return await in_batches(
            one_batch, batch=self.settings.retention_batch, max_batches=self.settings.retention_max_batches
        )
