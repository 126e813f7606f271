"""The pool after the server went away (issue 9, item 8): a connection that saw a
connection-level error is never handed out again, and what the caller saw is transient.

The pools here release without a reset query (``core.db._keep_session``), so nothing of ours
probes a connection on its way back; these tests hold asyncpg to discarding broken ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from hiwallet.core import db
from hiwallet.core.settings import Settings, get_settings
from tests.faultproxy import FaultProxy

ROUNDS = 3


@pytest.fixture
async def proxied_pool(wallet_db: str) -> AsyncIterator[tuple[asyncpg.Pool, FaultProxy]]:
    proxy = FaultProxy()
    await proxy.start()
    settings = Settings(database_url=f"postgresql://127.0.0.1:{proxy.port}")
    # One connection: a broken one handed out again could not hide behind another.
    pool = await db.create_pool(
        wallet_db, role=db.app_role("wallet"), settings=settings, min_size=1, max_size=1
    )
    try:
        yield pool, proxy
    finally:
        await pool.close()
        await proxy.close()


async def _terminate(proxy: FaultProxy) -> int:
    """FATAL 57P01 to the pool's backends, as a shutting-down server sends it."""
    admin = await asyncpg.connect(db.dsn_for("postgres", get_settings()))
    try:
        killed: int = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE client_port = ANY($1::int[])",
            proxy.upstream_ports,
        )
        return killed
    finally:
        await admin.close()


async def test_an_idle_connection_killed_by_the_server_fails_once_then_is_replaced(
    proxied_pool: tuple[asyncpg.Pool, FaultProxy],
) -> None:
    pool, proxy = proxied_pool
    for _ in range(ROUNDS):
        assert await pool.fetchval("SELECT 1") == 1
        assert await _terminate(proxy) == 1
        failures: list[BaseException] = []
        answers = []
        for n in range(3):
            try:
                answers.append(await pool.fetchval("SELECT $1::int", n))
            except Exception as exc:
                failures.append(exc)
        # At most the first use fails, with an error a retry cures (503, never 500); the next
        # query runs on a fresh connection.
        assert len(failures) <= 1 and all(db.is_transient(f) for f in failures), failures
        assert answers[-2:] == [1, 2]


async def test_a_connection_cut_in_the_middle_of_a_query_is_not_reused(
    proxied_pool: tuple[asyncpg.Pool, FaultProxy],
) -> None:
    pool, proxy = proxied_pool
    for _ in range(ROUNDS):
        async with pool.acquire() as conn:
            pid = conn.get_server_pid()
            proxy.cut()
            with pytest.raises(Exception) as failed:
                await conn.fetchval("SELECT pg_sleep(0.01)")
            assert db.is_transient(failed.value), repr(failed.value)
        async with pool.acquire() as conn:
            assert conn.get_server_pid() != pid
            assert await conn.fetchval("SELECT 1") == 1


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (asyncpg.DeadlockDetectedError("deadlock"), True),
        (asyncpg.SerializationError("serialization"), True),
        (asyncpg.LockNotAvailableError("lock timeout"), True),
        (asyncpg.QueryCanceledError("statement timeout"), True),
        (asyncpg.TooManyConnectionsError("too many"), True),
        (asyncpg.AdminShutdownError("shutdown"), True),
        (asyncpg.CannotConnectNowError("starting up"), True),
        (asyncpg.ConnectionDoesNotExistError("gone"), True),
        (asyncpg.InterfaceError("connection is closed"), True),
        (asyncpg.InternalClientError("cannot switch to state 12"), True),
        (ConnectionResetError(104, "reset"), True),
        (ConnectionRefusedError(111, "refused"), True),
        (OSError("Multiple exceptions: [Errno 111] Connect call failed"), True),  # asyncio's
        (FileNotFoundError(2, "no such file"), False),  # an OSError, but a defect
        (PermissionError(13, "denied"), False),
        (asyncpg.UntranslatableCharacterError("NUL"), False),
        (asyncpg.CharacterNotInRepertoireError("NUL"), False),
        (asyncpg.CheckViolationError("check"), False),
        (asyncpg.UniqueViolationError("unique"), False),
        (asyncpg.RaiseError("HW010"), False),
        (asyncpg.UndefinedFunctionError("no such function"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_what_a_retry_can_cure_is_transient(error: BaseException, transient: bool) -> None:
    assert db.is_transient(error) is transient
    wrapped = RuntimeError("translated")
    wrapped.__cause__ = error
    assert db.is_transient(wrapped) is transient  # raise ... from exc keeps the answer
