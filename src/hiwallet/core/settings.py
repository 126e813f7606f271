"""Configuration: environment variables prefixed ``HIWALLET_``, with working local defaults."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

# The repository root when installed editable (src layout): src/hiwallet/core/settings.py -> ../../..
_REPO_ROOT = Path(__file__).resolve().parents[3]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_", extra="ignore")

    # A server URL; each service appends its own database name (docs/architecture.md).
    # Services connect as their database's application role (core/db.py, app_role) when the URL
    # names no user, else as the user it names (a deployment's per-service URL with a password).
    database_url: str = "postgresql://localhost:5432"
    # The server URL of the owner: migrations (`hiwallet migrate` creates the roles and grants),
    # `hiwallet schema dump`, the tests' and the bench's set-up. Unset: database_url without its
    # user, which connects as PGUSER or the login user (on a local trust-auth server, a
    # superuser; in production, a role that owns the schemas and may create roles).
    migrate_database_url: str | None = None
    amqp_url: str = "amqp://guest:guest@localhost:5672/"
    migrations_dir: Path = _REPO_ROOT / "migrations"

    # Limits on every database session (TIGER_STYLE): nothing waits forever on a lock or a query.
    db_statement_timeout_ms: int = 5_000
    db_lock_timeout_ms: int = 2_000
    db_command_timeout_s: float = 10.0
    db_pool_min_size: int = 1
    db_pool_max_size: int = 10

    # Ledger: add transit legs so every per-bucket part of a transaction balances on its own
    # (needed on Citus; off on one node). CI runs the ledger suite with it on as well.
    ledger_transit_legs: bool = False
    # Concurrent plain postings share a round trip and a commit (core/coalesce.py): how many
    # batches may be in flight at once (0: every posting alone), and how large one may grow.
    ledger_coalesce_writers: int = 4
    ledger_coalesce_max_batch: int = 100
    ledger_payment_fee_bps: int = 200  # 2 % of the amount, rounded half up, to revenue
    ledger_payment_fee_min_minor: int = 0
    ledger_withdrawal_fee_minor: int = 200  # a flat fee per withdrawal, in minor units

    # Logging (core/logging.py): JSON lines on stderr. One access line per HTTP request unless
    # switched off; the file, if set, receives every line too (tests scan one for a whole run).
    access_log: bool = True
    log_level: str = "info"
    log_file: Path | None = None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
