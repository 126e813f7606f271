"""Fault injection for tests: make the database fail at chosen points of a posting.

Production uses :data:`NO_FAULTS`. A test passes a :class:`FaultPlan` that raises, or kills the
session's backend, when the store reaches a named point.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

import asyncpg


class FaultPoint(StrEnum):
    BEFORE = "before"  # before the transaction starts: nothing was sent
    INSIDE = "inside"  # after the posting function ran, before COMMIT
    AT_COMMIT = "at_commit"  # the connection dies as COMMIT is sent
    AFTER_COMMIT = "after_commit"  # committed, but the caller sees an error (a lost answer)


class InjectedFault(ConnectionError):
    """A failure made on purpose by a test: as the connection failing, the one kind of failure
    in the middle of a posting that a retry with the same id can cure."""


class FaultInjector(Protocol):
    async def __call__(self, point: FaultPoint, conn: asyncpg.Connection) -> None: ...


async def _no_faults(point: FaultPoint, conn: asyncpg.Connection) -> None:
    return None


NO_FAULTS: FaultInjector = _no_faults


class FaultPlan:
    """Fails the next ``times`` passes through ``point``; counts every pass.

    With ``kill_dsn`` the fault is real: another session terminates the posting's backend, so
    PostgreSQL itself rolls back whatever was open, as when a process or the network dies.
    """

    def __init__(self, point: FaultPoint, times: int = 1, *, kill_dsn: str | None = None) -> None:
        self.point = point
        self.remaining = times
        self.kill_dsn = kill_dsn
        self.fired = 0

    async def __call__(self, point: FaultPoint, conn: asyncpg.Connection) -> None:
        if point != self.point or self.remaining <= 0:
            return
        self.remaining -= 1
        self.fired += 1
        if self.kill_dsn is None:
            raise InjectedFault(f"injected fault at {point}")
        killer = await asyncpg.connect(self.kill_dsn)
        try:
            await killer.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
        finally:
            await killer.close()
