"""One unit of work for every service: a pooled connection, one transaction, the one retry
policy, and what is to run once the transaction has committed (:func:`after_commit`: a relay's
wake-up, a metric).

- :func:`in_transaction` runs ``work(conn)`` in one transaction and runs it again, whole, on a
  fresh connection, after what another attempt can cure: a serialization failure (40001), a
  deadlock (40P01), or the connection lost before the commit was sent. At most
  ``policy.attempts`` times, with a jittered pause between them; when they run out it raises
  :class:`Unavailable` (its ``__cause__`` is the last failure). Anything else - a refusal
  raised by ``work``, a data error, a timeout, a bug - is raised as it is at once, never tried
  again (a statement or lock timeout means something holds on far too long: retrying would only
  add load).
- A connection lost while the commit was in flight is *in doubt*: the transaction may have
  committed. It is never tried again here (``work`` could be done twice); it is raised as it
  is, and :func:`hiwallet.core.db.is_transient` says it is 503 "unavailable": the client's
  retry with its idempotency key finds out what happened.
- :func:`unit_of_work` is the same connection and transaction as a block, for a caller whose
  block cannot be run again (a batch consumer's, which acks its messages after the commit) or
  that takes part in a wider protocol; it does not retry.
- :func:`snapshot` is a batch job's reads on a connection it holds: one read-only snapshot for
  all of them, under the job's own statement timeout instead of the pool's.

Each service maps what is raised to its own answers in one place (wallet-api's ``retry.py``,
the orchestrator's ``service.py``): :class:`Unavailable` and whatever
:func:`~hiwallet.core.db.is_transient` accepts are "retry later"; everything else is a refusal
or a defect. The hot paths whose shape is one autocommit statement (a transfer batch, a
withdrawal request) pass ``one_statement=True``: no BEGIN and COMMIT round trips, the same
policy (a connection lost during that statement is in doubt: the statement is the commit).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, TypeVar

import asyncpg

from hiwallet.core.db import after_commit, committing, is_connection_error

__all__ = [
    "DEFAULT_POLICY",
    "Isolation",
    "RetryPolicy",
    "Unavailable",
    "after_commit",
    "in_transaction",
    "is_conflict",
    "snapshot",
    "unit_of_work",
]

T = TypeVar("T")
Isolation = Literal["read_committed", "repeatable_read", "serializable"]

# A serialization failure and a deadlock: the server rolled the transaction back, so doing the
# whole of it again is safe and can succeed. Not a lock timeout (55P03) nor a statement timeout
# (57014): something held on far too long, and another attempt would wait as long again and add
# load; they are raised at once (core.db.is_transient answers them "retry later" to the client).
CONFLICT_SQLSTATES = frozenset({"40001", "40P01"})
_CAUSE_DEPTH = 8  # a bounded walk of a ``raise ... from`` chain
# A snapshot's statement timeout: a batch job's bound (an hour at most), never none at all.
MAX_SNAPSHOT_TIMEOUT_S = 3_600


class Unavailable(Exception):
    """A unit of work failed each of its attempts for what another attempt could have cured (a
    conflict, a lost connection): the caller answers "unavailable, retry". ``__cause__`` is the
    last failure; ``attempts`` how many were made."""

    def __init__(self, attempts: int) -> None:
        super().__init__(f"the unit of work failed {attempts} times for what a retry can cure")
        self.attempts = attempts


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how far apart, a unit of work is tried. The pause before attempt n + 1
    is drawn between half and the whole of ``pause_s * 2 ** (n - 1)``: the jitter keeps two
    transactions that deadlocked each other from meeting again in step."""

    attempts: int = 3
    pause_s: float = 0.005

    def __post_init__(self) -> None:
        if not 1 <= self.attempts <= 10:
            raise ValueError("a unit of work is tried 1 to 10 times")
        if not 0 <= self.pause_s <= 1:
            raise ValueError("the pause between attempts is 0 to 1 s")

    def pause_after(self, attempt: int) -> float:
        """The pause in seconds after failed attempt ``attempt`` (1-based)."""
        ceiling = self.pause_s * 2 ** (attempt - 1)
        return random.uniform(ceiling / 2, ceiling)  # jitter, not a secret


