"""merchant-webhooks settings: ``HIWALLET_MERCHANT_WEBHOOKS_*`` environment variables with local
defaults (docs/webhooks.md)."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.contracts.merchant_events import DEV_SECRET_KEYS
from hiwallet.core.settings import OFF_IN_PRODUCTION

# After the n-th failed attempt, the next one is this many seconds later (times 1 to
# 1 + retry_jitter): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, 14 h, 15 h, 16 h, 72.6 h in all,
# so a delivery is tried for three days (Svix's schedule, the model: immediately, 5 s, 5 min,
# 30 min, 2 h, 5 h, 10 h, 10 h, about 27.6 h, stretched to three days by three more).
DEFAULT_SCHEDULE_S = [5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0, 50400.0, 54000.0, 57600.0]


class MerchantWebhooksSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_MERCHANT_WEBHOOKS_", extra="ignore")

    # /health, /ready and /metrics only (no ingress)
    port: int = 9103
    # The database name; empty means hiwallet_wallet. Tests and the bench use clones.
    database: str = ""
    db_pool_max_size: int = 6
    # The endpoints' sealed signing secrets open with this ring: wallet-api's
    # (HIWALLET_WALLET_API_WEBHOOK_SECRET_KEYS), the same keys.
    secret_keys: SecretStr = SecretStr(DEV_SECRET_KEYS)
    # Development only (refused in production): deliver to private, loopback, link-local
    # addresses (`hiwallet up` and the tests' receivers on 127.0.0.1).
    allow_private_targets: Annotated[bool, OFF_IN_PRODUCTION] = False
    dns_timeout_s: float = 2.0

    # Delivery: deliveries claimed a round (FOR UPDATE SKIP LOCKED), sent at most this many at
    # once; each call bounded (connect, and the whole answer's time).
    batch_size: int = 200
    concurrency: int = 64
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 15.0
    # A claimed delivery is claimed again after this long if its attempt was never recorded (the
    # process died): longer than any attempt can take.
    lease_s: float = 120.0
    # A receiver's answer is read up to this (its body is ignored; a larger one fails).
    max_response_bytes: int = 65_536
    # Events made into deliveries a round.
    fan_out_batch: int = 1000
    # Woken by pg_notify after a writer's commit; polls this often anyway (a lost hint, a retry
    # that comes due).
    poll_interval_s: float = 0.5

    retry_schedule_s: list[float] = DEFAULT_SCHEDULE_S
    retry_jitter: float = 0.2
    # An endpoint whose every attempt failed for this long is disabled, and its business told.
    disable_after_s: float = 3 * 24 * 3600.0

    user_agent: str = "HiWallet-Webhooks/1"

    # Retention: an event, its deliveries and their attempts are deleted once the event is this
    # old and nothing of it is pending (Stripe keeps events 30 days; the retry schedule ends
    # after three). A round an hour, in batches: at most purge_batch × purge_max_batches events.
    retention_days: float = Field(default=30.0, ge=4.0)
    purge_interval_s: float = Field(default=3600.0, gt=0)
    purge_batch: int = Field(default=1000, ge=1, le=10_000)
    purge_max_batches: int = Field(default=100, ge=1)


@lru_cache(maxsize=1)
def get_merchant_webhooks_settings() -> MerchantWebhooksSettings:
    return MerchantWebhooksSettings()
