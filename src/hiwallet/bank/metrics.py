"""bank-adapter's and bank-webhook's own metrics, in each app's registry beside the HTTP ones
(the outbox's and the relay's are core.outbox.OutboxMetrics, the consumer's
core.consumer.ConsumerMetrics). No label holds an id or personal data: outcomes, states."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class AdapterMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.commands = Counter(
            "hiwallet_bank_transfer_commands_total",
            "StartBankTransfer commands by result (pending, succeeded, failed, refused, exists,"
            " republished, in_progress)",
            ["result"],
            registry=registry,
        )
        self.bank_unavailable = Counter(
            "hiwallet_bank_unavailable_total",
            "Calls to the bank's API that found it unavailable (the command waits; nothing lost)",
            registry=registry,
        )
        self.reconciliation_found = Counter(
            "hiwallet_bank_reconciliation_found_total",
            "Transfer outcomes the reconciliation recorded that no callback had reported",
            ["outcome"],
            registry=registry,
        )
        self.transfers = Gauge(
            "hiwallet_bank_transfers", "Transfers in bank.transfers by state", ["state"], registry=registry
        )
        self.inbox_purged = Counter(
            "hiwallet_bank_inbox_purged_total",
            "Applied bank callbacks deleted by the retention job",
            registry=registry,
        )


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.callbacks = Counter(
            "hiwallet_bank_webhooks_total",
            "Bank callbacks by outcome (recorded, already, unknown, stored, duplicate, refused,"
            " unreadable, unavailable)",
            ["outcome"],
            registry=registry,
        )
