"""A callback and the transfer's record committing at the same moment: bank.receive_callback
and bank.record_transfer serialize on the bank reference (an advisory lock), so whichever comes
second sees the other's row. Without it, a callback whose look found no transfer and a record
whose look found no callback could both commit, and the transfer would stay pending.

The race is made, not hoped for: the first one's transaction is held open after its statement,
the second is started, and the test sees it wait on the first one's lock (pg_locks) before
letting the first commit. Without the lock the second would not wait, and the test fails."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from hiwallet.bank.store import BankStore
from hiwallet.core import db
from tests.bank.conftest import callback_body, start_command
from tests.waiting import until

REFERENCE = "trf_race_1"
EXCHANGE = "hwtest.withdrawals"


class _Held:
    """A "pool" of one connection, for BankStore's statements that take the pool: the statement
    runs in the transaction the test holds open on that connection."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.conn.fetchval(query, *args)


async def _waits_on(owner: asyncpg.Connection, waiter: int, holder: int) -> bool:
    """Whether backend ``waiter`` waits for an advisory lock that backend ``holder`` holds."""
    found: bool = await owner.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)"
        " AND $2 = ANY (pg_blocking_pids($1))",
        waiter,
        holder,
    )
    return found


async def _record(store: BankStore, conn: asyncpg.Connection) -> None:
    command = start_command()
    await store.record_transfer(
        conn,
        command_id=command.command_id,
        saga_id=command.saga_id,
        amount_minor=command.amount_minor,
        currency=command.currency,
        destination_iban=command.destination_iban,
        bank_reference=REFERENCE,
    )


async def _callback(store: BankStore) -> None:
    body = callback_body("transfer.succeeded", REFERENCE)
    await store.receive_callback("msg_race_1", "transfer.succeeded", REFERENCE, body.decode(), None)


@pytest.mark.parametrize("first", ["record", "callback"])
async def test_the_second_waits_for_the_first_and_sees_its_row(
    bank_db: str, owner: asyncpg.Connection, first: str
) -> None:
    adapter = await db.create_pool(bank_db, role=db.app_role("bank"), min_size=1, max_size=1)
    webhook = await db.create_pool(bank_db, role=db.app_role("bank"), min_size=1, max_size=1)
    try:
        async with adapter.acquire() as record_conn, webhook.acquire() as callback_conn:
            record_pid, callback_pid = record_conn.get_server_pid(), callback_conn.get_server_pid()
            adapter_store = BankStore(adapter, EXCHANGE)
            # The callback's one statement, on the connection this test holds (autocommit, or
            # in the transaction the test holds open when it comes first).
            webhook_store = BankStore(_Held(callback_conn), EXCHANGE)  # type: ignore[arg-type]
            record_tx = record_conn.transaction()
            if first == "record":
                await record_tx.start()
                await _record(adapter_store, record_conn)  # its lock taken, not committed
                second = asyncio.create_task(_callback(webhook_store))
                waiter, holder = callback_pid, record_pid
            else:
                callback_tx = callback_conn.transaction()
                await callback_tx.start()
                await _callback(webhook_store)  # its lock taken, not committed
                await record_tx.start()
                second = asyncio.create_task(_record(adapter_store, record_conn))
                waiter, holder = record_pid, callback_pid
            try:
                await until(lambda: _waits_on(owner, waiter, holder), 10, "the second waiting on the lock")
                assert not second.done()
            finally:
                # The first commits; the second goes on, and sees the first one's row.
                await (record_tx if first == "record" else callback_tx).commit()
            await asyncio.wait_for(second, 10)
            if first == "callback":
                await record_tx.commit()
    finally:
        await adapter.close()
        await webhook.close()
    assert await owner.fetchval("SELECT state FROM bank.transfers WHERE bank_reference = $1", REFERENCE) == (
        "succeeded"
    )
    assert await owner.fetchval("SELECT count(*) FROM bank.outbox") == 1
    assert await owner.fetchval("SELECT count(*) FROM bank.inbox WHERE applied_at IS NULL") == 0
