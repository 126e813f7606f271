"""bank-adapter and bank-webhook settings: ``HIWALLET_BANK_*`` environment variables with local
defaults (the secrets and the key below are bank-fake's development defaults, the same as
topup-webhook's for the bank; production sets its own)."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated

from pydantic import IPvAnyNetwork, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.contracts.events import EVENTS_EXCHANGE
from hiwallet.contracts.topups import DEAD_LETTER_EXCHANGE
from hiwallet.contracts.withdrawals import (
    BANK_QUEUE,
    WITHDRAWALS_DEAD_LETTER_KEY,
    WITHDRAWALS_DEAD_LETTER_QUEUE,
    WITHDRAWALS_EXCHANGE,
)
from hiwallet.core.settings import NON_EMPTY_IN_PRODUCTION

# Two secrets at once: the one being retired and its successor, while the bank signs with both
# (rotation), as topup-webhook.
MAX_SECRETS = 2
# A StartBankTransfer's bank call runs inside the consumer's transaction: every attempt of it
# together must end well before the session's idle-in-transaction timeout (60 s, core/db.py).
MAX_BANK_CALL_BUDGET_S = 40.0


class BankSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_BANK_", extra="ignore")

    # bank-adapter: /health, /ready and /metrics only (no ingress: docs/architecture.md)
    adapter_port: int = 9102
    # bank-webhook: the bank's callbacks
    webhook_port: int = 8021
    # The database name; None means hiwallet_bank. Tests use clones.
    database: str | None = None
    # A connection per transaction in hand (one batch, or consumer_concurrency single ones), the
    # relay's wake-ups, the reconciliation and the gauges.
    db_pool_max_size: int = 20

    # The bank's API (bank-fake locally): transfers, and their status for the reconciliation.
    bank_url: str = "http://127.0.0.1:8094"
    bank_api_key: SecretStr = SecretStr("bank_dev_key")
    # One request's timeout, and how many attempts one StartBankTransfer makes in a row before
    # the consumer pauses (the message stays unacked, nothing is dead-lettered) and tries again.
    bank_timeout_s: float = 10.0
    bank_attempts: int = 3
    bank_retry_backoff_s: float = 0.2
    # Connections to the bank at once: at least one per command in hand (each makes its call
    # inside its transaction), with room for the reconciliation.
    bank_max_connections: int = 24

    # The bank's signing secrets for its callbacks (Standard Webhooks: whsec_<base64>), a JSON
    # list in the environment; the same secret scheme as topup-webhook's bank_secrets.
    webhook_secrets: list[SecretStr] = [SecretStr("whsec_ZGV2LWJhbmstZmFrZS1zZWNyZXQtMDEyMzQ1Njc4OQ==")]
    # How far a callback's timestamp may be from now, either way.
    tolerance_s: int = 300
    max_body_bytes: int = 65_536

    # The saga's topology: the results go to ``exchange`` (routing key = type), the commands
    # come from ``queue`` (contracts.withdrawals.withdrawals_topology() is declared at start; tests
    # pass their own names).
    exchange: str = WITHDRAWALS_EXCHANGE
    queue: str = BANK_QUEUE
    dead_letter_exchange: str = DEAD_LETTER_EXCHANGE
    dead_letter_key: str = WITHDRAWALS_DEAD_LETTER_KEY
    dead_letter_queue: str = WITHDRAWALS_DEAD_LETTER_QUEUE
    # A command the handler cannot handle (malformed) is tried this many times, then
    # dead-lettered. The bank being away is not counted (the consumer pauses).
    max_attempts: int = 5
    # Commands handled at once, each its own transaction with its bank call inside (core.consumer
    # concurrency; the queue is unordered: a transfer is keyed by its command id). One at a
    # time, a command's cycle (~25 ms, mostly the bank's answer) bound the saga to ~21/s.
    consumer_concurrency: int = 16
    # Or: commands in one transaction, up to this many at once (core.consumer's batch path, as
    # the orchestrator's and wallet-consumer's), the bank asked for the batch's new transfers
    # all at once before any is recorded (handler.py). 0: the single path above.
    consumer_batch: int = 16
    # At stop: how long the command in hand may take to finish (its bank call included).
    stop_timeout_s: float = 45.0

    # The relay of bank.outbox (core/outbox.py), inside bank-adapter.
    relay_batch: int = 100
    relay_poll_s: float = 1.0

    # The reconciliation (a PeriodicJob in bank-adapter; `hiwallet bank reconcile` by hand):
    # transfers pending for longer than stale_after are asked about at the bank, at most
    # reconcile_batch of them per round, oldest first.
    reconcile_interval_s: float = 14_400.0
    reconcile_stale_after_s: float = 3_600.0
    reconcile_batch: int = 500
    # Retention (a PeriodicJob in bank-adapter): applied callbacks (they hold the destination
    # IBAN) and sent outbox rows older than retention_h, deleted at most retention_batch at a time
    # and retention_max_batches times a round. The transfers stay.
    retention_h: int = 7 * 24
    retention_interval_s: float = 3_600.0
    retention_batch: int = 1_000
    retention_max_batches: int = 100
    metrics_interval_s: float = 15.0
    # The statement importer (statements.py, a PeriodicJob in bank-adapter; `hiwallet bank
    # statements` by hand): each round reads the MT940 statements of the complete days (UTC) of
    # the last statement_lookback_days not read yet and announces the wires each one shows
    # credited (SettlementReported to events_exchange: the bank's top-ups settled).
    statement_interval_s: float = 3_600.0
    statement_lookback_days: int = 7
    events_exchange: str = EVENTS_EXCHANGE

    @field_validator("webhook_secrets")
    @classmethod
    def _one_or_two_secrets(cls, secrets: list[SecretStr]) -> list[SecretStr]:
        if not 1 <= len(secrets) <= MAX_SECRETS or any(not s.get_secret_value().strip() for s in secrets):
            raise ValueError(f"between 1 and {MAX_SECRETS} non-empty signing secrets")
        return secrets

    @model_validator(mode="after")
    def _bank_call_bounded(self) -> BankSettings:
        if self.bank_attempts < 1 or self.bank_timeout_s <= 0:
            raise ValueError("bank_attempts >= 1 and bank_timeout_s > 0")
        budget = self.bank_attempts * (self.bank_timeout_s + self.bank_retry_backoff_s * self.bank_attempts)
        if budget > MAX_BANK_CALL_BUDGET_S:
            raise ValueError(
                f"bank_attempts x bank_timeout_s (with the back-off) is {budget:.0f} s; at most"
                f" {MAX_BANK_CALL_BUDGET_S:.0f} s (it runs inside a database transaction)"
            )
        if self.bank_max_connections < max(self.consumer_concurrency, self.consumer_batch):
            raise ValueError("bank_max_connections must be at least consumer_concurrency and consumer_batch")
        if self.reconcile_batch < 1 or self.reconcile_stale_after_s < 0:
            raise ValueError("reconcile_batch >= 1 and reconcile_stale_after_s >= 0")
        return self


@lru_cache(maxsize=1)
def get_bank_settings() -> BankSettings:
    return BankSettings()


class BankWebhookSettings(BaseSettings):
    """What bank-webhook reads besides :class:`BankSettings` (bank-adapter, which shares those,
    takes no callbacks: it must not refuse to start for want of these)."""

    model_config = SettingsConfigDict(env_prefix="HIWALLET_BANK_", extra="ignore")

    # The bank's address ranges (its published callback networks, CIDR, a JSON list): a
    # callback from any other client address is refused (403) before its body is read. The
    # socket's peer: bank-webhook reads no X-Forwarded-For, so a proxy in front must keep the
    # peer's address (or enforce the list itself). Empty: no restriction (a laptop; refused
    # with HIWALLET_PRODUCTION=true).
    webhook_networks: Annotated[list[IPvAnyNetwork], NON_EMPTY_IN_PRODUCTION] = []

    # Concurrent callbacks share one statement and one commit (bank.receive_callbacks through
    # core/coalesce.py, as topup-webhook's notifications): how many batches may be in flight at
    # once (0: each callback alone) and how many callbacks one holds. One writer drains (the
    # next batch gathers while one runs); another starts only when a batch has been in flight
    # for callback_spare_after_ms with callbacks waiting: a batch waiting on a transfer's lock
    # (bank-adapter records it, its commit to come) then no longer holds back the others.
    callback_writers: int = 4
    callback_max_batch: int = 64
    callback_spare_after_ms: int = 5


@lru_cache(maxsize=1)
def get_bank_webhook_settings() -> BankWebhookSettings:
    return BankWebhookSettings()
