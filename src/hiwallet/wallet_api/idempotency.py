"""The idempotency protocol of money-moving requests: the key, the request's fingerprint, the
first answer stored with what the request did, and its replays."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from hiwallet.core.http.idempotency import in_progress, reused
from hiwallet.wallet_api.adapters import Q
from hiwallet.wallet_api.domain import Caller
from hiwallet.wallet_api.retry import in_transaction
from hiwallet.wallet_api.views import JSON, view_of_posted


@dataclass(frozen=True)
class Answer:
    """What a money-moving request answers: status and body, first time or replayed."""

    status: int
    body: JSON
    replayed: bool = False


def request_hash(operation: str, payload: Any) -> bytes:
    content = json.dumps([operation, payload], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(content.encode()).digest()


def stored_answer(row: asyncpg.Record, fingerprint: bytes) -> Answer | None:
    """From the first statement of a money-moving request: 409 while another request with the
    key runs, 422 when the key was used for another request, the stored answer, or None."""
    if not row["locked"]:
        raise in_progress()
    if row["request_hash"] is None:
        return None
    if bytes(row["request_hash"]) != fingerprint:
        raise reused()
    return replay(row["status"], row["body"], row["posted"])


def replay(status: int, body: JSON | None, posted: JSON | None) -> Answer:
    """A stored answer: its body, or for a transfer the body built again from what the posting
    returned (the same function built the first answer from the same data)."""
    if posted is not None:
        return Answer(status, view_of_posted(posted), replayed=True)
    if body is None:  # the table's check idempotency_keys_one_answer forbids it
        raise AssertionError("a stored answer with neither body nor posting")
    return Answer(status, body, replayed=True)


def lock_key(bucket: int, scope: str, key: str) -> int:
    digest = hashlib.sha256(f"{bucket}\x1f{scope}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def idempotent(
    pool: asyncpg.Pool,
    bucket: int,
    caller: Caller,
    key: str,
    fingerprint: bytes,
    work: Callable[[asyncpg.Connection], Awaitable[Answer]],
) -> Answer:
    """The first answer for (bucket, caller, key), stored in the same transaction as what the
    request did; a repeat with the same request gets it back, with another request 422.

    "Still running" is detected with ``pg_try_advisory_xact_lock`` on a hash of the bucket,
    the caller and the key, taken first in the transaction: a second request with the key
    does not wait (a row lock or the unique index would make it wait for the first one's
    commit) but answers 409 at once, and the lock goes away with the first transaction,
    committed or not. After the first one commits, the record is visible to the next
    statement (READ COMMITTED), so a retry gets the stored answer. The lock and the read are
    one statement, whose snapshot may predate the first one's commit: then the insert of the
    record meets the first one's row (unique violation), everything rolls back, and the
    retry answers the stored answer. Refusals raise and roll
    back, so they are not stored: the key can be used again once the cause is fixed
    (a refused movement leaves nothing behind: docs/architecture.md)."""

    async def run(conn: asyncpg.Connection) -> Answer:
        begun = await conn.fetchrow(
            Q["idempotency_begin"], bucket, caller.scope, key, lock_key(bucket, caller.scope, key)
        )
        stored = stored_answer(begun, fingerprint)
        if stored is not None:
            return stored
        answer = await work(conn)
        await conn.execute(
            Q["idempotency_put"], bucket, caller.scope, key, fingerprint, answer.status, answer.body
        )
        return answer

    result: Answer = await in_transaction(pool, run)
    return result
