"""Periodic clean-up of expired login state. Every process runs it; the deletes are idempotent,
so two processes doing it at once only repeat each other's work."""

from __future__ import annotations

import asyncpg
import structlog

from hiwallet.identity.sql import Q

log = structlog.get_logger(__name__)


async def purge_once(pool: asyncpg.Pool) -> int:
    purged = await pool.fetchval(Q["purge_expired"])
    return int(purged or 0)


async def purge_expired(pool: asyncpg.Pool) -> None:
    """One round (core.service's ``every``: a failed round is logged by its error's class, and a
    missed round is harmless: the next one catches up)."""
    purged = await purge_once(pool)
    if purged:
        log.info("identity purge", purged=purged)
