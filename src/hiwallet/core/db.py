"""PostgreSQL: server URLs, pools with timeouts, database creation and numbered migrations.

What a retry can cure is decided here, once: :func:`is_transient` (answered 503 "unavailable")
and :func:`is_connection_error` (a connection to discard). Each service translates the driver
errors of its own statements with them: the ledger in ``hiwallet.ledger.store.translate`` (and
for a statement that posts through it, ``Ledger.error_of``), wallet-api in
``hiwallet.wallet_api.retry``; anything they do not recognize is a defect (a 500), never "retry".
A pool that cannot be opened is :class:`DatabaseUnavailable`.
"""

from __future__ import annotations

import errno
import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import structlog

from hiwallet.core.settings import Settings, get_settings

log = structlog.get_logger(__name__)

# One database per service (SYSTEM.md). The key is the migrations folder's name.
DATABASES: dict[str, str] = {
    "wallet": "hiwallet_wallet",
    "identity": "hiwallet_identity",
    "staff_identity": "hiwallet_staff_identity",
}

# Databases that share one schema share one migrations folder: the staff realm's identity
# database is the customer realm's schema on its own server.
MIGRATION_FOLDERS: dict[str, str] = {"staff_identity": "identity"}

_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Any constant works; it only has to be the same for every process that migrates.
_MIGRATION_LOCK_KEY = 0x68_69_77_6D  # "hiwm"


class DatabaseUnavailable(Exception):
    """The database could not be reached or failed in a way no caller can act on."""


# What a retry can cure, by SQLSTATE: the connection (class 08), the server going away or
# refusing connections (57P01-57P03, 53300), our own statement and lock timeouts (57014,
# 55P03), and a deadlock or serialization failure (40P01, 40001; callers retry these a few
# times themselves before giving up with "unavailable"). Anything else - a data error, an
# invariant trigger, an unmapped constraint, an unknown state - is a defect: a 500, never
# "retry later" (fail closed).
TRANSIENT_SQLSTATES = frozenset(
    {"40001", "40P01", "53300", "55P03", "57014", "57P01", "57P02", "57P03", "58000", "58030"}
)
TRANSIENT_SQLSTATE_CLASSES = frozenset({"08"})
_NETWORK_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ETIMEDOUT,
        errno.EPIPE,
    }
)


def is_connection_error(exc: BaseException) -> bool:
    """The connection itself failed or is in an unknown state: it must be discarded, never
    returned to a pool (asyncpg's ``InternalClientError`` "cannot switch to state" came from a
    connection reused after the server went away)."""
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return state[:2] in TRANSIENT_SQLSTATE_CLASSES or state in {"57P01", "57P02", "57P03"}
    if isinstance(exc, OSError) and not isinstance(exc, ConnectionError | TimeoutError):
        # A network failure only (a refused or unreachable server; asyncio's "Multiple
        # exceptions" has no errno), not any OSError: a missing file is a defect, not "retry".
        return exc.errno is None or exc.errno in _NETWORK_ERRNOS
    return isinstance(
        exc,
        asyncpg.InterfaceError  # closed connection, "another operation is in progress", ...
        | asyncpg.InternalClientError
        | ConnectionError
        | TimeoutError,
    )


def is_transient(exc: BaseException) -> bool:
    """Whether a retry (with the same idempotency key) can cure ``exc``: the only database
    errors that may be answered 503 "unavailable". Looks through ``raise ... from`` chains."""
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk of the cause chain
        if seen is None:
            return False
        if is_connection_error(seen):
            return True
        if isinstance(seen, asyncpg.PostgresError):
            state = getattr(seen, "sqlstate", None) or ""
            return state in TRANSIENT_SQLSTATES or state[:2] in TRANSIENT_SQLSTATE_CLASSES
        seen = seen.__cause__
    return False


