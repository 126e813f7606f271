"""topup-webhook's database: the statements of sql/queries.sql, and the translation of the
driver's errors at this edge (what a retry can cure: :class:`StoreUnavailable`)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from hiwallet.core.db import is_transient
from hiwallet.core.ids import new_id
from hiwallet.core.queries import load_queries
from hiwallet.topup_webhook.providers import Notification

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")


class StoreUnavailable(Exception):
    """The database did not answer, or answered something a retry can cure (core.db)."""


class Unstorable(Exception):
    """The database refused the notification's content itself (a JSON text jsonb cannot hold,
    such as a \\u0000): no retry changes that."""


class Outcome(enum.StrEnum):
    """What topup.ingest did with one notification (also the metric's ``outcome`` label)."""

    DUPLICATE = "duplicate"  # seen before: nothing stored
    STORED = "stored"  # stored; it reports no payment
    RECORDED = "recorded"  # stored, and the payment recorded and announced (TopupRecorded)
    REPORTED = "reported"  # stored; the payment was recorded before: its lists appended
    MISMATCH = "mismatch"  # as REPORTED, but naming another amount or currency than the record


class TopupStore:
    def __init__(self, pool: asyncpg.Pool, exchange: str) -> None:
        self.pool = pool
        # where the TopupRecorded messages go (settings.exchange: hiwallet.topups)
        self.exchange = exchange

    async def ingest(self, notification: Notification, route: str, request_id: str | None) -> Outcome:
        p = notification.payment
        try:
            answer = await self.pool.fetchval(
                Q["ingest"],
                notification.provider,
                notification.event_id,
                notification.event_type,
                route,
                notification.payload,
                None if p is None else p.id,
                None if p is None else p.provider_payment_id,
                None if p is None else p.wallet,
                None if p is None else p.reference,
                None if p is None else p.amount_minor,
                None if p is None else p.currency,
                new_id(),  # the TopupRecorded's message id, used if the payment is new
                self.exchange,
                request_id,
            )
        except asyncpg.DataError as exc:  # class 22: the value, not the moment
            raise Unstorable(f"the database refused the notification: {exc.sqlstate}") from exc
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            if is_transient(exc):
                raise StoreUnavailable(f"cannot store the notification: {type(exc).__name__}") from exc
            raise
        return Outcome(answer)

    async def recorded(self, provider: str, payment_ids: Sequence[str]) -> set[str]:
        rows = await self.pool.fetch(Q["recorded_payments"], provider, list(payment_ids))
        return {r["provider_payment_id"] for r in rows}

    async def purge_inbox(self, older_than_days: int, batch: int) -> int:
        deleted: int = await self.pool.fetchval(Q["purge_inbox"], older_than_days, batch)
        return deleted

    async def inbox_rows(self) -> int:
        rows: int = await self.pool.fetchval(Q["inbox_rows"])
        return rows
