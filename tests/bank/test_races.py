"""A callback and the transfer's record committing at the same moment: bank.receive_callback
and bank.record_transfer serialize on the bank reference (an advisory lock), so whichever comes
second sees the other's row. Without it, a callback whose look found no transfer and a record
whose look found no callback could both commit, and the transfer would stay pending."""

from __future__ import annotations

import asyncio

import asyncpg

from hiwallet.bank.store import BankStore
from hiwallet.core import db
from tests.bank.conftest import callback_body, start_command

PAIRS = 40


async def test_every_transfer_gets_its_outcome_once_whatever_commits_first(
    bank_db: str, owner: asyncpg.Connection
) -> None:
    adapter = await db.create_pool(bank_db, role=db.app_role("bank"), min_size=4, max_size=4)
    webhook = await db.create_pool(bank_db, role=db.app_role("bank"), min_size=4, max_size=4)
    try:
        adapter_store = BankStore(adapter, "hwtest.withdrawals")
        webhook_store = BankStore(webhook, "hwtest.withdrawals")

        async def record(n: int) -> None:
            command = start_command()
            async with adapter.acquire() as conn, conn.transaction():
                await adapter_store.record_transfer(
                    conn,
                    command_id=command.command_id,
                    saga_id=command.saga_id,
                    amount_minor=command.amount_minor,
                    currency=command.currency,
                    destination_iban=command.destination_iban,
                    bank_reference=f"trf_race_{n}",
                )
                # the consumer's commit comes a moment after the function's statement
                await asyncio.sleep(0.001 * (n % 3))

        async def callback(n: int) -> None:
            body = callback_body("transfer.succeeded", f"trf_race_{n}")
            await webhook_store.receive_callback(
                f"msg_race_{n}", "transfer.succeeded", f"trf_race_{n}", body.decode(), None
            )

        await asyncio.gather(*(task for n in range(PAIRS) for task in (record(n), callback(n))))
    finally:
        await adapter.close()
        await webhook.close()
    states = await owner.fetch("SELECT state, count(*) AS n FROM bank.transfers GROUP BY state")
    assert {r["state"]: r["n"] for r in states} == {"succeeded": PAIRS}
    assert await owner.fetchval("SELECT count(*) FROM bank.outbox") == PAIRS
    assert await owner.fetchval("SELECT count(*) FROM bank.inbox WHERE applied_at IS NULL") == 0
