"""The bank database: the statements of sql/queries.sql, and the translation of the driver's
errors at this edge (what a retry can cure: :class:`StoreUnavailable`)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import orjson
import structlog

from hiwallet.core import tracing
from hiwallet.core.coalesce import Coalescer, WholeOrEach, whole_or_each
from hiwallet.core.db import after_commit, is_transient, store_error
from hiwallet.core.ids import new_id
from hiwallet.core.queries import load_queries

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")
T = TypeVar("T")
_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
log = structlog.get_logger(__name__)
MAX_CALLBACK_BATCH = 1_000  # as bank.receive_callbacks bounds it
# A batch of callbacks that deadlocked or raced is sent again whole this many times, then each
# callback alone. bank.receive_callbacks takes its locks in one order (as bank.record_transfers
# does), so neither should happen; should one still, the retry cures it, never a 500.
CALLBACK_BATCH_ATTEMPTS = 3
_BUSY = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError, asyncpg.UniqueViolationError)


class StoreUnavailable(Exception):
    """The database did not answer, or answered something a retry can cure (core.db)."""


class Unstorable(Exception):
    """The database refused the content itself (a JSON text jsonb cannot hold, such as a
    \\u0000): no retry changes that."""


# The driver's errors as this store's (core.db.store_error), the cause kept.
_store_error = partial(
    store_error,
    refused=lambda sqlstate: Unstorable(f"the database refused the content: {sqlstate}"),
    unavailable=lambda kind: StoreUnavailable(f"the bank database is unavailable: {kind}"),
)


async def _translated(call: Awaitable[T]) -> T:
    """``call``'s answer; the driver's errors as this store's (:func:`_store_error`)."""
    try:
        return await call
    except _DRIVER_ERRORS as exc:
        error = _store_error(exc)
        if error is exc:
            raise
        raise error from exc


def _log_callbacks_again(attempt: int, exc: Exception) -> None:
    log.info(
        "callback batch deadlocked or raced; again",
        attempt=attempt,
        error=type(exc).__name__,
        sqlstate=getattr(exc, "sqlstate", None),
    )


# How BankStore.receive_callbacks answers its statement's failure (its docstring says what).
_CALLBACK_BATCH = WholeOrEach(
    attempts=CALLBACK_BATCH_ATTEMPTS,
    again=_BUSY,
    shared=lambda exc: isinstance(exc, _DRIVER_ERRORS) and is_transient(exc),
    refused=(asyncpg.PostgresError,),
    own=(Unstorable, StoreUnavailable, asyncpg.PostgresError),
    answer=_store_error,
    on_again=_log_callbacks_again,
)


class Recorded(enum.StrEnum):
    """What bank.record_transfer did (also a metric's label)."""

    PENDING = "pending"  # recorded pending: the outcome is to come
    SUCCEEDED = "succeeded"  # recorded, and a callback that came first applied: announced
    FAILED = "failed"  # recorded failed (the bank refused, or a callback that came first)
    EXISTS = "exists"  # recorded before (a concurrent delivery of the command): nothing changed


class Received(enum.StrEnum):
    """What bank.receive_callback did (also the webhook metric's ``outcome`` label)."""

    DUPLICATE = "duplicate"  # the webhook id was seen before: nothing stored
    RECORDED = "recorded"  # the transfer's outcome recorded and announced
    ALREADY = "already"  # kept; the transfer's outcome was recorded before
    UNKNOWN = "unknown"  # kept; no transfer has its reference yet (applied when one does)
    STORED = "stored"  # kept; not a transfer outcome


class Reconciled(enum.StrEnum):
    RECORDED = "recorded"
    ALREADY = "already"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Transfer:
    command_id: str
    saga_id: str
    amount_minor: int
    currency: str
    destination_iban: str
    state: str
    bank_reference: str | None
    reason: str | None
    requested_at: datetime
    outcome_at: datetime | None
    outcome_source: str | None

    @classmethod
    def of(cls, row: asyncpg.Record) -> Transfer:
        return cls(**dict(row))


@dataclass(frozen=True)
class NewTransfer:
    """A transfer to record (:meth:`BankStore.record_transfers`): the bank accepted it
    (``bank_reference``) or refused the request (``refusal``, the reference None)."""

    command_id: str
    saga_id: str
    amount_minor: int
    currency: str
    destination_iban: str
    bank_reference: str | None
    refusal: str | None = None


@dataclass(frozen=True, slots=True)
class CallbackItem:
    """A verified callback to keep (:meth:`BankStore.receive_callback`)."""

    webhook_id: str
    kind: str
    bank_reference: str | None
    body: str  # JSON text
    reason: str | None