def dsn_for(database: str, settings: Settings | None = None) -> str:
    """The server URL from settings with its path replaced by ``database``."""
    settings = settings or get_settings()
    parts = urlsplit(settings.database_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


def server_settings(settings: Settings) -> dict[str, str]:
    # Every session gets a statement and a lock timeout: a stuck lock holder surfaces as an
    # error instead of a silent pile-up of waiting requests.
    return {
        "statement_timeout": str(settings.db_statement_timeout_ms),
        "lock_timeout": str(settings.db_lock_timeout_ms),
        "idle_in_transaction_session_timeout": "60000",
        "application_name": "hiwallet",
    }


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without asyncpg's default reset query (a round trip per release: advisory
    unlock, CLOSE ALL, UNLISTEN, RESET ALL). Pooled sessions here hold no session state: no SET
    outside a transaction, no LISTEN, no session advisory locks (jobs and migrations use their
    own connections). An open transaction is still rolled back by asyncpg before this runs.

    A broken connection is not kept either: asyncpg closes one that failed at the connection
    level, and the pool opens a fresh one. An idle pooled connection whose server went away
    fails its next use once (``InternalClientError`` or ``ConnectionDoesNotExistError``, both
    :func:`is_transient`: 503, and the client's retry with the same key succeeds); a liveness
    probe on every acquire would cost a round trip per request to spare that one failure.
    tests/core/test_db_faults.py holds asyncpg to this."""


async def create_pool(
    database: str,
    *,
    settings: Settings | None = None,
    min_size: int | None = None,
    max_size: int | None = None,
    init: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
) -> asyncpg.Pool:
    settings = settings or get_settings()
    try:
        pool = await asyncpg.create_pool(
            dsn_for(database, settings),
            min_size=settings.db_pool_min_size if min_size is None else min_size,
            max_size=settings.db_pool_max_size if max_size is None else max_size,
            command_timeout=settings.db_command_timeout_s,
            server_settings=server_settings(settings),
            init=init,
            reset=_keep_session,
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(f"cannot open a pool to {database}: {exc}") from exc
    assert pool is not None
    return pool


async def ensure_database(database: str, settings: Settings | None = None) -> bool:
    """Create ``database`` if it does not exist. Returns True if this call created it.

    Safe when several processes race: the loser's ``duplicate_database`` is the answer "exists".
    """
    settings = settings or get_settings()
    conn = await asyncpg.connect(dsn_for("postgres", settings))
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
        if exists:
            return False
        try:
            # Identifiers cannot be parameters; the name comes from DATABASES or a test fixture.
            await conn.execute(f'CREATE DATABASE "{database}"')
        except (asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
            return False
        return True
    finally:
        await conn.close()


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(folder: Path) -> list[Migration]:
    found: list[Migration] = []
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION_FILE.match(path.name)
        if not match:
            raise ValueError(f"migration file name {path.name!r} is not NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"duplicate migration numbers in {folder}")
    return found


class MigrationChanged(Exception):
    """An applied migration's file was edited afterwards; migrations are append-only."""


async def apply_migrations(conn: asyncpg.Connection, migrations: Sequence[Migration]) -> list[int]:
    """Apply what is missing, each file in its own transaction, under one advisory lock.

    The session-level advisory lock makes concurrent ``hiwallet migrate`` runs queue up: the
    second one waits, then finds everything applied and does nothing.
    """
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
    try:
        await conn.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version    integer     PRIMARY KEY,
                name       text        NOT NULL,
                checksum   text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        applied = {
            r["version"]: r["checksum"]
            for r in await conn.fetch("SELECT version, checksum FROM schema_migrations")
        }
        done: list[int] = []
        for m in migrations:
            if m.version in applied:
                if applied[m.version] != m.checksum:
                    raise MigrationChanged(f"migration {m.version:04d}_{m.name} changed after it ran")
                continue
            async with conn.transaction():
                await conn.execute(m.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    m.version,
                    m.name,
                    m.checksum,
                )
            log.info("migration applied", version=m.version, name=m.name)
            done.append(m.version)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)


async def migrate(key: str, database: str | None = None, settings: Settings | None = None) -> list[int]:
    """Create the database of ``key`` if needed and apply its migrations."""
    settings = settings or get_settings()
    database = database or DATABASES[key]
    await ensure_database(database, settings)
    migrations = load_migrations(settings.migrations_dir / MIGRATION_FOLDERS.get(key, key))
    conn = await asyncpg.connect(dsn_for(database, settings))
    try:
        return await apply_migrations(conn, migrations)
    finally:
        await conn.close()
