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

from hiwallet.bank.store import BankStore, CallbackItem, NewTransfer, Received, Recorded
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


async def _key(owner: asyncpg.Connection, reference: str) -> int:
    """bank.lock_reference's advisory lock key for ``reference``."""
    key: int = await owner.fetchval("SELECT hashtextextended('bank-transfer:' || $1, 0)", reference)
    return key


async def _references_in_key_order(owner: asyncpg.Connection) -> tuple[str, str]:
    """Two references, the first's lock key below the second's."""
    a, b = "trf_order_a", "trf_order_b"
    return (a, b) if await _key(owner, a) < await _key(owner, b) else (b, a)


async def _advisory_held(owner: asyncpg.Connection, pid: int) -> set[int]:
    """The advisory lock keys backend ``pid`` holds (granted), as bigints."""
    rows = await owner.fetch(
        "SELECT ((classid::bigint << 32) | objid::bigint) AS key FROM pg_locks"
        " WHERE pid = $1 AND locktype = 'advisory' AND granted",
        pid,
    )
    return {r["key"] for r in rows}


def _signed64(key: int) -> int:
    return key - (1 << 64) if key >= 1 << 63 else key


@pytest.mark.parametrize("waiting", ["callbacks", "records"])
async def test_a_batch_takes_its_references_locks_in_one_order(
    bank_db: str, owner: asyncpg.Connection, waiting: str
) -> None:
    """A batch of callbacks (bank.receive_callbacks) and a batch of records
    (bank.record_transfers) take their references' locks in ascending key order, whatever the
    order of their items: waiting on the lower key, a batch holds nothing above it, so two
    batches cannot each hold what the other waits for (no deadlock). Made, not hoped for: the
    lower reference's lock is held open by the other side, the batch names the higher one
    first, and the test sees it wait holding no lock of the higher one."""
    low, high = await _references_in_key_order(owner)
    holder_pool = await db.create_pool(bank_db, role=db.app_role("bank"), min_size=1, max_size=1)
    batch_pool = await db.create_pool(bank_db, role=db.app_role("bank"), min_size=1, max_size=2)
    commands = {ref: start_command() for ref in (low, high)}
    try:
        async with holder_pool.acquire() as holder_conn:
            holder_pid = holder_conn.get_server_pid()
            holder_tx = holder_conn.transaction()
            await holder_tx.start()
            if waiting == "callbacks":  # bank-adapter recorded `low`, its commit to come
                await BankStore(holder_pool, EXCHANGE).record_transfer(
                    holder_conn,
                    command_id=commands[low].command_id,
                    saga_id=commands[low].saga_id,
                    amount_minor=commands[low].amount_minor,
                    currency=commands[low].currency,
                    destination_iban=commands[low].destination_iban,
                    bank_reference=low,
                )
            else:  # a callback of `low` kept, its commit to come
                await BankStore(_Held(holder_conn), EXCHANGE).receive_callback(  # type: ignore[arg-type]
                    "msg_order_low",
                    "transfer.succeeded",
                    low,
                    callback_body("transfer.succeeded", low).decode(),
                    None,
                )
            async with batch_pool.acquire() as batch_conn:
                batch_pid = batch_conn.get_server_pid()
                store = BankStore(_Held(batch_conn), EXCHANGE)  # type: ignore[arg-type]
                if waiting == "callbacks":
                    items = [
                        CallbackItem(
                            f"msg_order_{r}",
                            "transfer.succeeded",
                            r,
                            callback_body("transfer.succeeded", r).decode(),
                            None,
                        )
                        for r in (high, low)
                    ]
                    second = asyncio.create_task(store.receive_callbacks(items))
                else:

                    async def records() -> list[Recorded]:
                        async with batch_conn.transaction():
                            return await store.record_transfers(
                                batch_conn,
                                [
                                    NewTransfer(
                                        c.command_id,
                                        c.saga_id,
                                        c.amount_minor,
                                        c.currency,
                                        c.destination_iban,
                                        r,
                                    )
                                    for r, c in ((high, commands[high]), (low, commands[low]))
                                ],
                            )

                    second = asyncio.create_task(records())
                try:
                    await until(lambda: _waits_on(owner, batch_pid, holder_pid), 10, "the batch waiting")
                    assert not second.done()
                    held = {_signed64(k) for k in await _advisory_held(owner, batch_pid)}
                    assert await _key(owner, high) not in held
                finally:
                    await holder_tx.commit()
                answers = await asyncio.wait_for(second, 10)
    finally:
        await holder_pool.close()
        await batch_pool.close()
    states = dict(await owner.fetch("SELECT bank_reference, state FROM bank.transfers"))
    if waiting == "callbacks":
        assert answers == [Received.UNKNOWN, Received.RECORDED]
        assert states == {low: "succeeded"}
    else:
        assert answers == [Recorded.PENDING, Recorded.SUCCEEDED]
        assert states == {low: "succeeded", high: "pending"}
    assert await owner.fetchval("SELECT count(*) FROM bank.outbox") == 1