# 5 ms, then 10 ms at most: a conflict is over within a transaction's time.
DEFAULT_POLICY = RetryPolicy()


def is_conflict(exc: BaseException) -> bool:
    """A serialization failure or a deadlock, ``exc`` itself or what it was raised from (the
    ledger's error wraps the driver's)."""
    seen: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if seen is None:
            return False
        if isinstance(seen, asyncpg.PostgresError):
            return (getattr(seen, "sqlstate", None) or "") in CONFLICT_SQLSTATES
        seen = seen.__cause__
    return False


def _lost_connection(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if seen is None or isinstance(seen, TimeoutError):
            return False  # a timeout is not tried again: something holds on far too long
        if is_connection_error(seen):
            return True
        seen = seen.__cause__
    return False


def _curable(exc: BaseException, in_doubt: bool, retry_also: Callable[[BaseException], bool] | None) -> bool:
    if is_conflict(exc):
        return True
    if _lost_connection(exc):
        return not in_doubt
    return retry_also is not None and retry_also(exc)


async def in_transaction(
    pool: asyncpg.Pool,
    work: Callable[[asyncpg.Connection], Awaitable[T]],
    *,
    isolation: Isolation | None = None,
    policy: RetryPolicy = DEFAULT_POLICY,
    retry_also: Callable[[BaseException], bool] | None = None,
    one_statement: bool = False,
) -> T:
    """``work(conn)`` in one transaction; done again whole after a conflict or a connection
    lost before the commit (module docstring), at most ``policy.attempts`` times, then
    :class:`Unavailable`. What ``work`` asks for with :func:`after_commit` runs once, after the
    attempt that committed; a failed attempt's requests are dropped with it.

    ``retry_also``: another failure a new attempt cures (an idempotency store's race for a
    key: the next attempt replays the winner's answer). ``one_statement``: ``work`` runs a
    single statement, its own transaction in autocommit (no BEGIN and COMMIT round trips).
    ``isolation``: the transaction's level (the server's default, read committed, if None)."""
    for attempt in range(1, policy.attempts + 1):
        in_doubt = False
        try:
            async with committing(), pool.acquire() as conn:
                if one_statement:
                    in_doubt = True  # the statement is its own commit
                    return await work(conn)
                async with conn.transaction(isolation=isolation):
                    result = await work(conn)
                    in_doubt = True  # the block's end sends COMMIT
                return result
        except Exception as exc:
            if not _curable(exc, in_doubt, retry_also):
                raise
            if attempt == policy.attempts:
                raise Unavailable(attempt) from exc
            await asyncio.sleep(policy.pause_after(attempt))
    raise AssertionError("unreachable")


@asynccontextmanager
async def unit_of_work(
    pool: asyncpg.Pool, *, isolation: Isolation | None = None, readonly: bool = False
) -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection in one transaction, as a block: committed if the block ends without
    an exception, rolled back if it raises; what it asked for with :func:`after_commit` runs
    after the commit only. Never retried (a block cannot be run again): for work that can be,
    :func:`in_transaction`."""
    async with committing(), pool.acquire() as conn, conn.transaction(isolation=isolation, readonly=readonly):
        yield conn


@asynccontextmanager
async def snapshot(
    conn: asyncpg.Connection, *, statement_timeout_s: float
) -> AsyncIterator[asyncpg.Connection]:
    """``conn`` in one read-only transaction at repeatable read, as a block: every statement in it
    sees the same snapshot, so that what commits meanwhile is seen whole or not at all (a check
    that reads table after table cannot see half of a write). Each statement is bounded by
    ``statement_timeout_s`` on the server, for this transaction only (SET LOCAL): a batch job's
    reads outlast the pool's statement timeout, sized for requests. The caller bounds its client
    side too (asyncpg's ``timeout=``). Never retried: a read-only snapshot meets no conflict."""
    if not 0 < statement_timeout_s <= MAX_SNAPSHOT_TIMEOUT_S:
        raise ValueError(f"a snapshot's statement timeout is over 0 and at most {MAX_SNAPSHOT_TIMEOUT_S} s")
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute(f"SET LOCAL statement_timeout = '{round(statement_timeout_s * 1000)}ms'")
        yield conn
