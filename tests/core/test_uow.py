"""core.uow: one unit of work, the one retry policy, and after-commit hooks, against a real
PostgreSQL. The failures are the server's own: a conflict raised with its SQLSTATE by the
server, a backend terminated by the server, a statement cancelled by its timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from hiwallet.core import uow
from hiwallet.core.db import is_transient, store_error
from tests.core import spine

# A server error with the given SQLSTATE, raised by the server as its own would be.
_RAISE = "DO $$ BEGIN RAISE EXCEPTION 'as the server would' USING ERRCODE = '{state}'; END $$"
# No pause: the tests count attempts, not time.
FAST = uow.RetryPolicy(attempts=3, pause_s=0)


@pytest.fixture
async def pool(spine_db: str) -> AsyncIterator[asyncpg.Pool]:
    created = await asyncpg.create_pool(spine.dsn_via(spine_db, 5432), min_size=1, max_size=3)
    assert created is not None
    await created.execute("CREATE TABLE spine.uow (n int PRIMARY KEY)")
    try:
        yield created
    finally:
        await created.close()


async def _rows(pool: asyncpg.Pool) -> list[int]:
    return [r["n"] for r in await pool.fetch("SELECT n FROM spine.uow ORDER BY n")]


@pytest.mark.parametrize("state", ["40001", "40P01"])
async def test_a_conflict_is_done_again_whole_and_its_hook_runs_once_after_the_commit(
    pool: asyncpg.Pool, state: str
) -> None:
    attempts: list[int] = []
    seen_by_hook: list[list[int]] = []

    def hook() -> None:
        seen_by_hook.append(list(attempts))

    async def work(conn: asyncpg.Connection) -> str:
        attempts.append(len(attempts) + 1)
        await conn.execute("INSERT INTO spine.uow VALUES ($1)", len(attempts))
        uow.after_commit(hook, once=True)
        if len(attempts) == 1:
            await conn.execute(_RAISE.format(state=state))
        return "done"

    assert await uow.in_transaction(pool, work, policy=FAST) == "done"
    assert attempts == [1, 2]
    # The first attempt's row went with its rollback; its hook was dropped with it.
    assert await _rows(pool) == [2]
    assert seen_by_hook == [[1, 2]]


async def test_the_hook_runs_after_the_commit_not_before(pool: asyncpg.Pool) -> None:
    ran: list[bool] = []

    async def work(conn: asyncpg.Connection) -> None:
        await conn.execute("INSERT INTO spine.uow VALUES (7)")
        uow.after_commit(lambda: ran.append(True))
        await conn.execute("SELECT 1")
        assert ran == []  # still in the transaction: not yet

    await uow.in_transaction(pool, work, policy=FAST)
    assert ran == [True]
    assert await _rows(pool) == [7]


async def test_conflicts_every_time_run_out_as_unavailable_with_nothing_written(pool: asyncpg.Pool) -> None:
    attempts = 0
    hooks: list[int] = []

    async def work(conn: asyncpg.Connection) -> None:
        nonlocal attempts
        attempts += 1
        await conn.execute("INSERT INTO spine.uow VALUES ($1)", attempts)
        uow.after_commit(lambda: hooks.append(attempts))
        await conn.execute(_RAISE.format(state="40P01"))

    with pytest.raises(uow.Unavailable) as failed:
        await uow.in_transaction(pool, work, policy=FAST)
    assert attempts == 3 and failed.value.attempts == 3
    assert isinstance(failed.value.__cause__, asyncpg.DeadlockDetectedError)
    assert is_transient(failed.value)  # what every service's edge answers 503
    assert await _rows(pool) == [] and hooks == []


async def test_a_non_transient_error_is_raised_at_once(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO spine.uow VALUES (1)")
    attempts = 0

    async def work(conn: asyncpg.Connection) -> None:
        nonlocal attempts
        attempts += 1
        await conn.execute("INSERT INTO spine.uow VALUES (2)")
        await conn.execute("INSERT INTO spine.uow VALUES (1)")  # 23505: a defect, not "retry"

    with pytest.raises(asyncpg.UniqueViolationError):
        await uow.in_transaction(pool, work, policy=FAST)
    assert attempts == 1
    assert await _rows(pool) == [1]


async def test_a_refusal_of_the_work_is_raised_at_once_and_rolls_back(pool: asyncpg.Pool) -> None:
    class Refused(Exception):
        pass

    attempts = 0

    async def work(conn: asyncpg.Connection) -> None:
        nonlocal attempts
        attempts += 1
        await conn.execute("INSERT INTO spine.uow VALUES (3)")
        raise Refused()

    with pytest.raises(Refused):
        await uow.in_transaction(pool, work, policy=FAST)
    assert attempts == 1 and await _rows(pool) == []


async def test_a_timeout_is_not_tried_again(pool: asyncpg.Pool) -> None:
    attempts = 0

    async def work(conn: asyncpg.Connection) -> None:
        nonlocal attempts
        attempts += 1
        await conn.execute("SET LOCAL statement_timeout = '20ms'")
        await conn.execute("SELECT pg_sleep(1)")

    with pytest.raises(asyncpg.QueryCanceledError) as failed:
        await uow.in_transaction(pool, work, policy=FAST)
    assert attempts == 1 and is_transient(failed.value)


async def test_a_connection_lost_before_the_commit_is_done_again_on_a_fresh_one(pool: asyncpg.Pool) -> None:
    pids: list[int] = []

    async def work(conn: asyncpg.Connection) -> None:
        pids.append(conn.get_server_pid())
        await conn.execute("INSERT INTO spine.uow VALUES ($1)", len(pids))
        if len(pids) == 1:
            # The server ends this session (FATAL 57P01), as a restarting server does.
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    await uow.in_transaction(pool, work, policy=FAST)
    assert len(pids) == 2 and pids[0] != pids[1]
    assert await _rows(pool) == [2]


async def test_a_connection_lost_by_the_statement_that_commits_is_in_doubt_and_not_done_again(
    pool: asyncpg.Pool,
) -> None:
    attempts = 0

    async def work(conn: asyncpg.Connection) -> None:
        nonlocal attempts
        attempts += 1
        # One autocommit statement is its own commit: once it is sent, whether it committed
        # is unknown when the connection breaks. Done again, it could be done twice.
        await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with pytest.raises(Exception) as failed:
        await uow.in_transaction(pool, work, policy=FAST, one_statement=True)
    assert attempts == 1
    assert not isinstance(failed.value, uow.Unavailable) and is_transient(failed.value)


async def test_retry_also_cures_what_the_caller_says(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO spine.uow VALUES (1)")
    attempts = 0

    async def work(conn: asyncpg.Connection) -> int:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await conn.execute("INSERT INTO spine.uow VALUES (1)")
        return attempts

    def raced(exc: BaseException) -> bool:
        return isinstance(exc, asyncpg.UniqueViolationError)

    assert await uow.in_transaction(pool, work, policy=FAST, retry_also=raced) == 2


async def test_the_isolation_is_the_callers(pool: asyncpg.Pool) -> None:
    async def work(conn: asyncpg.Connection) -> str:
        return str(await conn.fetchval("SHOW transaction_isolation"))

    assert await uow.in_transaction(pool, work, isolation="serializable") == "serializable"
    assert await uow.in_transaction(pool, work) == "read committed"


async def test_a_unit_of_work_block_runs_its_hooks_after_the_commit_only(pool: asyncpg.Pool) -> None:
    ran: list[str] = []
    async with uow.unit_of_work(pool) as conn:
        await conn.execute("INSERT INTO spine.uow VALUES (1)")
        uow.after_commit(lambda: ran.append("committed"))
        assert ran == []
    assert ran == ["committed"]
    with pytest.raises(RuntimeError):
        async with uow.unit_of_work(pool) as conn:
            await conn.execute("INSERT INTO spine.uow VALUES (2)")
            uow.after_commit(lambda: ran.append("rolled back"))
            raise RuntimeError("refused")
    assert ran == ["committed"] and await _rows(pool) == [1]


def test_the_policy_is_bounded_and_its_pauses_jittered_within_their_ceiling() -> None:
    policy = uow.RetryPolicy(attempts=3, pause_s=0.005)
    for attempt, ceiling in ((1, 0.005), (2, 0.01)):
        pauses = {policy.pause_after(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= p <= ceiling for p in pauses)
        assert len(pauses) > 1  # jittered, not in step
    for bad in ({"attempts": 0}, {"attempts": 11}, {"pause_s": -1}, {"pause_s": 2}):
        with pytest.raises(ValueError):
            uow.RetryPolicy(**bad)  # type: ignore[arg-type]


async def test_a_snapshot_sees_one_moment_read_only_under_its_own_statement_timeout(
    pool: asyncpg.Pool,
) -> None:
    """A batch job's reads: what commits meanwhile is not seen, nothing is written, and each
    statement is bounded by the job's timeout (not the pool's), for this transaction only."""
    await pool.execute("INSERT INTO spine.uow VALUES (1)")
    async with pool.acquire() as conn:
        before = await conn.fetchval("SHOW statement_timeout")
        async with uow.snapshot(conn, statement_timeout_s=900) as reading:
            assert await reading.fetchval("SHOW statement_timeout") == "15min"
            assert await reading.fetchval("SELECT count(*) FROM spine.uow") == 1
            await pool.execute("INSERT INTO spine.uow VALUES (2)")  # committed meanwhile
            assert await reading.fetchval("SELECT count(*) FROM spine.uow") == 1
            with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
                async with reading.transaction():  # a savepoint: the snapshot goes on after it
                    await reading.execute("INSERT INTO spine.uow VALUES (3)")
        assert await conn.fetchval("SHOW statement_timeout") == before
    assert await _rows(pool) == [1, 2]


@pytest.mark.parametrize("timeout_s", [0, -1, 3_601])
async def test_a_snapshot_without_a_bound_is_refused(pool: asyncpg.Pool, timeout_s: float) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(ValueError):
            async with uow.snapshot(conn, statement_timeout_s=timeout_s):
                pass
        assert not conn.is_in_transaction()


class _Refused(Exception):
    pass


class _Away(Exception):
    pass


def _as_store(exc: Exception) -> Exception:
    return store_error(exc, refused=lambda s: _Refused(s), unavailable=lambda k: _Away(k))


@pytest.mark.parametrize(
    ("state", "kind"),
    [("22P05", _Refused), ("22003", _Refused), ("40P01", _Away), ("57014", _Away), ("23505", None)],
)
async def test_store_error_names_what_the_server_refused_and_what_a_retry_cures(
    pool: asyncpg.Pool, state: str, kind: type[Exception] | None
) -> None:
    """core.db.store_error: class 22 (the value) is the content's refusal, a transient state is
    unavailable, anything else (a unique violation here) the driver's error itself, a defect."""
    with pytest.raises(asyncpg.PostgresError) as raised:
        await pool.execute(_RAISE.format(state=state))
    error = _as_store(raised.value)
    if kind is None:
        assert error is raised.value
        return
    assert isinstance(error, kind) and error.__cause__ is raised.value
    assert str(error) == (state if kind is _Refused else type(raised.value).__name__)
