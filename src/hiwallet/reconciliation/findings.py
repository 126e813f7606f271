"""Findings: discrepancies the books' checks found, kept until someone resolves them (by whom,
why, when). Anyone who finds one calls :func:`record_finding` in their own transaction (the
reconciliation round here; the settlement import for a payout that matches no top-up): the
same kind and subject while open is one finding (``reconciliation_findings_one_open``), its
details refreshed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from hiwallet.core.ids import new_id
from hiwallet.core.queries import load_queries
from hiwallet.reconciliation.errors import FindingAlreadyResolved, FindingNotFound

__all__ = [
    "BALANCE_MISMATCH",
    "BANK_AMOUNT_DIFFERS",
    "BANK_LINE_UNMATCHED",
    "BANK_OPENING_DIFFERS",
    "BANK_STATEMENT_MISSING",
    "INVOICE_LATE",
    "KINDS",
    "MAX_PAGE",
    "MAX_SUBJECT",
    "NOSTRO_KINDS",
    "NOSTRO_NOT_AT_BANK",
    "PAYOUT_ALREADY_SETTLED",
    "PAYOUT_AMOUNT_DIFFERS",
    "PAYOUT_INCONSISTENT_LINE",
    "PAYOUT_KINDS",
    "PAYOUT_TOTAL_DIFFERS",
    "PAYOUT_UNMATCHED",
    "PAYOUT_UNSUPPORTED_LINE",
    "TOPUP_UNSETTLED",
    "Finding",
    "FindingsPage",
    "Recorded",
    "finding",
    "list_findings",
    "open_by_kind",
    "record_finding",
    "resolve_finding",
]

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")

# The kinds: a bounded set (a metric's label). The round's own checks:
BALANCE_MISMATCH = "balance_mismatch"  # an account's stored balance is not the sum of its lines
TOPUP_UNSETTLED = "topup_unsettled"  # a top-up not paid out after its provider's window
INVOICE_LATE = "invoice_late"  # a month of gross-model payouts with no invoice after its due days
# The settlement import's (issue 24: a payout line that matches no top-up, or another amount):
# What a provider's payout leaves instead of a posting (wallet-consumer's settlements.py records
# them in the settlement's own transaction):
PAYOUT_UNMATCHED = "payout_unmatched"  # a line names no top-up the ledger holds
PAYOUT_AMOUNT_DIFFERS = "payout_amount_differs"  # another gross amount or currency than the top-up
PAYOUT_ALREADY_SETTLED = "payout_already_settled"  # the top-up was settled by another payout
PAYOUT_UNSUPPORTED_LINE = "payout_unsupported_line"  # not a payment (a refund, an adjustment …)
PAYOUT_INCONSISTENT_LINE = "payout_inconsistent_line"  # net ≠ gross − fee, or a fee in the gross model
PAYOUT_TOTAL_DIFFERS = "payout_total_differs"  # the lines' nets do not add up to the payout
PAYOUT_KINDS = (
    PAYOUT_UNMATCHED,
    PAYOUT_AMOUNT_DIFFERS,
    PAYOUT_ALREADY_SETTLED,
    PAYOUT_UNSUPPORTED_LINE,
    PAYOUT_INCONSISTENT_LINE,
    PAYOUT_TOTAL_DIFFERS,
)
# The nostro against the bank's statement (the round's, nostro.py): the bank's side is each day's
# statement as bank-adapter read it, the ledger's the nostro's lines; matched by reference.
BANK_LINE_UNMATCHED = "bank_line_unmatched"  # a movement on the statement no nostro line answers
NOSTRO_NOT_AT_BANK = "nostro_not_at_bank"  # a nostro line on no statement after the wait
BANK_AMOUNT_DIFFERS = "bank_amount_differs"  # matched, but the bank moved another amount
BANK_OPENING_DIFFERS = "bank_opening_differs"  # a day's opening is not the day before's closing
BANK_STATEMENT_MISSING = "bank_statement_missing"  # no statement kept for a day, after the wait
NOSTRO_KINDS = (
    BANK_LINE_UNMATCHED,
    NOSTRO_NOT_AT_BANK,
    BANK_AMOUNT_DIFFERS,
    BANK_OPENING_DIFFERS,
    BANK_STATEMENT_MISSING,
)
KINDS = (BALANCE_MISMATCH, TOPUP_UNSETTLED, INVOICE_LATE, *PAYOUT_KINDS, *NOSTRO_KINDS)
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,62}$")  # the table's CHECK (reconciliation_findings_kind_format)
MAX_SUBJECT = 300
MAX_NOTE = 2000
MAX_PAGE = 200
_CURSOR = re.compile(r"^([0-9]{1,18})\.([0-9a-f-]{36})$")


@dataclass(frozen=True, slots=True)
class Recorded:
    id: str
    created: bool  # False: the open finding of the same discrepancy, seen again


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    kind: str
    subject: str
    details: dict[str, Any]
    found_at: datetime
    last_seen_at: datetime
    status: str
    resolved_by: str | None
    resolution_note: str | None
    resolved_at: datetime | None

    @classmethod
    def of(cls, row: asyncpg.Record) -> Finding:
        details = row["details"]
        return cls(
            row["id"],
            row["kind"],
            row["subject"],
            orjson.loads(details) if isinstance(details, str | bytes) else dict(details),
            row["found_at"],
            row["last_seen_at"],
            row["status"],
            row["resolved_by"],
            row["resolution_note"],
            row["resolved_at"],
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "subject": self.subject,
            "details": self.details,
            "found_at": self.found_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "status": self.status,
            "resolved_by": self.resolved_by,
            "resolution_note": self.resolution_note,
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
        }


@dataclass(frozen=True, slots=True)
class FindingsPage:
    findings: list[Finding]
    next_cursor: str | None


def _details(details: dict[str, Any]) -> str:
    # jsonb as text cast in the statement: a pooled connection has the ledger's jsonb codec
    # (init_connection), a job's own connection none; text is taken by both.
    return orjson.dumps(details, option=orjson.OPT_SORT_KEYS).decode()


async def record_finding(
    conn: asyncpg.Connection | asyncpg.Pool,
    kind: str,
    subject: str,
    details: dict[str, Any],
    *,
    now: datetime | None = None,
) -> Recorded:
    """Keep a discrepancy: a new open finding, or the open one of the same ``kind`` and
    ``subject`` seen again (details refreshed). In the caller's transaction when ``conn`` is
    one (a settlement that records its finding instead of posting, in the same unit of work)."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"{kind!r} is not a finding kind (lower case, digits, _)")
    if not 1 <= len(subject) <= MAX_SUBJECT:
        raise ValueError(f"a finding's subject is 1 to {MAX_SUBJECT} characters")
    row = await conn.fetchrow(
        Q["record_finding"], new_id(), kind, subject, _details(details), now or datetime.now(UTC)
    )
    if row is None:  # RETURNING always answers one row; a guard, not an assert
        raise RuntimeError("record_finding returned nothing")
    return Recorded(row["id"], row["created"])


