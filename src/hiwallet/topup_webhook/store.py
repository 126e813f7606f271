"""topup-webhook's database: the statements of sql/queries.sql, and the translation of the
driver's errors at this edge (what a retry can cure: :class:`StoreUnavailable`)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import asyncpg
import structlog

from hiwallet.core.broker import OutgoingMessage
from hiwallet.core.coalesce import Coalescer, WholeOrEach, whole_or_each
from hiwallet.core.db import is_transient, store_error
from hiwallet.core.ids import new_id
from hiwallet.core.outbox import outbox_row
from hiwallet.core.queries import load_queries
from hiwallet.topup_webhook.providers import Notification
from hiwallet.topup_webhook.settings import TopupWebhookSettings

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")
log = structlog.get_logger(__name__)
MAX_BATCH = 1_000  # as topup.ingest_batch bounds it


class StoreUnavailable(Exception):
    """The database did not answer, or answered something a retry can cure (core.db)."""


class Unstorable(Exception):
    """The database refused the notification's content itself (a JSON text jsonb cannot hold,
    such as a \\u0000): no retry changes that."""


# The driver's errors as this store's (core.db.store_error), the cause kept.
_translated = partial(
    store_error,
    refused=lambda sqlstate: Unstorable(f"the database refused the notification: {sqlstate}"),
    unavailable=lambda kind: StoreUnavailable(f"cannot store the notification: {kind}"),
)


class Outcome(enum.StrEnum):
    """What topup.ingest did with one notification (also the metric's ``outcome`` label)."""

    DUPLICATE = "duplicate"  # seen before: nothing stored
    STORED = "stored"  # stored; it reports no payment
    RECORDED = "recorded"  # stored, and the payment recorded and announced (TopupRecorded)
    REPORTED = "reported"  # stored; the payment was recorded before: its lists appended
    MISMATCH = "mismatch"  # as REPORTED, but naming another amount or currency than the record


# A batch that deadlocked (two batches, or instances, taking the same payments in another
# order) is sent again whole, this many times, then each notification alone.
BATCH_ATTEMPTS = 3
# A unique violation is what two writers of one row meet when they race. topup.ingest makes
# every unique constraint of a payment an arbiter of its ON CONFLICT (migration 0004), so none
# should reach us; should one still, a retry cures it: the notification sent again finds the
# winner's row and is answered as the repeat it is (reported, duplicate), never a 500.
INGEST_ATTEMPTS = 3
_BUSY = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError, asyncpg.UniqueViolationError)


def _log_ingest_again(attempt: int, exc: Exception) -> None:
    log.info(
        "ingest batch deadlocked or raced; again",
        attempt=attempt,
        error=type(exc).__name__,
        sqlstate=getattr(exc, "sqlstate", None),
        constraint=getattr(exc, "constraint_name", None),
    )


# How TopupStore._ingest_batch answers its statement's failure (its docstring says what).
_INGEST_BATCH = WholeOrEach(
    attempts=BATCH_ATTEMPTS,
    again=_BUSY,
    shared=is_transient,
    refused=(asyncpg.PostgresError,),
    own=(Unstorable, StoreUnavailable, asyncpg.PostgresError),
    answer=_translated,
    on_again=_log_ingest_again,
)


@dataclass(frozen=True, slots=True)
class IngestItem:
    notification: Notification
    route: str
    request_id: str | None


def _log_recorded(items: Sequence[IngestItem], outcomes: Sequence[Outcome | Exception]) -> None:
    """One line for the payments a commit recorded, each with its ids and its request's id. One
    line a commit, not one a payment: a line is a write(2) of its own (core.logging), about
    20 µs, which one a payment made a tenth of this process's CPU per top-up at 1,000/s."""
    recorded = [
        {
            "provider": item.notification.provider,
            "payment_id": payment.id,
            "event_id": item.notification.event_id,
            "route": item.route,
            "request_id": item.request_id,
            "attributed": payment.wallet is not None,
        }
        for item, outcome in zip(items, outcomes, strict=True)
        if outcome is Outcome.RECORDED and (payment := item.notification.payment) is not None
    ]
    if recorded:
        log.info("payments recorded", count=len(recorded), payments=recorded)


