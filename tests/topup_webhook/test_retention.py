"""Retention: processed inbox rows older than retention_days, and outbox rows sent that long
ago, are deleted in bounded batches; the payment records stay."""

from __future__ import annotations

import asyncpg
from prometheus_client import CollectorRegistry

from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.retention import Retention
from tests.topup_webhook.conftest import post_stripe, running, stored, stripe_events, topup_settings


async def test_old_processed_rows_go_in_batches_and_payments_stay(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    async with running(topup_settings(topup_db)) as client:
        for _ in range(12):
            checkout, intent = stripe_events()
            for event in (checkout, intent):
                assert (await post_stripe(client, event)).status_code == 202
        store = client.app.state.store  # type: ignore[attr-defined]
        # 20 of the 24 notifications were received 31 days ago, one of those not processed (it
        # stays whatever its age); the 12 messages were sent 31 days ago but 2 still wait
        await owner.execute(
            "UPDATE topup.inbox SET received_at = now() - interval '31 days' WHERE id <= 20;"
            "UPDATE topup.inbox SET processed_at = NULL WHERE id = 1;"
            "UPDATE topup.outbox SET sent_at = now() - interval '31 days' WHERE id > 2"
        )
        metrics = TopupMetrics(CollectorRegistry())
        first = Retention(store, days=30, batch=7, max_batches=2, metrics=metrics)
        assert await first.run() == 14  # two batches of 7, the rest waits for the next round
        assert await Retention(store, days=30, batch=7, max_batches=100, metrics=metrics).run() == 5
        assert await Retention(store, days=30, batch=7, max_batches=100, metrics=metrics).run() == 0
        assert metrics.inbox_purged._value.get() == 19
        assert await store.inbox_rows() == 5

    s = await stored(owner)
    assert [r["id"] for r in s.inbox] == [1, 21, 22, 23, 24]
    assert len(s.payments) == 12
    assert [r["id"] for r in s.outbox] == [1, 2]  # unsent, kept


async def test_retention_of_a_day_keeps_yesterdays_rows(topup_db: str, owner: asyncpg.Connection) -> None:
    async with running(topup_settings(topup_db)) as client:
        assert (await post_stripe(client, stripe_events()[0])).status_code == 202
        await owner.execute("UPDATE topup.inbox SET received_at = now() - interval '20 hours'")
        store = client.app.state.store  # type: ignore[attr-defined]
        assert (
            await Retention(
                store, days=1, batch=10, max_batches=1, metrics=TopupMetrics(CollectorRegistry())
            ).run()
            == 0
        )
        # whatever the service asks, the database keeps a day (topup.purge_inbox)
        assert await store.purge_inbox(0, 10) == 0
    assert len((await stored(owner)).inbox) == 1
