"""topup-webhook settings: ``HIWALLET_TOPUP_*`` environment variables with local defaults (the
secrets and keys below are the fakes' development defaults; production sets its own)."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.contracts.events import EVENTS_EXCHANGE
from hiwallet.contracts.topups import TOPUPS_EXCHANGE
from hiwallet.core.settings import NON_EMPTY_IN_PRODUCTION

# Two secrets at once: the one being retired and its successor, while the provider signs with
# both (rotation). More would only widen what a leaked old secret can still sign.
MAX_SECRETS = 2


class TopupWebhookSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_TOPUP_", extra="ignore")

    port: int = 8020
    # The database name; None means hiwallet_topup. Tests use clones.
    database: str | None = None
    db_pool_max_size: int = 10

    # Signing secrets per provider, as the provider shows them (Stripe's whsec_<text>, used as
    # its bytes; Standard Webhooks' whsec_<base64>, used decoded). A JSON list in the environment.
    stripe_secrets: list[SecretStr] = [SecretStr("whsec_dev_stripe_fake_0123456789abcdef")]
    bank_secrets: list[SecretStr] = [SecretStr("whsec_ZGV2LWJhbmstZmFrZS1zZWNyZXQtMDEyMzQ1Njc4OQ==")]
    # How far a signature's timestamp may be from now: older for both schemes, newer too for
    # Standard Webhooks (Stripe's own library accepts a timestamp from the future; so do we).
    tolerance_s: int = 300
    max_body_bytes: int = 65_536
    # The providers' address ranges (the card provider's and the bank's published webhook
    # networks, CIDR, a JSON list): a notification from any other client address is refused
    # (403) before its body is read. The socket's peer: this service reads no X-Forwarded-For,
    # so a proxy in front must keep the peer's address (or enforce the list itself). Empty: no
    # restriction (a laptop; refused with HIWALLET_PRODUCTION=true).
    provider_networks: Annotated[list[IPvAnyNetwork], NON_EMPTY_IN_PRODUCTION] = []

    # Concurrent notifications share one statement and one commit (topup.ingest_batch through
    # core/coalesce.py): how many batches may be in flight at once (0: each notification alone)
    # and how many notifications one holds. One writer drains (the next batch gathers while one
    # runs: the biggest batches); another starts only when a batch has been in flight for
    # ingest_spare_after_ms with notifications waiting: a slow commit (the WAL flush waiting on
    # a busy disk) or a lock held elsewhere then no longer holds back everything behind it.
    # Measured (bench/topup_bench.py's shape, runs interleaved): 5 ms ahead of 50 ms, 10 ms, 2 ms
    # and no wait at all.
    ingest_writers: int = 4
    ingest_max_batch: int = 64
    ingest_spare_after_ms: int = 5

    # Where TopupRecorded goes (the relay declares contracts.topups.topups_topology() at start; tests
    # pass their own names).
    exchange: str = TOPUPS_EXCHANGE
    # The relay (core/outbox.py) and the periodic jobs (core/jobs.py), inside this process.
    relay_batch: int = 200
    relay_poll_s: float = 1.0
    # Under load, relay passes start at most this often (core.outbox.Relay: fewer, bigger
    # batches; a row after a quiet moment leaves at once). 0: a pass per wake-up. Measured
    # (bench/topup_bench.py's shape, interleaved runs): 20 ms sent ~12 % more webhooks a second
    # than 0 (the relay shares this process's event loop), at most 20 ms more on the way to
    # the ledger.
    relay_min_pass_interval_ms: int = 20
    reconcile_interval_s: float = 900.0
    # How far back each reconciliation round asks the providers.
    reconcile_window_s: int = 86_400
    # A listing is read in pages; at most this many per provider and round (a runaway listing
    # stops here, logged; the next round starts again).
    reconcile_max_pages: int = 100
    retention_days: int = 30
    retention_interval_s: float = 3_600.0
    retention_batch: int = 1_000
    # The rounds of one retention run; the rest waits for the next run.
    retention_max_batches: int = 100
    metrics_interval_s: float = 15.0

    # The settlement importer (settlements.py): every settlement_interval_s it reads the
    # providers' payouts of the last settlement_window_s and announces each new one
    # (SettlementReported to events_exchange). Stripe's model by our contract with it: net
    # (it keeps its fee from each payout) or gross (it pays out whole and invoices its fees).
    settlement_interval_s: float = Field(default=3_600.0, gt=0)
    settlement_window_s: int = Field(default=7 * 86_400, gt=0)
    settlement_max_pages: int = Field(default=100, ge=1, le=10_000)
    stripe_settlement_model: Literal["gross", "net"] = "net"
    events_exchange: str = EVENTS_EXCHANGE

    # The providers' APIs (their listings, for the reconciliation).
    stripe_url: str = "http://127.0.0.1:8096"
    bank_url: str = "http://127.0.0.1:8094"
    stripe_api_key: SecretStr = SecretStr("sk_test_hiwallet_dev")
    bank_api_key: SecretStr = SecretStr("bank_dev_key")
    provider_timeout_s: float = 10.0

    @field_validator("stripe_secrets", "bank_secrets")
    @classmethod
    def _one_or_two_secrets(cls, secrets: list[SecretStr]) -> list[SecretStr]:
        if not 1 <= len(secrets) <= MAX_SECRETS or any(not s.get_secret_value().strip() for s in secrets):
            raise ValueError(f"between 1 and {MAX_SECRETS} non-empty signing secrets")
        return secrets

    def secrets_of(self, provider: str) -> list[str]:
        """The signing secrets of ``provider``, revealed (for its verifier)."""
        secrets = self.stripe_secrets if provider == "stripe" else self.bank_secrets
        return [s.get_secret_value() for s in secrets]


@lru_cache(maxsize=1)
def get_topup_webhook_settings() -> TopupWebhookSettings:
    return TopupWebhookSettings()
