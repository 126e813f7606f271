"""The withdrawal saga's use cases: a customer's request, what they may read, each result of
the other services moving the saga on, the review (release, cancel), and the stuck saga scan.

Every change of a saga and the command it calls for are written in one transaction (the
command through ``withdrawal.outbox``; the relay publishes it): the saga never waits on a
command that was not sent, nor sends one for a state it did not reach. A result is handled
in the results consumer's transaction (core.consumer: its message id recorded with the
effect). After each commit that wrote outbox rows, ``on_committed`` wakes the relay
(core.outbox.RelayHint; :func:`after_commit`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import orjson
import structlog
from pydantic import BaseModel, ValidationError

from hiwallet.contracts.withdrawals import (
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
from hiwallet.core import idempotency, uow
from hiwallet.core.broker import OutgoingMessage
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.db import after_commit, is_transient
from hiwallet.core.http import ProblemError
from hiwallet.core.http.idempotency import check_idempotency_key, in_progress
from hiwallet.core.ids import new_id
from hiwallet.core.jobs import in_batches
from hiwallet.core.outbox import enqueue, enqueue_many, outbox_row
from hiwallet.core.queries import load_queries
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
# The orchestrator's table of the one idempotency store (core.idempotency): a request's and a
# review's answers, each with the saga it is about.
IDEMPOTENCY = idempotency.IdempotencyStore("withdrawal", answer=("saga_id",))
# Its table, as the one definition makes it (tests/core/test_shared_tables.py holds the migrated
# table to it).
IDEMPOTENCY_TABLE_SQL = idempotency.idempotency_table_sql(
    "withdrawal",
    answer=(
        idempotency.Column(
            "saga_id", "text NOT NULL CONSTRAINT idempotency_keys_saga_fkey REFERENCES withdrawal.sagas (id)"
        ),
    ),
)
# The step of the command each result answers (contracts.withdrawals.command_id).
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
# The columns a change of state may learn (kept when it learns nothing: move_sagas's coalesce).
_LEARNT = ("fee_minor", "debit_transaction_id", "bank_reference", "reason", "reason_detail", "reviewed_by")
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
        **_view_untimed(row),
        "created_at": _iso(row["created_at"]),
        "state_changed_at": _iso(row["state_changed_at"]),
    }


def _view_untimed(row: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`view` but for the two timestamps (what a request's answer is before the insert
    has given the saga its times: withdrawal.request adds them, withdrawal.iso_utc)."""
    return {
        "id": row["id"],
        "state": row["state"],
        "wallet": row["wallet"],
        "amount_minor": row["amount_minor"],
        "fee_minor": row["fee_minor"],
        "currency": row["currency"],
        "destination_iban": masked_iban(row["destination_iban"]),
        "reason": row["reason"],
    }


def _iso(value: datetime) -> str:
    return value.isoformat()


def _lock_key(scope: str, key: str) -> int:
    return idempotency.lock_key("withdrawal", scope, key)


def _command(model: BaseModel) -> dict[str, Any]:
    """A command as the saga keeps it (``last_command``) to publish it again."""
    return {"type": type(model).__name__, "body": model.model_dump(mode="json")}


def _json(value: object) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


@dataclass(frozen=True)
class _Move:
    """A change of state planned for a saga: the columns withdrawal.move_sagas sets (None: the
    step learns nothing of that column, the saga keeps it) and the command ({type, body}) the
    new state waits on (None: it waits on nobody)."""

    saga_id: str
    source: State
    target: State
    actor: str
    fee_minor: int | None = None
    debit_transaction_id: str | None = None
    bank_reference: str | None = None
    reason: str | None = None
    reason_detail: str | None = None
    reviewed_by: str | None = None
    command: dict[str, Any] | None = None


