"""wallet-consumer settings: ``HIWALLET_WALLET_CONSUMER_*`` environment variables with local
defaults (the broker's URL and the database server are the core settings' ``HIWALLET_AMQP_URL``
and ``HIWALLET_DATABASE_URL``)."""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class WalletConsumerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_WALLET_CONSUMER_", extra="ignore")

    # /health, /ready and /metrics only (CONTRACT-10)
    port: int = 9101
    # The database name; empty means hiwallet_wallet. Tests use clones.
    database: str = ""
    # hiwallet.topups.p0 .. p{partitions-1} (core.broker.topups_topology)
    partitions: int = 4
    # One message at a time per queue: with single active consumer, a wallet's messages are
    # handled in the order they were published to its partition.
    prefetch: int = 1
    # A message the handler cannot handle (Unprocessable, a defect) is tried this many times,
    # then dead-lettered with its reason. A database outage is not counted (the consumer pauses).
    max_attempts: int = 5
    # One connection per queue being handled, one for the ledger's reads (a reused key), one
    # for /ready and the unattributed count.
    db_pool_max_size: int = 8
    # How often the unattributed top-ups gauge is refreshed from the database.
    unattributed_refresh_s: float = 30.0
    # How long a stop waits for the message in hand to finish before it gives up on it (it is
    # then redelivered: the processed_events row makes that harmless).
    stop_timeout_s: float = 10.0
    # Process name the broker shows (RabbitMQ's connection_name).
    client_name: str = "wallet-consumer"


@lru_cache(maxsize=1)
def get_wallet_consumer_settings() -> WalletConsumerSettings:
    return WalletConsumerSettings()