async def finding(conn: asyncpg.Connection | asyncpg.Pool, finding_id: str) -> Finding:
    row = await conn.fetchrow(Q["finding"], finding_id)
    if row is None:
        raise FindingNotFound(f"no finding {finding_id}")
    return Finding.of(row)


async def resolve_finding(
    conn: asyncpg.Connection | asyncpg.Pool, finding_id: str, *, by: str, note: str
) -> Finding:
    """Close an open finding: who (``by``, e.g. ``staff:<sub>``) and why. Resolved already:
    :class:`FindingAlreadyResolved` (a resolution is never rewritten)."""
    note = note.strip()
    if not 1 <= len(note) <= MAX_NOTE:
        raise ValueError(f"a resolution note is 1 to {MAX_NOTE} characters")
    row = await conn.fetchrow(Q["resolve_finding"], finding_id, by, note, datetime.now(UTC))
    if row is not None:
        return Finding.of(row)
    existing = await finding(conn, finding_id)  # FindingNotFound when there is none
    raise FindingAlreadyResolved(existing.id, existing.resolved_by)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _cursor_of(f: Finding) -> str:
    # whole microseconds (PostgreSQL's precision), no float on the way
    return f"{(f.found_at - _EPOCH) // _MICRO}.{f.id}"


def _parse_cursor(cursor: str) -> tuple[datetime, str]:
    m = _CURSOR.fullmatch(cursor)
    if m is None:
        raise ValueError("not a cursor of this list")
    return _EPOCH + int(m.group(1)) * _MICRO, m.group(2)


async def list_findings(
    conn: asyncpg.Connection | asyncpg.Pool,
    *,
    status: str = "open",
    kind: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> FindingsPage:
    """One page of findings by status (and kind), newest first; ``next_cursor`` for the next."""
    if status not in ("open", "resolved"):
        raise ValueError("status is open or resolved")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit is 1 to {MAX_PAGE}")
    after_at, after_id = _parse_cursor(cursor) if cursor else (None, None)
    rows = await conn.fetch(Q["list_findings"], status, kind, after_at, after_id, limit + 1)
    found = [Finding.of(r) for r in rows[:limit]]
    return FindingsPage(found, _cursor_of(found[-1]) if len(rows) > limit else None)


async def open_by_kind(conn: asyncpg.Connection | asyncpg.Pool) -> dict[str, int]:
    return {r["kind"]: r["n"] for r in await conn.fetch(Q["open_by_kind"])}
