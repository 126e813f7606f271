"""PostgreSQL: server URLs, pools with timeouts, database creation, numbered migrations, and the
roles that separate who may change the schema from who may only use it.

Roles (docs/ledger.md, "Who may write"): the owner (``migrate_database_url``) runs migrations
and owns every object; each database has an application role, which services connect as, with
only the privileges its service needs, and a read-only role for ``verify`` and reports. The
ledger's tables are written only through its posting functions (``SECURITY DEFINER``), so a
compromised service can move money only as the ledger's rules allow, never rewrite it.

What a retry can cure is decided here, once: :func:`is_transient` (answered 503 "unavailable")
and :func:`is_connection_error` (a connection to discard). What is done again, and how often,
is the unit of work's one policy (:mod:`hiwallet.core.uow`). Each service translates the driver
errors of its own statements with them: the ledger in ``hiwallet.ledger.store.translate`` (and
for a statement that posts through it, ``Ledger.error_of``), wallet-api in
``hiwallet.wallet_api.retry``; anything they do not recognize is a defect (a 500), never "retry".
A pool that cannot be opened is :class:`DatabaseUnavailable`.
"""

from __future__ import annotations

import contextvars
import errno
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import structlog

from hiwallet.core.settings import Settings, get_settings

log = structlog.get_logger(__name__)

# Every database of the deployment is named hiwallet_<key>; which keys exist is the deployment's
# registry (hiwallet.contracts.databases), not the platform's.
DATABASE_PREFIX = "hiwallet_"

_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Files in a migrations folder that are not numbered migrations: the grants, applied again at
# the end of every migrate, and the generated schema (core/schema.py).
GRANTS_FILE = "grants.sql"
SCHEMA_FILE = "schema.sql"
_NOT_MIGRATIONS = frozenset({GRANTS_FILE, SCHEMA_FILE})
# Any constant works; it only has to be the same for every process that migrates.
_MIGRATION_LOCK_KEY = 0x68_69_77_6D  # "hiwm"


class DatabaseUnavailable(Exception):
    """The database could not be reached or failed in a way no caller can act on."""


class DatabaseMisconfigured(Exception):
    """The settings or the server's roles are not as this code needs them; nothing is started.
    The message says what to change."""


def app_role(key: str, service: str | None = None) -> str:
    """The application role of database ``key``: what its service connects as; with
    ``service``, the role of another service of that database (one that shares it with the
    first, with a role of its own: the deployment's registry says which, and migrate makes
    them). One per database key, not per database name: roles are cluster-wide, and the tests'
    and the bench's databases of a key share its roles (their grants are per database, made by
    migrate)."""
    if service is None:
        return f"hiwallet_{key}_app"
    return f"hiwallet_{service}_app"


def readonly_role(key: str) -> str:
    """The read-only role of database ``key``: ``verify``, reports (SELECT only)."""
    return f"hiwallet_{key}_readonly"


def database_name(key: str) -> str:
    """The database of key ``key`` (``wallet`` -> ``hiwallet_wallet``)."""
    return f"{DATABASE_PREFIX}{key}"


# What a retry can cure, by SQLSTATE: the connection (class 08), the server going away or
# refusing connections (57P01-57P03, 53300), our own statement and lock timeouts (57014,
# 55P03), and a deadlock or serialization failure (40P01, 40001; core.uow does the unit of work
# again a few times before giving up with "unavailable"). Anything else - a data error, an
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


def store_error(
    exc: Exception,
    *,
    refused: Callable[[str], Exception],
    unavailable: Callable[[str], Exception],
) -> Exception:
    """The driver's error ``exc`` as a store's own, its cause kept: what the content caused
    (class 22, the value and not the moment, which no retry changes) as ``refused(sqlstate)``,
    what a retry can cure (:func:`is_transient`) as ``unavailable(the error's type name)``, else
    ``exc`` itself (a defect, to raise as it is)."""
    error: Exception
    if isinstance(exc, asyncpg.DataError):
        error = refused(exc.sqlstate)
    elif is_transient(exc):
        error = unavailable(type(exc).__name__)
    else:
        return exc
    error.__cause__ = exc
    return error


def _unsplit(scheme: str, netloc: str, path: str, query: str, fragment: str = "") -> str:
    # urlunsplit drops the "//" of an empty host ("postgresql:/db?host=/var/run/postgresql"),
    # which asyncpg reads but libpq (pgbench, pg_dump) refuses; a server on its Unix socket is
    # named so (docs/performance.md, issue 26), so the "//" is kept whatever the host.
    url = urlunsplit(("", "", path, query, fragment))
    return f"{scheme}://{netloc}{url}"


