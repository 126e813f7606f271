"""What a client of wallet-api is told when the database fails, decided here once; the unit of
work and its one retry policy are the platform's (:mod:`hiwallet.core.uow`).

Only what a retry can cure is answered 503 "unavailable" (:func:`hiwallet.core.db.is_transient`:
the connection lost, a timeout, a deadlock or serialization failure after the unit of work's
retries: :class:`hiwallet.core.uow.Unavailable`). A ledger refusal is its problem type;
anything else - a ledger defect (:class:`hiwallet.ledger.LedgerInternalError`), an unknown
driver error, a bug - is raised as it is, to the app's handler of unexpected errors: a logged
500, never "retry".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import structlog

from hiwallet import ledger
from hiwallet.core import uow
from hiwallet.core.db import is_transient
from hiwallet.core.http import ProblemError
from hiwallet.core.logging import error_fields
from hiwallet.wallet_api import errors

log = structlog.get_logger(__name__)

T = TypeVar("T")


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


async def in_transaction(
    pool: asyncpg.Pool,
    work: Callable[[asyncpg.Connection], Awaitable[T]],
    *,
    retry_also: Callable[[BaseException], bool] | None = None,
) -> T:
    """``work`` as one unit of work (core.uow.in_transaction: done again after a deadlock, a
    serialization failure, a connection lost before the commit, or what ``retry_also``
    accepts), its failures as the client is told them. A ProblemError raised by ``work`` rolls
    everything back: a refusal writes nothing."""
    try:
        return await uow.in_transaction(pool, work, retry_also=retry_also)
    except uow.Unavailable as exc:
        # Each attempt failed for what a retry can cure: the last one's answer, or "busy" when
        # it was a race for an idempotency key (no driver error a client is told).
        last = exc.__cause__
        problem = problem_for(last) if last is not None else None
        raise (problem or errors.Unavailable("the database is busy; retry")) from exc
    except Exception as exc:
        problem = problem_for(exc)
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
