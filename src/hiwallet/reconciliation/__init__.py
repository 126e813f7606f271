"""Reconciliation and the daily operations summary (issue 24; docs/operations.md,
"Reconciliation"): the books' checks and what they found, kept as findings until someone
resolves them; and each day's figures per business and in total.

Between the services and the ledger (pyproject.toml's layers): wallet-consumer runs the jobs
(verify, the reconciliation round, the summary), wallet-api's staff endpoints read and resolve
findings, run a round on demand and read the summary, and any service with the wallet database
records a finding of its own with :func:`record_finding` (the settlement import: a payout that
matches no top-up). The ledger's reads are the ledger's (hiwallet.ledger: verify,
balance_mismatches, unsettled_topups, day_figures); the records here are wallet.*
(migrations/wallet/0019)."""

from hiwallet.reconciliation.checks import (
    RECONCILE_LOCK_KEY,
    ROUND_ACTOR,
    VERIFY_LOCK_KEY,
    Reconciler,
    RoundReport,
    reconciliation_job,
    run_now,
    verify_job,
)
from hiwallet.reconciliation.errors import (
    FindingAlreadyResolved,
    FindingNotFound,
    ReconciliationBusy,
    ReconciliationError,
)
from hiwallet.reconciliation.findings import (
    BALANCE_MISMATCH,
    INVOICE_LATE,
    KINDS,
    MAX_PAGE,
    MAX_SUBJECT,
    PAYOUT_ALREADY_SETTLED,
    PAYOUT_AMOUNT_DIFFERS,
    PAYOUT_INCONSISTENT_LINE,
    PAYOUT_KINDS,
    PAYOUT_TOTAL_DIFFERS,
    PAYOUT_UNMATCHED,
    PAYOUT_UNSUPPORTED_LINE,
    TOPUP_UNSETTLED,
    Finding,
    FindingsPage,
    Recorded,
    finding,
    list_findings,
    open_by_kind,
    record_finding,
    resolve_finding,
)
from hiwallet.reconciliation.metrics import ReconciliationMetrics
from hiwallet.reconciliation.settings import ReconciliationSettings, get_reconciliation_settings
from hiwallet.reconciliation.summary import (
    CSV_COLUMNS,
    MAX_DAYS,
    SUMMARY_LOCK_KEY,
    TOTAL,
    SummaryRow,
    read_summary,
    refresh_summary,
    summary_csv,
    summary_job,
)

__all__ = [
    "BALANCE_MISMATCH",
    "CSV_COLUMNS",
    "INVOICE_LATE",
    "KINDS",
    "MAX_DAYS",
    "MAX_PAGE",
    "MAX_SUBJECT",
    "PAYOUT_ALREADY_SETTLED",
    "PAYOUT_AMOUNT_DIFFERS",
    "PAYOUT_INCONSISTENT_LINE",
    "PAYOUT_KINDS",
    "PAYOUT_TOTAL_DIFFERS",
    "PAYOUT_UNMATCHED",
    "PAYOUT_UNSUPPORTED_LINE",
    "RECONCILE_LOCK_KEY",
    "ROUND_ACTOR",
    "SUMMARY_LOCK_KEY",
    "TOPUP_UNSETTLED",
    "TOTAL",
    "VERIFY_LOCK_KEY",
    "Finding",
    "FindingAlreadyResolved",
    "FindingNotFound",
    "FindingsPage",
    "Reconciler",
    "ReconciliationBusy",
    "ReconciliationError",
    "ReconciliationMetrics",
    "ReconciliationSettings",
    "Recorded",
    "RoundReport",
    "SummaryRow",
    "finding",
    "get_reconciliation_settings",
    "list_findings",
    "open_by_kind",
    "read_summary",
    "reconciliation_job",
    "record_finding",
    "refresh_summary",
    "resolve_finding",
    "run_now",
    "summary_csv",
    "summary_job",
    "verify_job",
]
