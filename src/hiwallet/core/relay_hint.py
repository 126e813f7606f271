"""RelayHint: what wakes an outbox's relay after a writer's commit, for an outbox without the
NOTIFY trigger. Apart from core.outbox (which re-exports it) so that a process that writes an
outbox but runs no relay and no broker (bank-webhook) can import it alone."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import asyncpg
import structlog

from hiwallet.core.queries import checked_identifier
from hiwallet.core.timeouts import within

__all__ = ["RelayHint", "Wakeable"]

log = structlog.get_logger(__name__)


class Wakeable(Protocol):
    """A relay, as a hint sees it (core.outbox.Relay)."""

    def wake(self) -> bool: ...


class RelayHint:
    """Wakes the relay after a commit that wrote outbox rows, for an outbox without the NOTIFY
    trigger (``outbox_table_sql(..., notify_trigger=False)``): the writer calls
    :meth:`committed` once its transaction has committed.

    When ``relay`` (this process's) leads, it is woken directly: no round trip. Otherwise one
    ``pg_notify(channel)`` reaches the leader in another instance, sent on a pooled connection
    in a transaction of its own, never inside a writer's (a NOTIFY serializes commits on the
    server's notify-queue lock). Coalesced: at most one in flight; commits while one is in
    flight cause exactly one more after it (never zero: the one in flight may have reached the
    relay before their rows were committed, so none is lost). Only a hint: one that fails is
    logged, and the relay's poll finds the rows."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        channel: str,
        *,
        relay: Wakeable | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("the hint's timeout must be positive")
        self._pool = pool
        self.channel = checked_identifier(channel)
        self.relay = relay
        self.timeout_s = timeout_s
        self._query = "SELECT pg_notify($1, '')"  # core/sql/outbox.sql "notify" says why alone
        self._sending: asyncio.Task[None] | None = None
        self._again = False
        self.sent = 0  # NOTIFYs sent (tests, and what the coalescing saved)

    def committed(self) -> None:
        """Rows were committed: wake the relay. Never blocks, never raises."""
        if self.relay is not None and self.relay.wake():
            return
        if self._sending is not None:
            self._again = True  # one more after the one in flight
            return
        self._sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        try:
            while True:
                self._again = False  # before the round trip: a commit during it asks again
                try:
                    await within(self._pool.execute(self._query, self.channel), self.timeout_s)
                    self.sent += 1
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the poll is the safety net
                    log.warning("relay hint not sent", channel=self.channel, error=type(exc).__name__)
                if not self._again:
                    return
        finally:
            self._sending = None

    async def aclose(self) -> None:
        """Let the hint in flight (and the one it owes) go out, within the timeout; before the
        pool closes."""
        task = self._sending
        if task is None:
            return
        try:
            await within(asyncio.shield(task), 2 * self.timeout_s)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
