"""The reconciliation round (every 6 hours in wallet-consumer, on demand through wallet-api's
staff endpoint or ``hiwallet reconcile run``): what the ledger's lines say against what is
stored and what is owed, each discrepancy kept as a finding.

Checked:
- every account's stored balance against the sum of its lines (``balance_mismatch``);
- every top-up against its provider's payouts (``topup_unsettled``): not paid out after the
  provider's window (settings). Payouts are taken oldest top-up first (the ledger's
  settlements carry a gross, not their top-ups): hiwallet.ledger.unsettled_topups.
  TODO(settlement): when the settlement import records which top-ups each payout paid, check
  each top-up against its own payout; a payout that matches no top-up, or another amount, is
  recorded by the import itself (findings.PAYOUT_UNMATCHED, PAYOUT_AMOUNT_DIFFERS).
- every month in which a provider paid top-ups out in the gross model (its fee not deducted)
  against the invoices entered for that month (``invoice_late``): none, its due days after the
  month's end (settings), is late. An invoice names the month it bills (``period``).
- the nostro against the bank's statement (nostro.py): each statement line against the nostro's
  lines by reference, both ways, their amounts, and each day's opening balance against the day
  before's closing, and each day having a statement at all (``bank_line_unmatched``,
  ``nostro_not_at_bank``, ``bank_amount_differs``, ``bank_opening_differs``,
  ``bank_statement_missing``).

A finding the round no longer finds (a balance put right, a top-up since paid out) is resolved
by the round itself (``system:reconciliation``, "not found again"), unless the check stopped at
its limit (then it did not look at everything)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog

from hiwallet.core.jobs import PeriodicJob
from hiwallet.ledger import balance_mismatches, late_invoices, unsettled_topups, verify_ledger
from hiwallet.reconciliation.errors import ReconciliationBusy
from hiwallet.reconciliation.findings import (
    BALANCE_MISMATCH,
    INVOICE_LATE,
    TOPUP_UNSETTLED,
    Q,
    record_finding,
)
from hiwallet.reconciliation.metrics import ReconciliationMetrics
from hiwallet.reconciliation.nostro import check_nostro
from hiwallet.reconciliation.settings import ReconciliationSettings

__all__ = [
    "RECONCILE_LOCK_KEY",
    "ROUND_ACTOR",
    "VERIFY_LOCK_KEY",
    "Reconciler",
    "RoundReport",
    "reconciliation_job",
    "run_now",
    "verify_job",
]

log = structlog.get_logger(__name__)

# Advisory lock keys in hiwallet_wallet (core.jobs; wallet-consumer's others are "hwwr" and
# "hwwp", wallet-api's "hwai"): one reconciliation round and one verify at a time, whoever
# runs it (a job, the staff endpoint, the operator command).
RECONCILE_LOCK_KEY = 0x6877_7263  # "hwrc"
VERIFY_LOCK_KEY = 0x6877_7276  # "hwrv"
ROUND_ACTOR = "system:reconciliation"
NOT_FOUND_AGAIN = "not found again by reconciliation: the discrepancy is gone"
_SEP = chr(31)  # between kind and subject in resolve_not_found_again's list


@dataclass
class RoundReport:
    found: dict[str, int] = field(default_factory=dict)  # by kind, this round
    new: int = 0  # of which were not open already
    resolved: int = 0  # open findings this round closed (not found again)
    finished_at: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "new": self.new,
            "resolved": self.resolved,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }


class Reconciler:
    """One round's work over the wallet database (a pool of any role that may: wallet-consumer's,
    or wallet-api's for the on-demand round)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: ReconciliationSettings,
        metrics: ReconciliationMetrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.metrics = metrics
        self.clock = clock  # what "now" is to the checks' windows (a test's: a month later)
        self.last: RoundReport | None = None

    async def round(self) -> int:
        """Check, record, resolve what is gone; the number of discrepancies found."""
        s = self.settings
        limit = s.max_findings_per_check
        now = self.clock()
        async with self.pool.acquire() as conn:
            # The reads first, each in its own snapshot (the ledger's), then the findings in one
            # short transaction: no long transaction holds the findings' rows.
            mismatches = await balance_mismatches(conn, limit=limit)
            unsettled = await unsettled_topups(
                conn,
                windows_s=s.settlement_windows_s,
                default_window_s=s.default_settlement_window_s,
                now=now,
                limit=limit,
            )
            late = await late_invoices(
                conn,
                due_days=s.invoice_due_days,
                default_due_days=s.default_invoice_due_days,
                now=now,
                limit=limit,
            )
            nostro = await check_nostro(conn, s, now=now, limit=limit)
            found: list[tuple[str, str, dict[str, Any]]] = [
                (
                    BALANCE_MISMATCH,
                    m.account,
                    {
                        "role": m.role,
                        "currency": m.currency,
                        "balance": m.balance,
                        "lines_total": m.lines_total,
                    },
                )
                for m in mismatches
            ]
            found += [
                (
                    TOPUP_UNSETTLED,
                    u.transaction_id,
                    {
                        "provider": u.provider,
                        "currency": u.currency,
                        "amount_minor": u.amount,
                        "unsettled_minor": u.unsettled,
                        "posted_at": u.posted_at.isoformat(),
                    },
                )
                for u in unsettled
            ]
            found += [
                (
                    INVOICE_LATE,
                    f"{i.provider}:{i.currency}:{i.period}",
                    {
                        "provider": i.provider,
                        "currency": i.currency,
                        "period": i.period,
                        "payouts": i.payouts,
                        "gross_minor": i.gross,
                        "due_at": i.due_at.isoformat(),
                    },
                )
                for i in late
            ]
            # A check that stopped at its limit did not see everything: what it did not find
            # again may still be there.
            complete = [
                kind
                for kind, rows in (
                    (BALANCE_MISMATCH, mismatches),
                    (TOPUP_UNSETTLED, unsettled),
                    (INVOICE_LATE, late),
                )
                if len(rows) < limit
            ] + nostro.complete
            found += nostro.found
            report = RoundReport()
            async with conn.transaction():
                for kind, subject, details in found:
                    recorded = await record_finding(conn, kind, subject, details, now=now)
                    report.found[kind] = report.found.get(kind, 0) + 1
                    if recorded.created:
                        report.new += 1
                        if self.metrics:
                            self.metrics.count_new(kind)
                closed = await conn.fetch(
                    Q["resolve_not_found_again"],
                    complete,
                    [f"{kind}{_SEP}{subject}" for kind, subject, _ in found],
                    ROUND_ACTOR,
                    NOT_FOUND_AGAIN,
                    now,
                )
                report.resolved = len(closed)
            report.finished_at = datetime.now(UTC)
            if self.metrics:
                await self.metrics.refresh(conn)
                self.metrics.last_round.set(time.time())
        self.last = report
        for kind, n in report.found.items():
            log.warning("reconciliation found discrepancies", kind=kind, count=n)
        log.info("reconciliation round", new=report.new, resolved=report.resolved)
        return sum(report.found.values())


