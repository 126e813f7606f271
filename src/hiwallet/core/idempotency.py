"""The one idempotency store of the services that take an ``Idempotency-Key`` (the HTTP side,
the key's form and its four problems, is :mod:`hiwallet.core.http.idempotency`): its table,
its named queries (core/sql/idempotency.sql) and its busy/raced rule.

The first answer for a key is stored in the same transaction as what the request did; a
repeat with the same request gets it back, with another request 422, while the first still
runs 409:

- "Still running" is ``pg_try_advisory_xact_lock`` on :func:`lock_key` of the key, taken
  first in the transaction: a second request with the key does not wait (a row lock or the
  unique index would make it wait for the first one's commit) but is answered 409 at once, and
  the lock goes away with the first transaction, committed or not.
- The lock and the read of a stored answer are one statement (:meth:`IdempotencyStore.begin`),
  whose snapshot may predate the first request's commit: then the insert of the answer meets
  the first one's row, a unique violation of the key (:func:`is_raced`). The whole transaction
  is done again (``core.uow.in_transaction(..., retry_also=is_raced)``) and now reads the
  stored answer.
- Refusals raise and roll back, so they are not stored: the key can be used again once the
  cause is fixed.

A hot path that does all of it in one SQL function (wallet-api's ``wallet.transfer_batch``,
the orchestrator's ``withdrawal.request``) keeps the same rule in SQL, on the same table, with
the same :func:`lock_key`, and reads the function's answer with :func:`check`.

Every table is created from :func:`idempotency_table_sql`; tests/core/test_shared_tables.py
holds each database's migrated table to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from hiwallet.core.http.idempotency import in_progress, reused
from hiwallet.core.queries import checked_identifier, load_queries

__all__ = [
    "KEY_CONSTRAINT",
    "STORE_PRIVILEGES",
    "Column",
    "IdempotencyStore",
    "check",
    "idempotency_table_sql",
    "is_raced",
    "lock_key",
]

_QUERIES = load_queries(Path(__file__).parent / "sql" / "idempotency.sql")
# The name of every idempotency table's primary key (the table is always ``*.idempotency_keys``):
# a unique violation of it is the race :func:`is_raced` recognizes.
KEY_CONSTRAINT = "idempotency_keys_pkey"
_TABLE_NAME = "idempotency_keys"
# What the application role may do to its idempotency table (its grants.sql says it; the
# shared tables' test holds every database to it): read, store an answer, purge old ones.
# Never UPDATE: a stored answer is the answer.
STORE_PRIVILEGES = frozenset({"SELECT", "INSERT", "DELETE"})


def lock_key(*parts: object) -> int:
    """The advisory lock of a key: a signed 64-bit hash of its parts (a namespace or a
    partition, the caller's scope, the key), joined by the unit separator."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def is_raced(exc: BaseException) -> bool:
    """Another request with the same key committed its answer first: the retry replays it.
    ``exc`` itself or what it was raised from (the ledger's error wraps the driver's)."""
    for seen in (exc, exc.__cause__):
        if isinstance(seen, asyncpg.UniqueViolationError):
            return bool(seen.constraint_name == KEY_CONSTRAINT)
    return False


def check(locked: bool | None, stored_hash: bytes | None, fingerprint: bytes) -> bool:
    """The rule, from the first statement of a request with a key: 409 while another request
    with the key runs, 422 when the key was used for another request; True when there is a
    stored answer to replay, False when the request is to be done."""
    if not locked:
        raise in_progress()
    if stored_hash is None:
        return False
    if bytes(stored_hash) != fingerprint:
        raise reused()
    return True


@dataclass(frozen=True)
class Column:
    """A column of a service's own in its idempotency table: ``name`` and its SQL ``type`` (with
    NOT NULL, a default, a reference: as the DDL says it)."""

    name: str
    type: str


@dataclass(frozen=True)
class IdempotencyStore:
    """The idempotency table ``schema``.idempotency_keys of a service. ``partition``: the leading
    columns of the key before (scope, key) (wallet-api's bucket); ``answer``: the service's own
    columns written with an answer (the orchestrator's saga_id), in :meth:`put`'s order."""

    schema: str
    partition: tuple[str, ...] = ()
    answer: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (self.schema, *self.partition, *self.answer):
            checked_identifier(name)

    @property
    def table(self) -> str:
        return f"{self.schema}.{_TABLE_NAME}"

    def _query(self, name: str) -> str:
        key = [*self.partition, "scope", "key"]
        columns = [*key, "request_hash", "status", "body", *self.answer]
        return _QUERIES[name].format(
            table=self.table,
            # column by column (not a row comparison): on Citus the bucket routes the read
            key_match=" AND ".join(f"k.{c} = ${n}" for n, c in enumerate(key, start=2)),
            columns=", ".join(columns),
            params=", ".join(f"${n}" for n in range(1, len(columns) + 1)),
        )

    def queries(self) -> dict[str, str]:
        """The store's named queries for this table (begin, put, purge)."""
        return {name: self._query(name) for name in ("begin", "put", "purge")}

    async def begin(
        self, conn: asyncpg.Connection, key: Sequence[Any], lock: int, fingerprint: bytes
    ) -> asyncpg.Record | None:
        """The first statement of a request, in its transaction: the key's try-lock and its
        stored answer. The stored row (every column of the table) to replay, None when the
        request is to be done; raises 409 or 422 as :func:`check` says. ``key``: the partition's
        values, the scope, the key."""
        row = await conn.fetchrow(self._query("begin"), lock, *key)
        if row is None:  # the query answers one row, stored or not
            raise AssertionError("idempotency begin answered no row")
        return row if check(row["locked"], row["request_hash"], fingerprint) else None

    async def put(
        self,
        conn: asyncpg.Connection,
        key: Sequence[Any],
        fingerprint: bytes,
        status: int,
        body: Any,
        *answer: Any,
    ) -> None:
        """Store the first answer, in the request's transaction; ``answer``: the values of the
        store's ``answer`` columns."""
        await conn.execute(self._query("put"), *key, fingerprint, status, body, *answer)

    async def purge(self, pool: asyncpg.Pool, older_than_s: float, batch: int) -> int:
        """One bounded batch of answers older than the retention; how many went."""
        status = await pool.execute(self._query("purge"), float(older_than_s), batch)
        return int(status.rsplit(" ", 1)[-1])


def idempotency_table_sql(
    schema: str,
    *,
    partition: Sequence[Column] = (),
    answer: Sequence[Column] = (),
    body_required: bool = True,
    created_default: bool = True,
    checks: Sequence[str] = (),
) -> str:
    """The DDL of ``schema``.idempotency_keys: the one definition every service's migration
    follows. ``partition`` and ``answer``: the service's own columns (see
    :class:`IdempotencyStore`); ``body_required=False`` for a store whose answer may be kept in
    an ``answer`` column instead (wallet-api's transfers keep the posting), then ``checks``
    says which; ``created_default=False``: every insert names its time (the store's put
    does)."""
    checked_identifier(schema)
    table = f"{schema}.{_TABLE_NAME}"
    lines = [f"    {c.name} {c.type}," for c in partition]
    lines += [
        "    scope        text        NOT NULL,",
        "    key          text        NOT NULL,",
        "    request_hash bytea       NOT NULL,",
        "    status       smallint    NOT NULL,",
        f"    body         jsonb{'       NOT NULL' if body_required else ''},",
        f"    created_at   timestamptz NOT NULL{' DEFAULT now()' if created_default else ''},",
    ]
    lines += [f"    {c.name} {c.type}," for c in answer]
    lines += [f"    {check}," for check in checks]
    key = ", ".join([*(c.name for c in partition), "scope", "key"])
    lines.append(f"    CONSTRAINT {KEY_CONSTRAINT} PRIMARY KEY ({key})")
    body = "\n".join(lines)
    return f"""\
-- The first answer of each Idempotency-Key (core/idempotency.py): stored with what the request
-- did, replayed to a repeat; purged after the retention.
CREATE TABLE {table} (
{body}
);
CREATE INDEX {_TABLE_NAME}_created ON {table} (created_at);
"""
