"""wallet-consumer's own metrics, beside core.consumer's (messages by queue and outcome,
redeliveries, dead letters, pauses): what the handler did with each top-up, and how many wait
for an operator. No label holds an id."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

# The handler's results (topups.outcome): a bounded label set.
RESULTS = (
    "credited",
    "replayed",
    "credited-already",
    "unattributed",
    "unattributed-already",
    "attributed-already",
)


class TopupMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.handled = Counter(
            "hiwallet_topups_handled",
            "TopupRecorded messages handled, by result (counted when handled: a transaction that "
            "then fails to commit is handled again and counted again)",
            ["result"],
            registry=self.registry,
        )
        self.unattributed = Gauge(
            "hiwallet_topups_unattributed",
            "Top-ups not credited to any wallet, waiting for an operator (hiwallet topups unattributed)",
            registry=self.registry,
        )

    def count(self, result: str) -> None:
        self.handled.labels(result if result in RESULTS else "other").inc()


# The withdrawal commands' results (WithdrawalHandler): a bounded label set.
WITHDRAWAL_RESULTS = ("debited", "rejected", "settled", "refunded", "republished")


class WithdrawalMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.handled = Counter(
            "hiwallet_withdrawal_commands_handled",
            "Withdrawal commands handled, by result (republished: a command that came again, "
            "answered with its stored response; counted when handled, as hiwallet_topups_handled)",
            ["result"],
            registry=self.registry,
        )

    def count(self, result: str) -> None:
        self.handled.labels(result if result in WITHDRAWAL_RESULTS else "other").inc()
