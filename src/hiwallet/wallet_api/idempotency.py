"""The idempotency protocol of money-moving requests: the key, the request's fingerprint, the
first answer stored with what the request did, and its replays."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from hiwallet.core import idempotency
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
    """The fingerprint stored with a key's answer: SHA-256 of the compact, key-sorted JSON of
    ``[operation, payload]`` as the standard library writes it. A flat payload of printable
    ASCII text, integers and nulls (a transfer's, nearly always) is written by orjson instead:
    the very same bytes (only ``"`` and ``\\`` escaped, the same way), in a fifth of the time
    (on every transfer); anything else by the standard library. The bytes must never change: a
    stored fingerprint would no longer match its own request (tests/wallet_api/test_idempotency_hash.py)."""
    if _plain(operation, payload):
        try:
            return hashlib.sha256(orjson.dumps([operation, payload], option=orjson.OPT_SORT_KEYS)).digest()
        except orjson.JSONEncodeError:  # an integer beyond 64 bits: the standard library's
            pass
    content = json.dumps([operation, payload], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(content.encode()).digest()


def _text(value: str) -> bool:
    # printable ASCII (0x20-0x7e): escaped alike by both writers (0x7f and control characters,
    # and everything beyond ASCII, are not)
    return value.isascii() and value.isprintable()


def _plain(operation: str, payload: Any) -> bool:
    if type(payload) is not dict or not _text(operation):
        return False
    for name, value in payload.items():
        if type(name) is not str or not _text(name):
            return False
        kind = type(value)
        if not (value is None or kind is int or (kind is str and _text(value))):
            return False
    return True


# wallet-api's table of the one store (core.idempotency): keyed by bucket first, like every
# wallet table; a transfer's answer is kept as its posting (``posted``, written by
# wallet.transfer_batch), any other's as its body.
STORE = idempotency.IdempotencyStore("wallet", partition=("bucket",))
# Its table, as the one definition makes it (tests/core/test_shared_tables.py holds the migrated
# table to it): every answer names its time (the store's put), and holds its body or posting.
TABLE_SQL = idempotency.idempotency_table_sql(
    "wallet",
    partition=(idempotency.Column("bucket", "smallint NOT NULL"),),
    answer=(idempotency.Column("posted", "jsonb"),),
    body_required=False,
    created_default=False,
    checks=("CONSTRAINT idempotency_keys_one_answer CHECK ((body IS NULL) <> (posted IS NULL))",),
)


def stored_answer(row: asyncpg.Record, fingerprint: bytes) -> Answer | None:
    """From the first statement of a money-moving request: 409 while another request with the
    key runs, 422 when the key was used for another request, the stored answer, or None
    (core.idempotency.check)."""
    if not idempotency.check(row["locked"], row["request_hash"], fingerprint):
        return None
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
    return idempotency.lock_key(bucket, scope, key)


async def idempotent(
    pool: asyncpg.Pool,
    bucket: int,
    caller: Caller,
    key: str,
    fingerprint: bytes,
    work: Callable[[asyncpg.Connection], Awaitable[Answer]],
) -> Answer:
    """The first answer for (bucket, caller, key), stored in the same transaction as what the
    request did; a repeat with the same request gets it back, with another request 422, while
    the first still runs 409 (core.idempotency: the store, its rule, and why a race for the key
    is done again). Refusals raise and roll back, so they are not stored: the key can be used
    again once the cause is fixed (a refused movement leaves nothing behind:
    docs/architecture.md)."""
    scoped = (bucket, caller.scope, key)

    async def run(conn: asyncpg.Connection) -> Answer:
        stored = await STORE.begin(conn, scoped, lock_key(*scoped), fingerprint)
        if stored is not None:
            return replay(stored["status"], stored["body"], stored["posted"])
        answer = await work(conn)
        await STORE.put(conn, scoped, fingerprint, answer.status, answer.body)
        return answer

    result: Answer = await in_transaction(pool, run, retry_also=idempotency.is_raced)
    return result