def _with_database(url: str, database: str, user: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", user):
            raise DatabaseMisconfigured(f"role name {user!r} is not a plain lower-case identifier")
        netloc = f"{user}@{netloc.rpartition('@')[2]}"
    return _unsplit(parts.scheme, netloc, "/" + database, parts.query, parts.fragment)


def server_url(database: str, settings: Settings | None = None) -> str:
    """The URL of the server ``database`` is on, as the services connect: its own
    (``database_servers``) or the shared one (``database_url``)."""
    settings = settings or get_settings()
    own = settings.database_servers.get(database)
    return (own or settings.database_url).get_secret_value()


def _without_user(url: str) -> str:
    # The default user of the client (PGUSER or the login user), the superuser of a local
    # trust-auth server.
    parts = urlsplit(url)
    return _unsplit(parts.scheme, parts.netloc.rpartition("@")[2], "", parts.query)


def owner_dsn(database: str, settings: Settings | None = None, *, server_of: str | None = None) -> str:
    """The owner's URL of ``database``: migrations, schema dumps, the tests' and the bench's
    set-up. Never a service's (services use :func:`create_pool`, which refuses the owner).
    ``server_of``: on the server of that database instead (``postgres`` on a database's own
    server, to create it)."""
    settings = settings or get_settings()
    on = server_of or database
    if on in settings.migrate_database_servers:
        return _with_database(settings.migrate_database_servers[on].get_secret_value(), database)
    if on in settings.database_servers:
        return _with_database(_without_user(settings.database_servers[on].get_secret_value()), database)
    if settings.migrate_database_url is not None:
        return _with_database(settings.migrate_database_url.get_secret_value(), database)
    return _with_database(_without_user(settings.database_url.get_secret_value()), database)


# Kept for the callers that predate the roles; all of them were administrative.
dsn_for = owner_dsn


def service_dsn(database: str, role: str, settings: Settings | None = None) -> str:
    """A service's URL of ``database``: its server's URL (:func:`server_url`) as ``role`` when
    the URL names no user, else as the user it names."""
    url = server_url(database, settings)
    if urlsplit(url).username:
        return _with_database(url, database)
    return _with_database(url, database, role)


def server_settings(settings: Settings) -> dict[str, str]:
    # Every session gets a statement and a lock timeout: a stuck lock holder surfaces as an
    # error instead of a silent pile-up of waiting requests.
    return {
        "statement_timeout": str(settings.db_statement_timeout_ms),
        "lock_timeout": str(settings.db_lock_timeout_ms),
        "idle_in_transaction_session_timeout": "60000",
        "application_name": "hiwallet",
    }


def dedicated_connection(
    database: str, role: str, settings: Settings | None = None
) -> Callable[[], Awaitable[asyncpg.Connection]]:
    """How to open a connection of its own to ``database`` as ``role``, with the same
    timeouts as the pool's: for what must never run on a pooled connection (a relay's session
    advisory lock and LISTEN, a job round's lock). Each call opens a new one."""
    settings = settings or get_settings()
    dsn = service_dsn(database, role, settings)
    timeout_s = settings.db_command_timeout_s
    session = server_settings(settings)

    async def connect() -> asyncpg.Connection:
        return await asyncpg.connect(
            dsn, timeout=timeout_s, command_timeout=timeout_s, server_settings=session
        )

    return connect


# What is to happen once the current transaction has committed (wake a relay, count a state
# change): gathered while it runs, run after its commit, dropped with a rollback. A context
# variable, so each task (each message a consumer handles at once) has its own list.
_AFTER_COMMIT: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "hiwallet_after_commit", default=None
)


def after_commit(callback: Callable[[], None], *, once: bool = False) -> None:
    """Run ``callback`` once the transaction this runs in has committed (inside
    :func:`committing`); ``once``: however often it is asked for in that transaction (a
    wake-up). Outside :func:`committing` (a caller's own transaction, tests) nothing tracks the
    commit, so it runs now."""
    pending = _AFTER_COMMIT.get()
    if pending is None:
        callback()
    elif not (once and callback in pending):
        pending.append(callback)


