"""The daily operations summary: per UTC day and currency, for each business account and in
total over every wallet, the transactions that moved its wallets' money, what came in, what went
out, and the fees taken in those transactions (their revenue legs). Filled every hour by
wallet-consumer's job from the ledger's lines: the current day and ``summary_days_back`` before
it computed again and upserted (the same day computed twice is the same row: lines are never
rewritten). Read by staff (JSON, CSV) and by a business for its own account."""

from __future__ import annotations

import csv
import io
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg
import structlog

from hiwallet.core.jobs import PeriodicJob
from hiwallet.ledger import day_figures
from hiwallet.reconciliation.findings import Q
from hiwallet.reconciliation.metrics import ReconciliationMetrics
from hiwallet.reconciliation.settings import ReconciliationSettings

__all__ = [
    "CSV_COLUMNS",
    "MAX_DAYS",
    "SUMMARY_LOCK_KEY",
    "TOTAL",
    "SummaryRow",
    "read_summary",
    "refresh_summary",
    "summary_csv",
    "summary_job",
]

log = structlog.get_logger(__name__)

SUMMARY_LOCK_KEY = 0x6877_7273  # "hwrs"
TOTAL = ""  # the account_id of the totals' rows
MAX_DAYS = 366  # a read covers at most this many days
MAX_ROWS = 100_000  # the staff read of every business: bounded
CSV_COLUMNS = (
    "day",
    "currency",
    "account_id",
    "transactions",
    "volume_in_minor",
    "volume_out_minor",
    "fees_minor",
)


@dataclass(frozen=True, slots=True)
class SummaryRow:
    day: date
    currency: str
    account_id: str  # TOTAL for every wallet together
    transactions: int
    volume_in_minor: int
    volume_out_minor: int
    fees_minor: int
    computed_at: datetime

    @classmethod
    def of(cls, r: asyncpg.Record) -> SummaryRow:
        return cls(
            r["day"],
            r["currency"],
            r["account_id"],
            r["transactions"],
            r["volume_in_minor"],
            r["volume_out_minor"],
            r["fees_minor"],
            r["computed_at"],
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "currency": self.currency,
            "account_id": self.account_id or None,
            "transactions": self.transactions,
            "volume_in_minor": self.volume_in_minor,
            "volume_out_minor": self.volume_out_minor,
            "fees_minor": self.fees_minor,
            "computed_at": self.computed_at.isoformat(),
        }


async def refresh_summary(
    conn: asyncpg.Connection, days: Sequence[date], *, now: datetime | None = None
) -> int:
    """Compute ``days`` again from the ledger's lines and upsert them; the rows written."""
    now = now or datetime.now(UTC)
    wallets: dict[str, list[str]] = defaultdict(list)
    for r in await conn.fetch(Q["business_wallets"]):
        wallets[r["account_id"]].append(r["wallet_id"])
    cols: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [])
    for day in days:
        for f in await day_figures(conn, day, wallets):
            row = (
                day,
                f.currency,
                f.owner,
                f.transactions,
                f.volume_in_minor,
                f.volume_out_minor,
                f.fees_minor,
                now,
            )
            for col, value in zip(cols, row, strict=True):
                col.append(value)
    if cols[0]:
        await conn.execute(Q["upsert_summary"], *cols)
    return len(cols[0])


def _check_range(first: date, last: date) -> None:
    if last < first:
        raise ValueError("the range ends before it starts")
    if (last - first).days >= MAX_DAYS:
        raise ValueError(f"at most {MAX_DAYS} days at once")


async def read_summary(
    conn: asyncpg.Connection | asyncpg.Pool, first: date, last: date, *, account_id: str | None
) -> list[SummaryRow]:
    """Days ``first``..``last`` of one business (``account_id``), of the totals (TOTAL), or of
    every business and the totals (None: staff)."""
    _check_range(first, last)
    if account_id is None:
        rows = await conn.fetch(Q["read_summary_all"], first, last, MAX_ROWS)
    else:
        rows = await conn.fetch(Q["read_summary"], first, last, account_id)
    return [SummaryRow.of(r) for r in rows]


def summary_csv(rows: Sequence[SummaryRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.day.isoformat(),
                r.currency,
                r.account_id or "total",
                r.transactions,
                r.volume_in_minor,
                r.volume_out_minor,
                r.fees_minor,
            ]
        )
    return out.getvalue()


def summary_job(
    pool: asyncpg.Pool,
    settings: ReconciliationSettings,
    metrics: ReconciliationMetrics | None,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    """Every summary_interval_s, one instance: today and the days_back before it."""

    async def summary_round() -> int:
        today = datetime.now(UTC).date()
        days = [today - timedelta(days=n) for n in range(settings.summary_days_back, -1, -1)]
        async with pool.acquire() as conn:
            written = await refresh_summary(conn, days)
        if metrics:
            metrics.summary_last_refresh.set(time.time())
        log.info("daily summary refreshed", days=[d.isoformat() for d in days], rows=written)
        return written

    return PeriodicJob(
        "daily-summary",
        settings.summary_interval_s,
        SUMMARY_LOCK_KEY,
        summary_round,
        connect,
        timeout_s=settings.summary_timeout_s,
    )
