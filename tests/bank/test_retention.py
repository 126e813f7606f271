"""bank-adapter's retention: applied callbacks (their bodies hold the destination IBAN) and sent
outbox rows older than the retention are deleted in bounded batches; a callback still waiting
for its transfer, a young one, an unsent outbox row and every transfer stay."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from hiwallet.bank.adapter import retention_job
from hiwallet.bank.metrics import AdapterMetrics
from hiwallet.bank.pool import database_spec
from hiwallet.bank.store import BankStore, Received, Recorded
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from tests.bank.conftest import IBAN, bank_settings, inbox, outbox, transfers

EXCHANGE = "hwtest.withdrawals"


@pytest.fixture
async def pool(bank_db: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(bank_db, role=db.app_role("bank"), max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


async def _transfer(store: BankStore, pool: asyncpg.Pool, n: int) -> str:
    reference = f"trf_{n}"
    async with pool.acquire() as conn, conn.transaction():
        recorded = await store.record_transfer(
            conn,
            command_id=f"cmd{n}",
            saga_id=f"saga{n}",
            amount_minor=100,
            currency="TRY",
            destination_iban=IBAN,
            bank_reference=reference,
        )
    assert recorded is Recorded.PENDING
    return reference


async def test_old_applied_callbacks_and_sent_outbox_rows_go_the_rest_stays(
    bank_db: str, pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    store = BankStore(pool, EXCHANGE)
    metrics = AdapterMetrics(CollectorRegistry())
    # five transfers decided by their callbacks (applied), one callback for a transfer not
    # recorded yet (waiting: applied_at NULL), one young applied callback
    for n in range(5):
        reference = await _transfer(store, pool, n)
        assert (
            await store.receive_callback(f"msg_{n}", "transfer.succeeded", reference, "{}", None)
            == "recorded"
        )
    assert (
        await store.receive_callback("msg_wait", "transfer.failed", "trf_later", "{}", "x")
        is Received.UNKNOWN
    )
    reference = await _transfer(store, pool, 9)
    assert (
        await store.receive_callback("msg_young", "transfer.succeeded", reference, "{}", None) == "recorded"
    )
    # all but the young one received long ago; the five outcomes' announcements sent long ago
    await owner.execute(
        "UPDATE bank.inbox SET received_at = now() - interval '30 days' WHERE webhook_id <> 'msg_young'"
    )
    await owner.execute(
        "UPDATE bank.outbox SET sent_at = now() - interval '30 days'"
        " WHERE id IN (SELECT id FROM bank.outbox ORDER BY id LIMIT 5)"
    )

    settings = bank_settings(bank_db, retention_h=24, retention_batch=2, retention_max_batches=2)
    job = retention_job(store, settings, metrics, database_spec(settings).dedicated(get_settings()))
    assert await job.run_once()
    # bounded: two batches of two this round, the fifth the next
    assert len(await inbox(owner)) == 3
    assert await job.run_once()
    left = {row["webhook_id"] for row in await inbox(owner)}
    assert left == {"msg_wait", "msg_young"}
    assert metrics.inbox_purged._value.get() == 5
    unsent = [row for row in await outbox(owner) if row["sent_at"] is None]
    assert len(unsent) == 1 and len(await outbox(owner)) == 1  # the young outcome's announcement
    assert len(await transfers(owner)) == 6


async def test_at_least_a_day_is_kept_whatever_is_asked(
    pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    store = BankStore(pool, EXCHANGE)
    reference = await _transfer(store, pool, 1)
    await store.receive_callback("msg_1", "transfer.succeeded", reference, "{}", None)
    await owner.execute("UPDATE bank.inbox SET received_at = now() - interval '20 hours'")
    assert await store.purge_inbox(0, 100) == 0
    await owner.execute("UPDATE bank.inbox SET received_at = now() - interval '25 hours'")
    assert await store.purge_inbox(0, 100) == 1