@asynccontextmanager
async def committing() -> AsyncIterator[None]:
    """Around a transaction (outside it; :mod:`hiwallet.core.uow` does it for every unit of
    work): what it asked for with :func:`after_commit` runs once the block ended without an
    exception, i.e. committed; nothing if it raised (rolled back). A callback's own error is
    logged and does not undo the commit or stop the others."""
    pending: list[Callable[[], None]] = []
    token = _AFTER_COMMIT.set(pending)
    try:
        yield
    finally:
        _AFTER_COMMIT.reset(token)
    for callback in pending:
        try:
            callback()
        except Exception:
            log.exception("an after-commit callback failed")


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
    role: str,
    settings: Settings | None = None,
    min_size: int | None = None,
    max_size: int | None = None,
    init: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
) -> asyncpg.Pool:
    """A service's pool on ``database``, as ``role`` (its application role, :func:`app_role`,
    named by the caller whatever the database's name: tests use clones). Refuses to start when
    the session may change the schema (see check_service_role)."""
    settings = settings or get_settings()
    try:
        pool = await asyncpg.create_pool(
            service_dsn(database, role, settings),
            min_size=settings.db_pool_min_size if min_size is None else min_size,
            max_size=settings.db_pool_max_size if max_size is None else max_size,
            command_timeout=settings.db_command_timeout_s,
            server_settings=server_settings(settings),
            init=init,
            reset=_keep_session,
        )
    except asyncpg.InvalidAuthorizationSpecificationError as exc:
        raise DatabaseMisconfigured(
            f"cannot connect to {database} as the service's role: {exc}. "
            "`hiwallet migrate` (as the owner) creates the roles; HIWALLET_DATABASE_URL names the "
            "server (and a user only if each service has its own URL)"
        ) from exc
    except (OSError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(f"cannot open a pool to {database}: {exc}") from exc
    if pool is None:  # asyncpg's annotation; never None once awaited
        raise DatabaseUnavailable(f"cannot open a pool to {database}")
    try:
        await check_service_role(pool, database)
    except BaseException:
        await pool.close()
        raise
    return pool


async def check_service_role(pool: asyncpg.Pool, database: str) -> None:
    """Refuse (DatabaseMisconfigured) a service session that could change the schema or get
    round the ledger's functions: a superuser, or a member of a role that owns the database or
    any of its objects. Once per pool, at start-up: never on the request path."""
    row = await pool.fetchrow(
        """
        SELECT current_user AS name, r.rolsuper AS superuser,
               pg_has_role(current_user, d.datdba, 'USAGE') AS owns_database,
               (SELECT min(n.nspname || '.' || c.relname) FROM pg_class c
                  JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
                   AND pg_has_role(current_user, c.relowner, 'USAGE')) AS owns
          FROM pg_roles r, pg_database d
         WHERE r.rolname = current_user AND d.datname = current_database()
        """
    )
    if row is None or row["superuser"] or row["owns_database"] or row["owns"] is not None:
        what = (
            "a superuser"
            if row is None or row["superuser"]
            else "the database's owner"
            if row["owns_database"]
            else f"the owner of {row['owns']}"
        )
        name = "?" if row is None else row["name"]
        raise DatabaseMisconfigured(
            f"a service connects to {database} as {name!r}, {what}: it could change or bypass "
            "the schema. Services connect as the database's application role (hiwallet_<db>_app,"
            " made by `hiwallet migrate`): leave the user out of HIWALLET_DATABASE_URL, and give "
            "the owner to HIWALLET_MIGRATE_DATABASE_URL"
        )


async def ensure_database(database: str, settings: Settings | None = None) -> bool:
    """Create ``database`` if it does not exist. Returns True if this call created it.

    Safe when several processes race: the loser's ``duplicate_database`` is the answer "exists".
    """
    settings = settings or get_settings()
    # On the database's own server when it has one (settings.database_servers).
    conn = await asyncpg.connect(owner_dsn("postgres", settings, server_of=database))
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
        if exists:
            return False
        try:
            # Identifiers cannot be parameters; the name comes from the registry or a test fixture.
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
        if path.name in _NOT_MIGRATIONS:
            continue
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


async def apply_migrations(
    conn: asyncpg.Connection, migrations: Sequence[Migration], grants: str | None = None
) -> list[int]:
    """Apply what is missing, each file in its own transaction, under one advisory lock; then
    ``grants`` (the database's grants.sql, its role names filled in), every time, in one
    transaction.

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
        if grants is not None:
            # Every run, not once: CREATE OR REPLACE FUNCTION in a later migration resets
            # SECURITY DEFINER and SET clauses, and a new table starts with no grants.
            async with conn.transaction():
                await conn.execute(grants)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)


# A role that services or reports log in as may do nothing beyond its grants: no attribute
# that reaches past them, and no membership through which it would inherit another's.
_ROLE_ATTRIBUTES = ("rolsuper", "rolcreatedb", "rolcreaterole", "rolreplication", "rolbypassrls")


async def ensure_role(conn: asyncpg.Connection, name: str) -> None:
    """Create the login role ``name`` if it does not exist, and refuse one that could do more
    than its grants say.

    Roles are cluster-wide and every migrate of every database of a key (the tests', the
    bench's, in parallel runs) ensures the same roles: a process that loses the race to create
    one gets duplicate_object or unique_violation, which means "exists". The role is never
    altered afterwards (ALTER ROLE from two processes at once fails with "tuple concurrently
    updated"); passwords, for a server without trust authentication, are set by the operator.
    """
    if await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", name) is None:
        try:
            # Identifiers cannot be parameters; the name comes from app_role / readonly_role.
            await conn.execute(
                f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS'
            )
        except (asyncpg.DuplicateObjectError, asyncpg.UniqueViolationError):
            pass  # another migrate made it first
        except asyncpg.InsufficientPrivilegeError as exc:
            raise DatabaseMisconfigured(
                f"the migrating user cannot create role {name!r} ({exc}): migrate as a role with "
                f"CREATEROLE (HIWALLET_MIGRATE_DATABASE_URL), or create it once by hand: "
                f"CREATE ROLE {name} LOGIN"
            ) from exc
    row = await conn.fetchrow(
        f"SELECT {', '.join(_ROLE_ATTRIBUTES)},"
        " ARRAY(SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid"
        "        WHERE m.member = r.oid ORDER BY 1) AS member_of"
        " FROM pg_roles r WHERE r.rolname = $1",
        name,
    )
    if row is None:  # dropped between the two statements
        raise DatabaseMisconfigured(f"role {name!r} vanished while migrating; run migrate again")
    extra = [a.removeprefix("rol") for a in _ROLE_ATTRIBUTES if row[a]]
    if extra or row["member_of"]:
        raise DatabaseMisconfigured(
            f"role {name!r} exists with more than its grants: attributes {extra}, member of "
            f"{list(row['member_of'])}. Services and reports connect as it; drop it or take these "
            "away by hand, then migrate again"
        )


def render_grants(sql: str, key: str, services: Sequence[str] = ()) -> str:
    """grants.sql with its role names filled in, as psql's variables would be:
    ``:"app_role"`` becomes the quoted identifier, ``:'app_role'`` the quoted literal (and
    ``:"<service>_role"`` for each of the database's other ``services``)."""
    roles = [("app_role", app_role(key)), ("readonly_role", readonly_role(key))]
    roles += [(f"{service}_role", app_role(key, service)) for service in services]
    for variable, role in roles:
        sql = sql.replace(f':"{variable}"', f'"{role}"').replace(f":'{variable}'", f"'{role}'")
    return sql


async def migrate(
    key: str,
    database: str | None = None,
    settings: Settings | None = None,
    *,
    folder: str | None = None,
    services: Sequence[str] = (),
) -> list[int]:
    """Create the database of ``key`` (``database``, default :func:`database_name`) if needed,
    its roles if needed, apply the migrations of ``migrations/<folder>`` (default: the key's
    own), then its grants (as the owner: settings.migrate_database_url)."""
    settings = settings or get_settings()
    database = database or database_name(key)
    await ensure_database(database, settings)
    folder_path = settings.migrations_dir / (folder or key)
    if not folder_path.is_dir():
        # Never an empty database for a key whose folder is elsewhere (or misspelled).
        raise DatabaseMisconfigured(f"no migrations folder {folder_path} for database key {key!r}")
    migrations = load_migrations(folder_path)
    grants_file = folder_path / GRANTS_FILE
    grants = render_grants(grants_file.read_text(), key, services) if grants_file.exists() else None
    conn = await asyncpg.connect(owner_dsn(database, settings))
    try:
        owner = await conn.fetchrow(
            "SELECT current_user AS name, r.rolsuper OR pg_has_role(current_user, d.datdba, 'USAGE')"
            " AS owns FROM pg_roles r, pg_database d"
            " WHERE r.rolname = current_user AND d.datname = current_database()"
        )
        if owner is None or not owner["owns"]:
            raise DatabaseMisconfigured(
                f"migrate connects to {database} as {owner and owner['name']!r}, which does not "
                "own it: HIWALLET_MIGRATE_DATABASE_URL names the owner (services' roles may not "
                "migrate)"
            )
        await ensure_role(conn, app_role(key))
        for service in services:
            await ensure_role(conn, app_role(key, service))
        await ensure_role(conn, readonly_role(key))
        return await apply_migrations(conn, migrations, grants)
    finally:
        await conn.close()
