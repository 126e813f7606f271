"""topup-webhook's own metrics (CONTRACT-10, "Metrics"), in the app's registry beside the HTTP
ones (the outbox's and the relay's are core.outbox.OutboxMetrics, in the same registry). No
label holds an id or personal data: providers, outcomes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class TopupMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.webhooks = Counter(
            "hiwallet_topup_webhooks_total",
            "Webhook notifications by provider and outcome (recorded, reported, duplicate, stored,"
            " mismatch, refused, unreadable, unavailable)",
            ["provider", "outcome"],
            registry=registry,
        )
        self.inbox_rows = Gauge("hiwallet_topup_inbox_rows", "Rows in topup.inbox", registry=registry)
        self.reconciliation_found = Counter(
            "hiwallet_topup_reconciliation_found_total",
            "Payments the reconciliation recorded that no webhook had reported",
            ["provider"],
            registry=registry,
        )
        self.inbox_purged = Counter(
            "hiwallet_topup_inbox_purged_total",
            "Processed inbox rows deleted by the retention",
            registry=registry,
        )
        self.settlements = Counter(
            "hiwallet_topup_settlements_total",
            "Payouts the settlement importer read, by provider and outcome (announced, known: recorded"
            " before, unreadable: not announced)",
            ["provider", "outcome"],
            registry=registry,
        )