class TopupStore:
    """``writers`` > 0: concurrent :meth:`ingest` calls share one statement and one commit
    (``topup.ingest_batch``, up to ``max_batch`` notifications; core/coalesce.py). 0: each
    notification alone (``topup.ingest``). ``on_recorded`` is called after each commit that
    wrote outbox rows (core.outbox.RelayHint.committed: the outbox has no NOTIFY trigger)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        exchange: str,
        *,
        writers: int = 0,
        max_batch: int = 64,
        spare_after_s: float | None = None,
        on_recorded: Callable[[], None] | None = None,
    ) -> None:
        self.pool = pool
        # where the TopupRecorded messages go (settings.exchange: hiwallet.topups)
        self.exchange = exchange
        self.on_recorded = on_recorded
        # Two notifications of one payment or one event id may share a batch: topup.ingest_batch
        # takes them one after the other in one transaction, as if sequential (no conflict_key).
        self._coalescer: Coalescer[IngestItem, Outcome] | None = (
            Coalescer(
                self.ingest_batch,
                writers=writers,
                max_batch=max(1, min(max_batch, MAX_BATCH)),
                spare_after_s=spare_after_s,
            )
            if writers > 0
            else None
        )

    @classmethod
    def from_settings(
        cls, pool: asyncpg.Pool, settings: TopupWebhookSettings, on_recorded: Callable[[], None] | None
    ) -> TopupStore:
        spare_after_ms = settings.ingest_spare_after_ms
        return cls(
            pool,
            settings.exchange,
            writers=max(0, settings.ingest_writers),
            max_batch=settings.ingest_max_batch,
            spare_after_s=spare_after_ms / 1000 if spare_after_ms > 0 else None,
            on_recorded=on_recorded,
        )

    async def ingest(self, notification: Notification, route: str, request_id: str | None) -> Outcome:
        """One notification, stored (committed) when this returns; :class:`Unstorable` or
        :class:`StoreUnavailable` when it was not."""
        if self._coalescer is not None:
            return await self._coalescer.submit(IngestItem(notification, route, request_id))
        item = IngestItem(notification, route, request_id)
        outcome = await self._ingest_alone(item)
        if outcome is Outcome.RECORDED and self.on_recorded is not None:
            self.on_recorded()
        _log_recorded([item], [outcome])
        return outcome

    async def _ingest_alone(self, item: IngestItem) -> Outcome:
        for attempt in range(1, INGEST_ATTEMPTS + 1):
            try:
                return await self._ingest_once(item)
            except asyncpg.UniqueViolationError as exc:
                if attempt == INGEST_ATTEMPTS:  # not a race: the same conflict each time, a defect
                    raise
                log.info(
                    "ingest raced another; again",
                    attempt=attempt,
                    sqlstate=exc.sqlstate,
                    constraint=exc.constraint_name,
                )
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _ingest_once(self, item: IngestItem) -> Outcome:
        notification, p = item.notification, item.notification.payment
        try:
            answer = await self.pool.fetchval(
                Q["ingest"],
                notification.provider,
                notification.event_id,
                notification.event_type,
                item.route,
                notification.payload,
                None if p is None else p.id,
                None if p is None else p.provider_payment_id,
                None if p is None else p.wallet,
                None if p is None else p.reference,
                None if p is None else p.amount_minor,
                None if p is None else p.currency,
                new_id(),  # the TopupRecorded's message id, used if the payment is new
                self.exchange,
                item.request_id,
            )
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            error = _translated(exc)
            if error is exc:
                raise
            raise error from exc
        return Outcome(answer)

    async def ingest_batch(self, items: Sequence[IngestItem]) -> list[Outcome | Exception]:
        """Many notifications in one statement (one transaction, one commit); an answer each,
        in order: its outcome, or :class:`Unstorable` / :class:`StoreUnavailable`. The payments
        it recorded are logged in one line (:func:`_log_recorded`)."""
        outcomes = await self._ingest_batch(items)
        _log_recorded(items, outcomes)
        return outcomes

    async def _ingest_batch(self, items: Sequence[IngestItem]) -> list[Outcome | Exception]:
        """:meth:`ingest_batch`'s statement and its retries.

        A deadlock (or a race's unique violation) is retried whole; a failure a retry can cure
        answers every item StoreUnavailable (503: the provider sends it again); any other
        failure of a batch of many (one item's content refused: a JSON text jsonb cannot hold)
        sends each item alone, so that one notification cannot fail its neighbours."""
        if not 0 < len(items) <= MAX_BATCH:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH} notifications, not {len(items)}")
        args = self._batch_arguments(items)

        async def whole() -> list[Outcome]:
            answers: list[str] = await self.pool.fetchval(Q["ingest_batch"], *args)
            return [Outcome(a) for a in answers]

        outcomes = await whole_or_each(items, whole, self._ingest_alone, _INGEST_BATCH)
        if Outcome.RECORDED in outcomes and self.on_recorded is not None:
            self.on_recorded()
        return outcomes

    def _batch_arguments(self, items: Sequence[IngestItem]) -> tuple[object, ...]:
        payments = [i.notification.payment for i in items]
        return (
            [i.notification.provider for i in items],
            [i.notification.event_id for i in items],
            [i.notification.event_type for i in items],
            [i.route for i in items],
            [i.notification.payload for i in items],
            [None if p is None else p.id for p in payments],
            [None if p is None else p.provider_payment_id for p in payments],
            [None if p is None else p.wallet for p in payments],
            [None if p is None else p.reference for p in payments],
            [None if p is None else p.amount_minor for p in payments],
            [None if p is None else p.currency for p in payments],
            [new_id() for _ in items],  # the TopupRecorded's message ids, used if a payment is new
            self.exchange,
            [i.request_id for i in items],
        )

    async def recorded(self, provider: str, payment_ids: Sequence[str]) -> set[str]:
        rows = await self.pool.fetch(Q["recorded_payments"], provider, list(payment_ids))
        return {r["provider_payment_id"] for r in rows}

    async def recorded_settlements(self, provider: str, payout_ids: Sequence[str]) -> set[str]:
        rows = await self.pool.fetch(Q["recorded_settlements"], provider, list(payout_ids))
        return {r["payout_id"] for r in rows}

    async def record_settlement(
        self,
        message: OutgoingMessage,
        *,
        provider: str,
        payout_id: str,
        currency: str,
        amount_minor: int,
        lines: int,
    ) -> bool:
        """The payout and its announcement in one statement (its own transaction); False when
        it was recorded before (by another instance, an operator's round, an earlier round)."""
        try:
            recorded: bool = await self.pool.fetchval(
                Q["record_settlement"],
                provider,
                payout_id,
                currency,
                amount_minor,
                lines,
                *outbox_row(message),
            )
        except Exception as exc:
            error = _translated(exc)
            if error is exc:
                raise
            raise error from exc
        if recorded and self.on_recorded is not None:
            self.on_recorded()
        return recorded

    async def purge_inbox(self, older_than_days: int, batch: int) -> int:
        deleted: int = await self.pool.fetchval(Q["purge_inbox"], older_than_days, batch)
        return deleted

    async def inbox_rows(self) -> int:
        rows: int = await self.pool.fetchval(Q["inbox_rows"])
        return rows
