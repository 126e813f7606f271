"""wallet-api's one retry loop, and what a client is told when the database fails.

Only what a retry can cure is answered 503 "unavailable" (:func:`hiwallet.core.db.is_transient`:
the connection lost, a timeout, a deadlock or serialization failure after the retries here). A
ledger refusal is its problem type; anything else - a ledger defect
(:class:`hiwallet.ledger.LedgerInternalError`), an unknown driver error, a bug - is raised as it
is, to the app's handler of unexpected errors: a logged 500, never "retry".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import structlog

from hiwallet import ledger
from hiwallet.core.db import is_transient
from hiwallet.core.http import ProblemError
from hiwallet.core.logging import error_fields
from hiwallet.wallet_api import errors

log = structlog.get_logger(__name__)

T = TypeVar("T")
RETRY_ATTEMPTS = 3  # a unit of work tried again after a deadlock or serialization failure
RETRY_PAUSE_S = 0.005  # times the attempt: 5 ms, then 10 ms


async def retried(
    attempt: Callable[[], Awaitable[T]],
    *,
    again: Callable[[Exception], bool],
    attempts: int = RETRY_ATTEMPTS,
    pause_s: float = RETRY_PAUSE_S,
) -> T:
    """``attempt()`` until it returns, at most ``attempts`` times: tried again only after an
    exception that ``again`` accepts (after a pause of ``pause_s`` times the attempts so far);
    any other, or the last, is raised as it is."""
    for n in range(1, attempts + 1):
        try:
            return await attempt()
        except Exception as exc:
            if n == attempts or not again(exc):
                raise
            if pause_s:
                await asyncio.sleep(pause_s * n)
    raise AssertionError("unreachable")


def is_busy(exc: BaseException) -> bool:
    """A deadlock or serialization failure: the same unit of work, tried again, can succeed."""
    cause = exc.__cause__ if isinstance(exc, ledger.LedgerError) else exc
    return isinstance(cause, asyncpg.DeadlockDetectedError | asyncpg.SerializationError)


def is_busy_or_raced(exc: BaseException) -> bool:
    """Busy, or another request with the same idempotency key committed first (the retry
    replays its answer)."""
    cause = exc.__cause__ if isinstance(exc, ledger.LedgerError) else exc
    if isinstance(cause, asyncpg.UniqueViolationError):
        return bool(cause.constraint_name == "idempotency_keys_pkey")
    return is_busy(exc)


def problem_for(exc: BaseException) -> ProblemError | None:
    """What the client is told for ``exc`` from a database call: a ledger refusal as its
    problem, 503 for what a retry can cure; None for what must be raised as it is (a problem
    already, or a defect: the app's handler of unexpected errors answers 500)."""
    if isinstance(exc, ProblemError):
        return None
    if isinstance(exc, ledger.LedgerError):
        return errors.from_ledger(exc)
    if not isinstance(exc, ledger.LedgerInternalError) and is_transient(exc):
        log.warning("database unavailable", **error_fields(exc))
        return errors.Unavailable("the database is not available; retry")
    return None


def answer_for(exc: BaseException) -> BaseException:
    """:func:`problem_for` as an answer to hand on (a coalesced caller's): the problem, or the
    exception itself."""
    return problem_for(exc) or exc


async def in_transaction(pool: asyncpg.Pool, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    """Run ``work`` in one transaction, tried again after a deadlock or serialization failure
    (or a concurrent first answer for the same key). A ProblemError raised by ``work`` rolls
    everything back: a refusal writes nothing."""

    async def attempt() -> Any:
        async with pool.acquire() as conn, conn.transaction():
            return await work(conn)

    try:
        return await retried(attempt, again=is_busy_or_raced)
    except Exception as exc:
        problem = problem_for(exc)
        if problem is None and is_busy_or_raced(exc):  # raced on the key each time: still curable
            problem = errors.Unavailable("the database is busy; retry")
        if problem is None:
            raise
        raise problem from exc


async def answered(call: Awaitable[T]) -> T:
    """A read of the ledger: a refusal as its problem, 503 for what a retry can cure."""
    try:
        return await call
    except Exception as exc:
        problem = problem_for(exc)
        if problem is None:
            raise
        raise problem from exc