@dataclass
class _Plan:
    """What results (or a review) call for, decided before anything is written: the changes of
    state, in order and in rounds, and what to log and count once they are written (``notes``).

    A round is one withdrawal.move_sagas statement, then one outbox INSERT of its commands. The
    outbox's guard trigger checks a command against its saga's state as the row goes in, so a
    saga that moves again after a command of the current round (two results of one saga in one
    batch, the first calling for a command; hardly ever: a result answers a command published
    after its commit) opens a new round: each command is written while its saga is in the
    state that called for it, as it was when results were written one at a time."""

    rounds: list[list[_Move]] = field(default_factory=lambda: [[]])
    notes: list[Callable[[], None]] = field(default_factory=list)
    # The sagas with a command in the current round.
    waiting: set[str] = field(default_factory=set)

    def add(self, move: _Move) -> None:
        if move.saga_id in self.waiting:
            self.rounds.append([])
            self.waiting.clear()
        self.rounds[-1].append(move)
        if move.command is not None:
            self.waiting.add(move.saga_id)


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

    def _outgoing(self, saga_id: str, command: Mapping[str, Any]) -> OutgoingMessage:
        """A saga's command ({type, body}, as ``last_command`` keeps it) as an outbox message: a
        new message id, the type as its routing key, the saga as its correlation id."""
        kind = str(command["type"])
        return OutgoingMessage(
            message_id=new_id(),
            exchange=self.exchange,
            routing_key=kind,
            type=kind,
            body=orjson.dumps(command["body"]),
            correlation_id=saga_id,
        )

    async def _enqueue(self, conn: asyncpg.Connection, saga_id: str, command: Mapping[str, Any]) -> None:
        await enqueue(conn, self._outgoing(saga_id, command), table=OUTBOX_TABLE)
        after_commit(self.on_committed, once=True)

    async def _in_transaction(
        self, work: Callable[[asyncpg.Connection], Awaitable[T]], *, one_statement: bool = False
    ) -> T:
        """``work`` as one unit of work (core.uow.in_transaction: done again after a deadlock, a
        serialization failure, a connection lost before the commit, or a concurrent first
        answer for the same key); what a retry can cure is 503, a refusal (ProblemError) rolls
        everything back, anything else is a defect (500). ``one_statement``: ``work`` runs a
        single statement, its own transaction in autocommit (no BEGIN and COMMIT round trips);
        :func:`after_commit` still runs once it has returned, i.e. committed."""
        try:
            return await uow.in_transaction(
                self.pool, work, retry_also=idempotency.is_raced, one_statement=one_statement
            )
        except ProblemError:
            raise  # a refusal, whatever it was raised from
        except Exception as exc:
            if isinstance(exc, uow.Unavailable) or is_transient(exc):
                cause = exc.__cause__ if isinstance(exc, uow.Unavailable) else exc
                log.warning("database unavailable", error=type(cause).__name__)
                raise errors.Unavailable(
                    "the database is not available; retry with the same Idempotency-Key",
                    headers={"Retry-After": "1"},
                ) from exc
            raise

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
        and the answer under the caller's key, in one transaction: one statement, one round
        trip (withdrawal.request). 202: nothing has moved yet."""
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
            # One statement (withdrawal.request): the key's try-lock, a stored answer, or the
            # saga, its first command (the outbox row as core.outbox.enqueue writes it) and the
            # answer under the key. What it needs of a new saga is made here before it is known
            # whether there will be one: a replay throws it away.
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
            untimed = _view_untimed(
                {
                    "id": saga_id,
                    "state": State.INITIATED.value,
                    "wallet": wallet,
                    "amount_minor": amount_minor,
                    "fee_minor": None,
                    "currency": currency,
                    "destination_iban": iban,
                    "reason": None,
                }
            )
            row = await conn.fetchrow(
                Q["request"],
                scope,
                key,
                _lock_key(scope, key),
                fingerprint,
                saga_id,
                wallet,
                amount_minor,
                currency,
                iban,
                requester.issuer,
                requester.subject,
                actor[:MAX_ACTOR],
                _json(command),
                _json(untimed),
                *outbox_row(self._outgoing(saga_id, command)),
            )
            if row is None:  # withdrawal.request answers one row; none, as a refused try-lock
                raise in_progress()
            # The store's rule, kept in the function (one round trip): core.idempotency.check.
            if idempotency.check(row["locked"], row["stored_hash"], fingerprint):
                return Answer(int(row["stored_status"]), orjson.loads(row["stored_body"]), replayed=True)
            if row["id"] != saga_id:  # the function answers the saga it inserted
                raise AssertionError("the saga was not created")
            after_commit(self.on_committed, once=True)
            return Answer(202, view(row))

        answer = await self._in_transaction(work, one_statement=True)
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

    async def count_by_state(self) -> dict[str, tuple[int, float]]:
        """Per state present: how many sagas, and the seconds the oldest has been in it."""
        rows = await self._read(Q["count_by_state"])
        return {row["state"]: (int(row["n"]), float(row["oldest_s"])) for row in rows}

    # -- moving a saga (inside a transaction that holds its row) -----------------------------

    async def _write(self, conn: asyncpg.Connection, plan: _Plan) -> list[asyncpg.Record]:
        """What ``plan`` decided, in its order: per round one withdrawal.move_sagas (each move
        an UPDATE of its own: the guard and history triggers fire for each) and one outbox
        INSERT of the round's commands; then its log lines and counts (the counts after the
        commit). The changed rows, in order."""
        written: list[asyncpg.Record] = []
        for moves in plan.rounds:
            if not moves:
                continue
            rows = await conn.fetch(
                Q["move_sagas"],
                [m.saga_id for m in moves],
                [m.target.value for m in moves],
                [m.actor for m in moves],
                [m.fee_minor for m in moves],
                [m.debit_transaction_id for m in moves],
                [m.bank_reference for m in moves],
                [m.reason for m in moves],
                [m.reason_detail for m in moves],
                [m.reviewed_by for m in moves],
                [_json(m.command) for m in moves],
            )
            for i, move in enumerate(moves):
                # the caller holds each row locked: one not changed as planned is a defect
                if i >= len(rows) or rows[i]["id"] != move.saga_id:
                    raise AssertionError(f"saga {move.saga_id} vanished while locked")
                if rows[i]["state"] != move.target.value:
                    raise AssertionError(f"saga {move.saga_id} is {rows[i]['state']}, not {move.target}")
            if len(rows) != len(moves):
                raise AssertionError(f"{len(rows)} sagas changed for {len(moves)} moves")
            commands = [self._outgoing(m.saga_id, m.command) for m in moves if m.command is not None]
            if commands:
                await enqueue_many(conn, commands, table=OUTBOX_TABLE)
                after_commit(self.on_committed, once=True)
            written.extend(rows)
        for note in plan.notes:
            note()
        return written

    def _moved(self, move: _Move) -> None:
        after_commit(self.metrics.transitions.labels(move.source.value, move.target.value).inc)
        log.info(
            "withdrawal moved", saga_id=move.saga_id, from_state=move.source.value, to_state=move.target.value
        )

    def _plan_move(
        self,
        plan: _Plan,
        saga: dict[str, Any],
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
    ) -> None:
        """A change of ``saga`` (the caller's copy of its locked row) planned: checked against
        the diagram, added to ``plan``, and made on the copy as move_sagas will make it on the
        row, so what is decided next about this saga sees it."""
        move = _Move(
            saga_id=str(saga["id"]),
            source=State(saga["state"]),
            target=target,
            actor=actor[:MAX_ACTOR],
            fee_minor=fee_minor,
            debit_transaction_id=debit_transaction_id,
            bank_reference=bank_reference,
            reason=reason,
            reason_detail=reason_detail,
            reviewed_by=reviewed_by,
            command=_command(command) if command is not None else None,
        )
        check_transition(move.source, move.target)
        plan.add(move)
        plan.notes.append(lambda: self._moved(move))
        saga["state"] = move.target.value
        saga["state_actor"] = move.actor
        for column in _LEARNT:
            if getattr(move, column) is not None:
                saga[column] = getattr(move, column)
        saga["last_command"] = _json(move.command)

    async def _move(
        self,
        conn: asyncpg.Connection,
        saga: Mapping[str, Any],
        target: State,
        actor: str,
        *,
        command: BaseModel | None = None,
        reviewed_by: str | None = None,
    ) -> asyncpg.Record:
        """One change of state, now (a review): a plan of one move, written."""
        plan = _Plan()
        self._plan_move(plan, dict(saga), target, actor, command=command, reviewed_by=reviewed_by)
        return (await self._write(conn, plan))[-1]

    def _start_bank_transfer(self, saga: Mapping[str, Any]) -> StartBankTransfer:
        return StartBankTransfer(
            command_id=command_id(saga["id"], "bank"),
            saga_id=saga["id"],
            amount_minor=saga["amount_minor"],
            currency=saga["currency"],
            destination_iban=saga["destination_iban"],
        )

    def _refund(self, saga: Mapping[str, Any], actor: str) -> RefundWithdrawal:
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
        """One result (core.consumer.Handler), in the consumer's transaction: a batch of one
        (:meth:`handle_batch`; one implementation of what a result means)."""
        return (await self.handle_batch(conn, [message]))[0]

    async def handle_batch(
        self, conn: asyncpg.Connection, messages: Sequence[IncomingMessage]
    ) -> list[Mapping[str, Any]]:
        """Results in one transaction (core.consumer.BatchHandler; :meth:`handle` is a batch of
        one): each saga moves on as its result says, with the command that follows; a result
        that does not fit its saga's state (late, or a duplicate under a new message id)
        changes nothing. Decided in delivery order (two results of one saga: the second sees
        the first's move), then written: one statement locks every saga the batch names, one
        writes every change of state, one every command (_Plan: more only when a saga moves on
        after a command of the same batch).

        Raises Unprocessable for a result that can never be handled (not a result, malformed,
        naming no saga or no command of its saga, another amount than its saga's), as a result
        at a time did: the consumer rolls the batch back and takes its messages one at a time,
        so that only the guilty one is dead-lettered."""
        results = [self._parsed(message) for message in messages]
        # Locked in id order (the query's ORDER BY): every batch takes its locks in the same
        # order, so two batches (or a batch and a single result) naming the same sagas wait
        # on each other and never deadlock.
        wanted = list(dict.fromkeys(str(result.saga_id) for result in results))  # type: ignore[attr-defined]
        sagas = {row["id"]: dict(row) for row in await conn.fetch(Q["sagas_for_update"], wanted)}
        plan = _Plan()
        outcomes = [
            self._decide(plan, sagas, message, result)
            for message, result in zip(messages, results, strict=True)
        ]
        await self._write(conn, plan)
        return outcomes

    @staticmethod
    def _parsed(message: IncomingMessage) -> BaseModel:
        model = RESULT_MODELS.get(message.type)
        if model is None:
            raise Unprocessable(f"not a result of the withdrawal saga: type {message.type[:100]!r}")
        try:
            return model.model_validate(message.body)
        except ValidationError as exc:
            raise Unprocessable(f"malformed {message.type}: {exc.error_count()} field(s) invalid") from exc

    def _decide(
        self, plan: _Plan, sagas: Mapping[str, dict[str, Any]], message: IncomingMessage, result: BaseModel
    ) -> Mapping[str, Any]:
        saga_id = str(result.saga_id)  # type: ignore[attr-defined]
        saga = sagas.get(saga_id)
        if saga is None:
            raise Unprocessable(f"{message.type} names no saga")
        if result.command_id != command_id(saga_id, _STEP_OF[message.type]):  # type: ignore[attr-defined]
            raise Unprocessable(f"{message.type} answers no command of its saga")
        state = State(saga["state"])
        moved = self._apply(plan, saga, state, result)
        if moved is None:
            plan.notes.append(lambda: self._ignored(message.type, saga_id, state))
            return {"ignored": state.value}
        return {"state": moved.value}

    def _ignored(self, kind: str, saga_id: str, state: State) -> None:
        after_commit(self.metrics.ignored.labels(kind, state.value).inc)
        log.info("withdrawal result ignored: late or duplicate", saga_id=saga_id, type=kind, state=state)

    def _apply(self, plan: _Plan, saga: dict[str, Any], state: State, result: BaseModel) -> State | None:
        if isinstance(result, WithdrawalDebited):
            if state is not State.INITIATED:
                return None
            if result.amount_minor != saga["amount_minor"] or result.currency != saga["currency"]:
                raise Unprocessable("WithdrawalDebited names another amount or currency than its saga")
            self._plan_move(
                plan,
                saga,
                State.DEBITED,
                SYSTEM,
                fee_minor=result.fee_minor,
                debit_transaction_id=result.transaction_id,
            )
            if saga["amount_minor"] > self.settings.review_above(saga["currency"]):
                self._plan_move(plan, saga, State.UNDER_REVIEW, SYSTEM)
                return State.UNDER_REVIEW
            self._plan_move(
                plan, saga, State.BANK_TRANSFER_PENDING, SYSTEM, command=self._start_bank_transfer(saga)
            )
            return State.BANK_TRANSFER_PENDING
        if isinstance(result, WithdrawalDebitRejected):
            if state is not State.INITIATED:
                return None
            self._plan_move(
                plan, saga, State.REJECTED, SYSTEM, reason=result.reason, reason_detail=result.detail or None
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
            self._plan_move(
                plan, saga, State.SETTLING, SYSTEM, command=settle, bank_reference=result.bank_reference
            )
            return State.SETTLING
        if isinstance(result, BankTransferFailed):
            if state is not State.BANK_TRANSFER_PENDING:
                return None
            self._plan_move(
                plan,
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
            self._plan_move(plan, saga, State.COMPLETED, SYSTEM)
            return State.COMPLETED
        if isinstance(result, WithdrawalRefunded):
            target = {State.COMPENSATING: State.FAILED, State.CANCELLING: State.CANCELLED}.get(state)
            if target is None:
                return None
            self._plan_move(plan, saga, target, SYSTEM)
            return target
        raise Unprocessable(f"no handling for {type(result).__name__}")

    # -- the review (staff: the CLI and the staff endpoints, staff_routes.py) -----------------

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
            stored = await IDEMPOTENCY.begin(conn, (scope, key), _lock_key(scope, key), fingerprint)
            if stored is not None:
                return Answer(int(stored["status"]), orjson.loads(stored["body"]), replayed=True)
            answer = Answer(200, view(await decide(conn, saga_id, actor)))
            await IDEMPOTENCY.put(conn, (scope, key), fingerprint, 200, _json(answer.body), saga_id)
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
            return await IDEMPOTENCY.purge(
                self.pool, self.settings.retention_h * 3600, self.settings.retention_batch
            )

        return await in_batches(
            one_batch, batch=self.settings.retention_batch, max_batches=self.settings.retention_max_batches
        )
