"""Configuration: environment variables prefixed ``HIWALLET_``, with working local defaults.

The defaults work on a laptop, and the secrets among them ship in this repository. A deployment
sets ``HIWALLET_PRODUCTION=true``: every process then checks its settings at start
(:func:`refuse_insecure_start`, from each service's ``run_*`` entry point) and refuses to start,
naming the settings, on a development secret, on an empty list that must restrict something
(:data:`NON_EMPTY_IN_PRODUCTION`), or with a test fault hook set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
from pydantic import SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PG_SCHEMES = frozenset({"postgresql", "postgres"})
# The repository root when installed editable (src layout): src/hiwallet/core/settings.py -> ../../..
_REPO_ROOT = Path(__file__).resolve().parents[3]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_", extra="ignore")

    # A server URL; each service appends its own database name (docs/architecture.md).
    # Services connect as their database's application role (core/db.py, app_role) when the URL
    # names no user, else as the user it names (a deployment's per-service URL with a password).
    # The URLs are secrets (they may carry a password): never printed with the settings.
    database_url: SecretStr = SecretStr("postgresql://localhost:5432")
    # The server URL of the owner: migrations (`hiwallet migrate` creates the roles and grants),
    # `hiwallet schema dump`, the tests' and the bench's set-up. Unset: database_url without its
    # user, which connects as PGUSER or the login user (on a local trust-auth server, a
    # superuser; in production, a role that owns the schemas and may create roles).
    migrate_database_url: SecretStr | None = None
    # Databases on servers of their own (the architecture puts onboarding's personal data,
    # staff-admin and the staff realm's identity apart): the database's name -> its server URL,
    # the same form as database_url (a JSON object in the environment). A database not named
    # here is on database_url's server. Every connection to it follows: the services', their
    # commands', migrate's and its creation's.
    database_servers: dict[str, SecretStr] = {}
    # The owner's server URL of such a database (migrate, schema dump); unset for one named
    # above: its database_servers URL without its user (as migrate_database_url's default).
    migrate_database_servers: dict[str, SecretStr] = {}
    amqp_url: SecretStr = SecretStr("amqp://guest:guest@localhost:5672/")
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
    # Traces (core/tracing.py): an OTLP/HTTP collector's base URL (http://host:4318); unset, no
    # tracing at all (no provider, no span, nothing patched).
    otel_endpoint: str | None = None

    # A deployment: every process refuses to start on a development value (refuse_insecure_start).
    production: bool = False

    @field_validator("database_servers", "migrate_database_servers")
    @classmethod
    def _server_urls(cls, servers: dict[str, SecretStr]) -> dict[str, SecretStr]:
        # A typo must stop the start, not send a database's connections to the shared server.
        for database, url in servers.items():
            parts = urlsplit(url.get_secret_value())
            server = parts.scheme in _PG_SCHEMES and bool(parts.hostname)
            if not _DATABASE_NAME.fullmatch(database) or not server:
                raise ValueError(
                    f"{database!r}: a database name (lower-case) and a postgresql://host[:port] server URL"
                )
        return servers

    @model_validator(mode="after")
    def _owner_on_the_same_server(self) -> Settings:
        # An owner's URL for a database whose services connect elsewhere: one of the two is wrong.
        if stray := sorted(set(self.migrate_database_servers) - set(self.database_servers)):
            raise ValueError(f"migrate_database_servers names {stray}, which database_servers does not")
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


class _NonEmptyInProduction:
    """The marker of :data:`NON_EMPTY_IN_PRODUCTION`."""

    def __repr__(self) -> str:
        return "NON_EMPTY_IN_PRODUCTION"


# ``Annotated[list[str], NON_EMPTY_IN_PRODUCTION]``: a setting whose empty value means "no
# restriction" (an allow-list). Fine on a laptop, refused with production on.
NON_EMPTY_IN_PRODUCTION = _NonEmptyInProduction()


class _OffInProduction:
    """The marker of :data:`OFF_IN_PRODUCTION`."""

    def __repr__(self) -> str:
        return "OFF_IN_PRODUCTION"


# ``Annotated[bool, OFF_IN_PRODUCTION]``: a development switch that lowers a guard (webhooks to
# private addresses, for a laptop's receivers). Refused on with production on.
OFF_IN_PRODUCTION = _OffInProduction()
# A shipped secret that is part of a longer value (a key ring "new:…,dev1:…" still holding the
# development key) is refused too; shorter ones only when they are the whole value.
_MIN_CONTAINED_CHARS = 8
# The shape of every client secret in this repository (identity's realm files, the services'
# defaults): refused wherever it is set, whichever client's it is.
_DEV_CLIENT_SECRET = re.compile(r"\bdev-[a-z0-9-]+-secret\b")
# RabbitMQ's default user, which the default HIWALLET_AMQP_URL names.
_BROKER_DEV_CREDENTIALS = ("guest", "guest")


class InsecureSettings(SystemExit):
    """A production start refused: the message names every setting at fault (never its value).
    A SystemExit: the process ends with the message and status 1, whoever called."""


def env_name(settings: BaseSettings, field: str) -> str:
    """The environment variable of ``field`` of ``settings``."""
    return (str(settings.model_config.get("env_prefix") or "") + field).upper()


def _texts(value: Any) -> list[str] | None:
    """The text of a secret (or of each secret of a list); None when ``value`` is no secret."""
    if isinstance(value, SecretStr):
        return [value.get_secret_value()]
    if isinstance(value, list | tuple) and value and all(isinstance(v, SecretStr) for v in value):
        return [v.get_secret_value() for v in value]
    return None


def _shipped(default: Any) -> set[str]:
    """The development values a field's default holds (a secret or a list of them). A URL's
    default without a password (the local database or Redis) holds none: it is a secret only for
    what a deployment may put in it."""
    if isinstance(default, SecretStr):
        value = default.get_secret_value()
        if "://" in value and urlsplit(value).password is None:
            return set()
        return {value}
    if isinstance(default, str):
        return {default}
    if isinstance(default, list | tuple):
        return set().union(*(_shipped(d) for d in default)) if default else set()
    return set()


def is_development_value(secret: str, development_values: Iterable[str]) -> bool:
    """Whether ``secret`` is (or holds) one of ``development_values``, or is shaped as the
    repository's development client secrets are (dev-<client>-secret)."""
    if _DEV_CLIENT_SECRET.search(secret):
        return True
    return any(
        known and (secret == known or (len(known) >= _MIN_CONTAINED_CHARS and known in secret))
        for known in development_values
    )