@dataclass(frozen=True)
class StalePending:
    command_id: str
    bank_reference: str
    requested_at: datetime


# bank.outbox and the channel its relay (in bank-adapter) listens on for hints.
OUTBOX_TABLE = "bank.outbox"
OUTBOX_CHANNEL = "bank_outbox"


class BankStore:
    """``exchange``: where the outcomes are announced (settings.exchange: hiwallet.withdrawals).
    The statements that run inside the consumer's transaction take its ``conn``; the others use
    the pool. ``callback_writers`` > 0: concurrent :meth:`receive_callback` calls share one
    statement and one commit (bank.receive_callbacks, up to ``callback_max_batch`` callbacks;
    core/coalesce.py); 0: each callback alone (bank.receive_callback)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        exchange: str,
        *,
        message_id: Callable[[], str] = new_id,
        on_committed: Callable[[], None] | None = None,
        callback_writers: int = 0,
        callback_max_batch: int = 64,
        callback_spare_after_s: float | None = None,
    ) -> None:
        self.pool = pool
        self.exchange = exchange
        self._message_id = message_id
        # After a commit that may have written bank.outbox: wakes the relay (a RelayHint's
        # committed; bank.outbox has no NOTIFY trigger, migrations/bank/0003).
        self.on_committed = on_committed or (lambda: None)
        # Two callbacks of one webhook id or one transfer may share a batch: bank.receive_callbacks
        # keeps them one after the other in one transaction, as if sequential (no conflict_key).
        self._callbacks: Coalescer[CallbackItem, Received] | None = (
            Coalescer(
                self.receive_callbacks,
                writers=callback_writers,
                max_batch=max(1, min(callback_max_batch, MAX_CALLBACK_BATCH)),
                spare_after_s=callback_spare_after_s,
            )
            if callback_writers > 0
            else None
        )

    async def transfer(self, conn: asyncpg.Connection | asyncpg.Pool, command_id: str) -> Transfer | None:
        row = await _translated(conn.fetchrow(Q["transfer"], command_id))
        return None if row is None else Transfer.of(row)

    async def transfers(self, conn: asyncpg.Connection, command_ids: Sequence[str]) -> dict[str, Transfer]:
        """The transfers of these commands that exist, by command id (one statement)."""
        rows = await _translated(conn.fetch(Q["transfers"], list(command_ids)))
        return {row["command_id"]: Transfer.of(row) for row in rows}

    async def record_transfer(
        self,
        conn: asyncpg.Connection,
        *,
        command_id: str,
        saga_id: str,
        amount_minor: int,
        currency: str,
        destination_iban: str,
        bank_reference: str | None,
        refusal: str | None = None,
    ) -> Recorded:
        answer = await _translated(
            conn.fetchval(
                Q["record_transfer"],
                command_id,
                saga_id,
                amount_minor,
                currency,
                destination_iban,
                bank_reference,
                refusal,
                self._message_id(),
                self.exchange,
                # The outcome may be announced long after, from a callback: it continues this
                # command's trace (migrations/bank/0005).
                orjson.dumps(tracing.outgoing_context(self.exchange, "transfer outcome", saga_id)).decode(),
            )
        )
        after_commit(self.on_committed, once=True)  # the caller's transaction (core's consumer)
        return Recorded(answer)

    async def record_transfers(
        self, conn: asyncpg.Connection, items: Sequence[NewTransfer]
    ) -> list[Recorded]:
        """Each of ``items`` recorded as :meth:`record_transfer` records one, in their order, in
        one statement (a batch's: one round trip instead of one a transfer), their references'
        locks taken first in one order (bank.record_transfers: no deadlock with a batch of
        callbacks); the answers in that order."""
        if not items:
            return []
        columns: list[list[Any]] = [[] for _ in range(9)]
        for item in items:
            with tracing.continuing(item.saga_id):  # in a batch: the command's own trace
                trace_context = tracing.outgoing_context(self.exchange, "transfer outcome", item.saga_id)
            row = (
                item.command_id,
                item.saga_id,
                item.amount_minor,
                item.currency,
                item.destination_iban,
                item.bank_reference,
                item.refusal,
                self._message_id(),
                orjson.dumps(trace_context).decode(),  # as record_transfer's
            )
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        answers = await _translated(
            conn.fetchval(Q["record_transfers"], *columns[:8], self.exchange, columns[8])
        )
        if len(answers) != len(items):
            raise AssertionError(f"record_transfers answered {len(answers)} for {len(items)} transfers")
        after_commit(self.on_committed, once=True)  # the caller's transaction (core's consumer)
        return [Recorded(answer) for answer in answers]

    async def republish_outcome(self, conn: asyncpg.Connection, command_id: str) -> bool:
        done: bool = await _translated(
            conn.fetchval(Q["republish_outcome"], command_id, self._message_id(), self.exchange)
        )
        if done:
            after_commit(self.on_committed, once=True)
        return done

    async def receive_callback(
        self, webhook_id: str, kind: str, bank_reference: str | None, body: str, reason: str | None
    ) -> Received:
        """One verified callback kept (committed) when this returns; :class:`Unstorable` or
        :class:`StoreUnavailable` when it was not."""
        item = CallbackItem(webhook_id, kind, bank_reference, body, reason)
        if self._callbacks is not None:
            return await self._callbacks.submit(item)
        return await self._receive_alone(item)

    async def _receive_alone(self, item: CallbackItem) -> Received:
        answer = await _translated(
            self.pool.fetchval(
                Q["receive_callback"],
                item.webhook_id,
                item.kind,
                item.bank_reference,
                item.body,
                item.reason,
                self._message_id(),
                self.exchange,
            )
        )
        self.on_committed()  # one statement in autocommit: committed now
        return Received(answer)

    async def receive_callbacks(self, items: Sequence[CallbackItem]) -> list[Received | Exception]:
        """Many callbacks in one statement (one transaction, one commit), each kept as
        :meth:`receive_callback` keeps one, in order; an answer each, in that order: its outcome,
        or :class:`Unstorable` / :class:`StoreUnavailable` (or, alone, the database's error).

        A deadlock or a race is retried whole; what a retry can cure answers every callback
        StoreUnavailable (503: the bank sends it again); any other refusal of a batch of many
        (one body jsonb cannot hold) sends each alone, so that one callback cannot fail its
        neighbours (each answered for itself: 422 for the bad one, 202 for the others); a batch of
        one answers its refusal, which it would meet again alone (core.coalesce.whole_or_each)."""
        if not 0 < len(items) <= MAX_CALLBACK_BATCH:
            raise ValueError(f"a batch holds 1 to {MAX_CALLBACK_BATCH} callbacks, not {len(items)}")
        args = (
            [i.webhook_id for i in items],
            [i.kind for i in items],
            [i.bank_reference for i in items],
            [i.body for i in items],
            [i.reason for i in items],
            [self._message_id() for _ in items],  # each announcement's id, used if it announces
            self.exchange,
        )

        async def whole() -> list[Received]:
            answers: list[str] = await self.pool.fetchval(Q["receive_callbacks"], *args)
            if len(answers) != len(items):
                raise AssertionError(f"receive_callbacks answered {len(answers)} for {len(items)} callbacks")
            self.on_committed()  # one statement in autocommit: committed now
            return [Received(a) for a in answers]

        return await whole_or_each(items, whole, self._receive_alone, _CALLBACK_BATCH)

    async def reconcile_transfer(
        self, bank_reference: str, succeeded: bool, reason: str | None
    ) -> Reconciled:
        answer = await _translated(
            self.pool.fetchval(
                Q["reconcile_transfer"], bank_reference, succeeded, reason, self._message_id(), self.exchange
            )
        )
        self.on_committed()  # one statement in autocommit: committed now
        return Reconciled(answer)

    async def stale_pending(self, older_than_s: float, limit: int) -> list[StalePending]:
        rows = await _translated(self.pool.fetch(Q["stale_pending"], float(older_than_s), limit))
        return [StalePending(r["command_id"], r["bank_reference"], r["requested_at"]) for r in rows]

    async def recorded_statements(self, days: Sequence[date]) -> set[date]:
        """Which of these days' statements are recorded (statements.py writes them: bank-webhook,
        which imports this store, publishes nothing)."""
        rows = await _translated(self.pool.fetch(Q["recorded_statements"], list(days)))
        return {r["day"] for r in rows}

    async def purge_inbox(self, older_than_h: int, batch: int) -> int:
        """Delete at most ``batch`` applied callbacks older than ``older_than_h`` hours (at least
        a day is kept whatever is asked); how many."""
        return int(await _translated(self.pool.fetchval(Q["purge_inbox"], older_than_h, batch)))

    async def transfers_by_state(self) -> dict[str, int]:
        rows: list[Any] = await _translated(self.pool.fetch(Q["transfers_by_state"]))
        return {r["state"]: int(r["n"]) for r in rows}
