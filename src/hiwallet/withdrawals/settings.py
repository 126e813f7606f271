"""withdrawal-orchestrator settings: ``HIWALLET_WITHDRAWAL_*`` environment variables with local
defaults."""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class WithdrawalSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_WITHDRAWAL_", extra="ignore")

    port: int = 8011
    # The database name; None means hiwallet_withdrawal. Tests use clones.
    database: str | None = None
    # The API's requests and the results consumer's handlers (consumer_concurrency) share it.
    db_pool_max_size: int = 26
    max_body_bytes: int = 16_384

    # Who may ask (docs/architecture.md): customers' tokens (people and the customer realm's service
    # accounts) for the audience every internal service shares.
    customer_issuer_base: str = "http://127.0.0.1:8080"
    customer_realm: str = "hiwallet"
    # Staff tokens are refused (403) on customer endpoints, as wallet-api refuses them; staff
    # review withdrawals on /v1/staff/withdrawals (withdrawal.review, checked live below).
    staff_issuer_base: str = "http://127.0.0.1:8180"
    staff_realm: str = "hiwallet-staff"
    audience: str = "hiwallet-api"
    # Who an employee is, asked of staff-admin's GET /v1/me on every staff request (contracts.staff,
    # no cache): unreachable -> 503 for the employee, customers never ask it.
    staff_admin_url: str = "http://127.0.0.1:8013"
    staff_admin_timeout_s: float = 2.0
    staff_admin_max_connections: int = 20
    currencies: list[str] = ["TRY", "EUR", "USD"]

    # Visibility: the orchestrator knows no members; wallet-api answers "is this caller a member
    # of this wallet" (GET /v1/wallets/{wallet} with the caller's own token).
    wallet_api_url: str = "http://127.0.0.1:8010"
    wallet_api_timeout_s: float = 3.0
    # Connections to wallet-api at once (a burst of listings waits for one, never opens more).
    wallet_api_max_connections: int = 20

    # Above this amount (minor units) a debited withdrawal waits for a member of staff
    # (under_review) instead of going to the bank: 10,000.00 TRY. Per currency, overriding it:
    # a JSON object in the environment, e.g. {"EUR": 500000}.
    review_above_minor: int = 1_000_000
    review_above_minor_by_currency: dict[str, int] = {}

    # The stuck saga scan (core.jobs.PeriodicJob): every interval, the sagas that have waited
    # on a command's answer longer than stuck_after get that command again (the same
    # command_id, a new message id), at most scan_batch per round.
    stuck_scan_interval_s: float = 300.0
    stuck_after_s: float = 120.0
    stuck_scan_batch: int = 500

    # Idempotency records and sent outbox rows are kept this long, then purged (a job).
    retention_h: int = 48
    retention_interval_s: float = 3_600.0
    retention_batch: int = 1_000
    retention_max_batches: int = 100

    # Results in one transaction, up to consumer_batch at once, in delivery order (core.consumer's
    # batch path: one claim, one outcome statement, one commit and one ack for the batch; a batch
    # that fails goes one message at a time). The saga's state under its row lock decides what a
    # result means, so two results of one saga in a batch end as one after the other. Measured
    # (bench/withdrawal_bench.py, with wallet-consumer's withdrawals_batch alike): 60.6/s with
    # 16 single transactions at once, 78.5-87.0/s with batches of 16, 32 and 64; the
    # orchestrator's transactions a saga 4.6 -> 1.8. 64 since issue 26's callback batches
    # (docs/performance.md, 2026-12-05): the results queue was then the saga's only backlog
    # (20-90 results waiting each second in (i), a batch at a time), and 64 (with
    # withdrawals_batch alike) completed a median 1.16 x the sagas a second of 32 in six
    # interleaved pairs (0.82-1.24); 128 no more than 64.
    consumer_batch: int = 64
    # consumer_batch 0: the single path instead, this many results at once, each its own
    # transaction (core.consumer concurrency; the results queue is unordered).
    consumer_concurrency: int = 16

    # The relay (core/outbox.py) of withdrawal.outbox, inside this process. Its poll is what
    # finds rows whose hint was lost; the results consumer's commits wake it too.
    relay_batch: int = 200
    relay_poll_s: float = 1.0
    # The refresh of the gauges (sagas by state, outbox lag).
    metrics_interval_s: float = 15.0

    def review_above(self, currency: str) -> int:
        return self.review_above_minor_by_currency.get(currency, self.review_above_minor)

    @property
    def customer_issuer(self) -> str:
        return f"{self.customer_issuer_base.rstrip('/')}/realms/{self.customer_realm}"


@lru_cache(maxsize=1)
def get_withdrawal_settings() -> WithdrawalSettings:
    return WithdrawalSettings()
