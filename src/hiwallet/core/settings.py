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

    # Logging (core/logging.py): JSON lines on stderr. One access line per HTTP request unless
    # switched off; the file, if set, receives every line too (tests scan one for a whole run).
    access_log: bool = True
    log_level: str = "info"
    log_file: Path | None = None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
