"""The retention job: processed inbox rows received more than ``retention_days`` ago, and outbox
rows sent more than that ago, deleted in bounded batches (each its own short statement; at most
``retention_max_batches`` of each per round, the rest next round). Payment records stay."""

from __future__ import annotations

import asyncpg

from hiwallet.core.jobs import in_batches
from hiwallet.core.outbox import purge_sent
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.store import TopupStore

OUTBOX_TABLE = "topup.outbox"
OUTBOX_CHANNEL = "topup_outbox"


class Retention:
    def __init__(
        self, store: TopupStore, days: int, batch: int, max_batches: int, metrics: TopupMetrics
    ) -> None:
        if days < 1 or batch < 1 or max_batches < 1:
            raise ValueError("retention needs days, batch and max_batches >= 1")
        self.store = store
        self.days = days
        self.batch = batch
        self.max_batches = max_batches
        self.metrics = metrics

    async def run(self) -> int:
        """One round: how many inbox rows it deleted."""

        async def inbox_batch() -> int:
            count = await self.store.purge_inbox(self.days, self.batch)
            self.metrics.inbox_purged.inc(count)
            return count

        deleted = await in_batches(inbox_batch, batch=self.batch, max_batches=self.max_batches)
        pool: asyncpg.Pool = self.store.pool
        async with pool.acquire() as conn:
            await in_batches(
                lambda: purge_sent(conn, OUTBOX_TABLE, self.days * 86_400.0, self.batch),
                batch=self.batch,
                max_batches=self.max_batches,
            )
        return deleted
