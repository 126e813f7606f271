"""core.idempotency: the one store of the services that take an Idempotency-Key (its table from
the one definition, its queries, its busy/raced rule), against a real PostgreSQL."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import asyncpg
import orjson
import pytest

from hiwallet.core import idempotency, uow
from hiwallet.core.http.idempotency import IdempotencyInProgress, IdempotencyKeyReused
from tests.core import spine

STORE = idempotency.IdempotencyStore("spine", partition=("bucket",))
KEY = (7, "customer#alice", "k-1")
LOCK = idempotency.lock_key(*KEY)
FAST = uow.RetryPolicy(pause_s=0)


@pytest.fixture
async def pool(spine_db: str) -> AsyncIterator[asyncpg.Pool]:
    created = await asyncpg.create_pool(spine.dsn_via(spine_db, 5432), min_size=1, max_size=3)
    assert created is not None
    await created.execute(
        idempotency.idempotency_table_sql(
            "spine", partition=(idempotency.Column("bucket", "smallint NOT NULL"),)
        )
    )
    try:
        yield created
    finally:
        await created.close()


async def _request(pool: asyncpg.Pool, fingerprint: bytes, done: list[str]) -> tuple[int, str]:
    """A request as a service makes it: begin, do, put; the stored answer if there is one."""

    async def work(conn: asyncpg.Connection) -> tuple[int, str]:
        stored = await STORE.begin(conn, KEY, LOCK, fingerprint)
        if stored is not None:
            return stored["status"], orjson.loads(stored["body"])["id"]
        done.append("did it")
        await STORE.put(conn, KEY, fingerprint, 201, orjson.dumps({"id": "t-1"}).decode())
        return 201, "t-1"

    return await uow.in_transaction(pool, work, policy=FAST, retry_also=idempotency.is_raced)


async def test_the_first_answer_is_stored_and_replayed_and_another_request_is_refused(
    pool: asyncpg.Pool,
) -> None:
    done: list[str] = []
    assert await _request(pool, b"same", done) == (201, "t-1")
    assert await _request(pool, b"same", done) == (201, "t-1")
    assert done == ["did it"]  # the repeat replayed; nothing done twice
    with pytest.raises(IdempotencyKeyReused):
        await _request(pool, b"other", done)


async def test_while_the_first_runs_a_second_is_answered_in_progress_at_once(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as first, first.transaction():
        assert await STORE.begin(first, KEY, LOCK, b"same") is None
        with pytest.raises(IdempotencyInProgress):
            await _request(pool, b"same", [])
    # The first ended without an answer (rolled back): the key is free again.
    assert await _request(pool, b"same", []) == (201, "t-1")


async def test_a_request_that_lost_the_race_for_its_key_replays_the_winners_answer(
    pool: asyncpg.Pool,
) -> None:
    done: list[str] = []
    attempts = 0

    async def work(conn: asyncpg.Connection) -> tuple[int, str]:
        nonlocal attempts
        attempts += 1
        stored = await STORE.begin(conn, KEY, LOCK, b"same")
        if stored is not None:
            return stored["status"], orjson.loads(stored["body"])["id"]
        if attempts == 1:
            # The winner's answer commits after this request's read (its snapshot predates it).
            async with pool.acquire() as winner:
                await STORE.put(winner, KEY, b"same", 201, orjson.dumps({"id": "winner"}).decode())
        done.append("did it")
        await STORE.put(conn, KEY, b"same", 201, orjson.dumps({"id": "loser"}).decode())
        return 201, "loser"

    answer = await uow.in_transaction(pool, work, policy=FAST, retry_also=idempotency.is_raced)
    assert answer == (201, "winner") and attempts == 2
    assert await pool.fetchval("SELECT count(*) FROM spine.idempotency_keys") == 1


async def test_only_the_keys_own_unique_violation_is_a_race(pool: asyncpg.Pool) -> None:
    await pool.execute("CREATE TABLE spine.other (n int CONSTRAINT other_pkey PRIMARY KEY)")
    await pool.execute("INSERT INTO spine.other VALUES (1)")
    with pytest.raises(asyncpg.UniqueViolationError) as other:
        await pool.execute("INSERT INTO spine.other VALUES (1)")
    assert not idempotency.is_raced(other.value)
    async with pool.acquire() as conn:
        await STORE.put(conn, KEY, b"same", 201, "{}")
        with pytest.raises(asyncpg.UniqueViolationError) as raced:
            await STORE.put(conn, KEY, b"same", 201, "{}")
    assert idempotency.is_raced(raced.value)


async def test_the_purge_takes_only_answers_older_than_the_retention(pool: asyncpg.Pool) -> None:
    await _request(pool, b"same", [])
    assert await STORE.purge(pool, older_than_s=3600, batch=10) == 0
    await pool.execute("UPDATE spine.idempotency_keys SET created_at = now() - interval '2 hours'")
    assert await STORE.purge(pool, older_than_s=3600, batch=10) == 1


def test_the_lock_key_is_the_services_as_it_was() -> None:
    # In-flight requests of a running deployment and the new code take the same advisory lock:
    # the value of the services' former keys (sha256 of the parts joined by the unit separator).
    def former(text: str) -> int:
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)

    assert idempotency.lock_key(3, "customer#a", "k") == former("3\x1fcustomer#a\x1fk")
    assert idempotency.lock_key("withdrawal", "s", "k") == former("withdrawal\x1fs\x1fk")
