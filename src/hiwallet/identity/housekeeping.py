"""Periodic clean-up of expired login state. Every process runs it; the deletes are idempotent,
so two processes doing it at once only repeat each other's work."""

from __future__ import annotations

import asyncio

import asyncpg
import structlog

from hiwallet.core.logging import error_fields
from hiwallet.identity.sql import Q

log = structlog.get_logger(__name__)


async def purge_once(pool: asyncpg.Pool) -> int:
    purged = await pool.fetchval(Q["purge_expired"])
    return int(purged or 0)


async def purge_forever(pool: asyncpg.Pool, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            purged = await purge_once(pool)
        except (asyncpg.PostgresError, OSError) as exc:
            # A missed round is harmless; the next one catches up.
            log.warning("identity purge failed", **error_fields(exc))
            continue
        if purged:
            log.info("identity purge", purged=purged)
