"""Reconciliation's metrics: open findings by kind (read from the table by every instance, so
each answers the same), verify's discrepancies, and when each job last finished. No label holds
an id."""

from __future__ import annotations

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge

from hiwallet.reconciliation.findings import KINDS, open_by_kind

__all__ = ["ReconciliationMetrics"]


class ReconciliationMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.open_findings = Gauge(
            "hiwallet_reconciliation_open_findings",
            "Reconciliation findings not resolved yet, by kind (0 on a healthy system)",
            ["kind"],
            registry=self.registry,
        )
        for kind in KINDS:  # every known kind answers, 0 included
            self.open_findings.labels(kind)
        self.recorded = Counter(
            "hiwallet_reconciliation_findings_recorded",
            "New findings recorded by this instance's rounds, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.last_round = Gauge(
            "hiwallet_reconciliation_last_round_timestamp_seconds",
            "When this instance last finished a reconciliation round (0: never)",
            registry=self.registry,
        )
        self.verify_problems = Gauge(
            "hiwallet_ledger_verify_problems",
            "Discrepancies the last full verify of the ledger found in this instance (0 on a healthy "
            "system; read with hiwallet_ledger_verify_last_run_timestamp_seconds: the instance "
            "that ran last tells)",
            registry=self.registry,
        )
        self.verify_last_run = Gauge(
            "hiwallet_ledger_verify_last_run_timestamp_seconds",
            "When this instance last finished a full verify of the ledger (0: never)",
            registry=self.registry,
        )
        self.summary_last_refresh = Gauge(
            "hiwallet_daily_summary_last_refresh_timestamp_seconds",
            "When this instance last refreshed the daily operations summary (0: never)",
            registry=self.registry,
        )

    def _kind(self, kind: str) -> str:
        return kind if kind in KINDS else "other"

    async def refresh(self, conn: asyncpg.Connection | asyncpg.Pool) -> None:
        counts: dict[str, int] = dict.fromkeys((*KINDS, "other"), 0)
        for kind, n in (await open_by_kind(conn)).items():
            counts[self._kind(kind)] += n
        for kind, n in counts.items():
            self.open_findings.labels(kind).set(n)

    def count_new(self, kind: str) -> None:
        self.recorded.labels(self._kind(kind)).inc()