def insecure_settings(settings: BaseSettings, development_values: Collection[str] = ()) -> list[str]:
    """What production refuses in ``settings``, one sentence per setting, naming its
    environment variable: a secret (a ``SecretStr`` or a list of them) that is empty, is its own
    default or is one of ``development_values`` (another service's shipped default for the same
    thing); an empty :data:`NON_EMPTY_IN_PRODUCTION` setting; an :data:`OFF_IN_PRODUCTION` switch
    on; a set ``*fault*`` setting."""
    problems: list[str] = []
    for name, field in type(settings).model_fields.items():
        value = getattr(settings, name)
        env = env_name(settings, name)
        if any(m is NON_EMPTY_IN_PRODUCTION for m in field.metadata) and not value:
            problems.append(f"{env} is empty (no restriction)")
        if any(m is OFF_IN_PRODUCTION for m in field.metadata) and value:
            problems.append(f"{env} is on (development only)")
        if "fault" in name and value:
            problems.append(f"{env} is a test fault hook")
        texts = _texts(value)
        if texts is None:
            continue
        known = _shipped(field.default) | set(development_values)
        if any(not t.strip() for t in texts):
            problems.append(f"{env} is empty")
        elif any(is_development_value(t, known) for t in texts):
            problems.append(f"{env} holds a development secret that ships in this repository")
    return problems


def fault_hooks(environ: Mapping[str, str]) -> list[str]:
    """The test fault hooks set in ``environ``: ``HIWALLET_*FAULT*`` variables (e.g. onboarding's
    HIWALLET_ONBOARDING_FAULT_AFTER_USER_CREATED), read by a process at any time."""
    return sorted(
        name for name, value in environ.items() if name.startswith("HIWALLET_") and "FAULT" in name and value
    )


def refuse_insecure_start(
    *service_settings: BaseSettings,
    development_values: Collection[str] = (),
    named_secrets: Mapping[str, str] | None = None,
    core: Settings | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """With ``HIWALLET_PRODUCTION=true``: raise :class:`InsecureSettings` (after an error line)
    if the core settings, any of ``service_settings`` (:func:`insecure_settings`) or any of
    ``named_secrets`` (environment variable -> the secret in use, for secrets outside pydantic
    settings) holds a development value, or a test fault hook is set. Without the flag: nothing.
    Each deployable calls it from its process entry point, before anything starts."""
    core = core or get_settings()
    if not core.production:
        return
    environ = os.environ if environ is None else environ
    problems = insecure_settings(core, development_values)
    broker = urlsplit(core.amqp_url.get_secret_value())
    if (broker.username, broker.password) == _BROKER_DEV_CREDENTIALS:
        problems.append(f"{env_name(core, 'amqp_url')} uses RabbitMQ's development user guest")
    for settings in service_settings:
        problems += insecure_settings(settings, development_values)
    for env, secret in (named_secrets or {}).items():
        if not secret.strip():
            problems.append(f"{env} is empty")
        elif is_development_value(secret, development_values):
            problems.append(f"{env} holds a development secret that ships in this repository")
    problems += [f"{name} is a test fault hook" for name in fault_hooks(environ)]
    if problems:
        unique = list(dict.fromkeys(problems))
        # The names only, never a value: the line may go to a shared log.
        structlog.get_logger(__name__).error("production start refused", problems=unique)
        raise InsecureSettings(f"HIWALLET_PRODUCTION=true, refusing to start: {'; '.join(unique)}")
