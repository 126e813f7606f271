"""wallet-consumer's own metrics, beside core.consumer's (messages by queue and outcome,
redeliveries, dead letters, pauses): what the handler did with each top-up, and how many wait
for an operator. No label holds an id."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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


class LedgerJobMetrics:
    """The ledger's jobs (jobs.py): promo expiry and the sweep. Rounds are counted where they
    ran (an instance that found the lock taken counts a skip); amounts are in minor units,
    labelled by currency and where the money went (a bounded set), never by wallet."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.rounds = Counter(
            "hiwallet_ledger_job_rounds",
            "Rounds of the ledger's jobs this instance ran, by job (promo-expiry, ledger-sweep)"
            " and result (done, failed)",
            ["job", "result"],
            registry=self.registry,
        )
        self.skipped = Gauge(
            "hiwallet_ledger_job_rounds_skipped",
            "Rounds of the ledger's jobs this instance skipped since it started: another instance"
            " held the job's lock",
            ["job"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "hiwallet_ledger_job_round_seconds",
            "How long a round of a ledger job took (rounds this instance ran, failed ones too)",
            ["job"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=self.registry,
        )
        self.last_success = Gauge(
            "hiwallet_ledger_job_last_success_timestamp_seconds",
            "When this instance last finished a round of the job (unix time; 0: never)",
            ["job"],
            registry=self.registry,
        )
        self.promo_expired = Counter(
            "hiwallet_promo_batches_expired",
            "Promo batches expired (their remainder returned), by where it went: business (its"
            " funder's cash) or breakage (promo_breakage, the platform's promo)",
            ["currency", "to"],
            registry=self.registry,
        )
        self.promo_returned = Counter(
            "hiwallet_promo_returned_minor",
            "Expired promo returned, in minor units, by currency and where it went (business, breakage)",
            ["currency", "to"],
            registry=self.registry,
        )
        self.swept = Counter(
            "hiwallet_ledger_sub_accounts_swept",
            "Per-bucket sub-accounts swept into their central account, by role and currency",
            ["role", "currency"],
            registry=self.registry,
        )
        self.swept_amount = Counter(
            "hiwallet_ledger_swept_minor",
            "What the sweep moved into central accounts, in minor units (signed sums: a"
            " sub-account may be negative, so the counter takes its absolute value), by role and"
            " currency",
            ["role", "currency"],
            registry=self.registry,
        )
