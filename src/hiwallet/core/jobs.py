"""Periodic jobs that run in every instance of a service but do their work in one at a time.

Each round takes a session-level ``pg_try_advisory_lock`` on a connection of its own, opened
for the round and closed after it. Never a pooled connection: the pools here release
connections without asyncpg's reset query (core/db.py, ``_keep_session``), so a session lock
taken on one would outlive the round and stay with whichever request got the connection next.
A closed connection releases the lock whatever happened (a crash, a cancel, a lost network).

A lock held elsewhere means another instance is doing this round: this one skips it (no
waiting, no queue of rounds). An error is logged and the next round tries again; a round is
bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import asyncpg
import structlog

from hiwallet.core.timeouts import within

__all__ = ["PeriodicJob", "in_batches"]

log = structlog.get_logger(__name__)


async def in_batches(step: Callable[[], Awaitable[int]], *, batch: int, max_batches: int) -> int:
    """Run ``step`` - one short statement that handles (deletes, moves) at most ``batch`` rows
    and says how many - until it handles fewer than ``batch`` or it ran ``max_batches`` times;
    the total. A retention round this way never holds a long transaction or many locks, and
    never runs unbounded: what is left waits for the next round."""
    if batch < 1 or max_batches < 1:
        raise ValueError("batch and max_batches must be >= 1")
    total = 0
    for _ in range(max_batches):
        done = await step()
        total += done
        if done < batch:
            break
    return total


class PeriodicJob:
    def __init__(
        self,
        name: str,
        interval_s: float,
        lock_key: int,
        run: Callable[[], Awaitable[int | None]],
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        *,
        timeout_s: float | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"{name}: interval_s must be positive")
        self.name = name
        self.interval_s = interval_s
        self.lock_key = lock_key
        # A round may take at most this long (default: one interval), so a stuck round never
        # holds the lock (and the job) forever.
        self.timeout_s = timeout_s if timeout_s is not None else interval_s
        if self.timeout_s <= 0:
            raise ValueError(f"{name}: timeout_s must be positive")
        self._run = run
        self._connect = connect
        self.rounds = 0  # rounds this instance ran (not skipped)
        self.skipped = 0  # rounds skipped because another instance held the lock

    async def run_once(self) -> bool:
        """One round, if no other instance is running one: False when the lock was busy.
        The job's own errors propagate."""
        conn = await self._connect()
        try:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", self.lock_key):
                self.skipped += 1
                log.debug("job skipped: another instance holds its lock", job=self.name)
                return False
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.timeout_s):
                    done = await self._run()
            finally:
                # Unlock explicitly although close() would: the connection may be slow to close.
                # The session may be gone already, and its lock with it.
                if not conn.is_closed():
                    with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                        await conn.execute("SELECT pg_advisory_unlock($1)", self.lock_key)
            self.rounds += 1
            log.info(
                "job round done",
                job=self.name,
                done=done,
                duration_ms=round((time.monotonic() - started) * 1000, 1),
            )
            return True
        finally:
            try:
                await within(conn.close(), 2.0)
            except Exception:
                conn.terminate()

    async def run_forever(self) -> None:
        """A round every interval_s, the first one interval after the start (a service that
        starts does not stampede the database with every job at once). Until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("job round failed; the next round tries again", job=self.name)
