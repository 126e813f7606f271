"""The ledger's configuration: ``HIWALLET_LEDGER_*`` environment variables, read by every
process that posts (wallet-api, wallet-consumer, the command line)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class LedgerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_LEDGER_", extra="ignore")

    # Add transit legs so every per-bucket part of a transaction balances on its own (needed on
    # Citus; off on one node). CI runs the ledger suite with it on as well.
    transit_legs: bool = False
    # Concurrent plain postings share a round trip and a commit (core/coalesce.py): how many
    # batches may be in flight at once (0: every posting alone), and how large one may grow.
    coalesce_writers: int = Field(default=4, ge=0, le=64)
    coalesce_max_batch: int = Field(default=100, ge=1, le=10_000)
    # What a writer takes is sent as up to this many batches at once (at most the writers), no
    # two of which lock the same account: a burst of callers that sent in the same turn of the
    # event loop is not one batch in flight at a time (1: one batch).
    coalesce_parts: int = Field(default=2, ge=1, le=64)
    payment_fee_bps: int = Field(default=200, ge=0, le=10_000)  # 2 % of the amount, rounded half up
    payment_fee_min_minor: int = Field(default=0, ge=0)
    withdrawal_fee_minor: int = Field(default=200, ge=0)  # a flat fee per withdrawal, in minor units


@lru_cache(maxsize=1)
def get_ledger_settings() -> LedgerSettings:
    return LedgerSettings()