def reconciliation_job(
    reconciler: Reconciler, connect: Callable[[], Awaitable[asyncpg.Connection]]
) -> PeriodicJob:
    s = reconciler.settings
    return PeriodicJob(
        "reconciliation", s.interval_s, RECONCILE_LOCK_KEY, reconciler.round, connect, timeout_s=s.timeout_s
    )


async def run_now(
    reconciler: Reconciler, connect: Callable[[], Awaitable[asyncpg.Connection]]
) -> RoundReport:
    """A round now, under the jobs' lock: :class:`ReconciliationBusy` when one runs elsewhere."""
    if not await reconciliation_job(reconciler, connect).run_once():
        raise ReconciliationBusy("a reconciliation round is running elsewhere; try again when it is done")
    if reconciler.last is None:  # run_once ran the round, which sets it; a guard
        raise RuntimeError("the round left no report")
    return reconciler.last


def verify_job(
    pool: asyncpg.Pool,
    settings: ReconciliationSettings,
    metrics: ReconciliationMetrics,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    """The whole ledger verified from its lines, one instance a round: the gauge of what it
    found (0 healthy), each problem logged (the first few)."""

    async def verify_round() -> int:
        async with pool.acquire() as conn:
            report = await verify_ledger(conn, max_problems=settings.max_findings_per_check)
        metrics.verify_problems.set(len(report.problems))
        metrics.verify_last_run.set(time.time())
        for problem in report.problems[:20]:
            log.error("ledger verify found a discrepancy", problem=problem)
        if report.problems:
            log.error("ledger verify: discrepancies", count=len(report.problems), lines=report.lines)
        return len(report.problems)

    return PeriodicJob(
        "ledger-verify",
        settings.verify_interval_s,
        VERIFY_LOCK_KEY,
        verify_round,
        connect,
        timeout_s=settings.verify_timeout_s,
    )
