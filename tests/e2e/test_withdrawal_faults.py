"""The withdrawal saga end to end with faults (tests/e2e/withdrawals.py, each process reaching
RabbitMQ through a proxy of its own): processes killed with SIGKILL at the moments that matter,
a command lost, RabbitMQ restarted mid-saga. Each test ends with the saga in its final state,
the wallet right to the kuruş and the ledger verified.

Where a fault must strike between two steps of a process (after bank-adapter called the bank
and before it recorded the transfer; after wallet-consumer committed a debit and before its ack
reaches the broker), the test holds the second step from the outside (a trigger, installed by the
database's owner, that makes the write sleep; the process's proxy holding what it sends) rather
than racing a kill against it.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import aio_pika
import asyncpg

from hiwallet.contracts.withdrawals import WALLET_QUEUE, command_id
from hiwallet.core import db
from tests.e2e import harness
from tests.e2e.withdrawals import (
    BANK_ADAPTER,
    FEE_MINOR,
    ORCHESTRATOR,
    WALLET_CONSUMER,
    WithdrawalSystem,
    total,
)

# The module's processes each reach RabbitMQ through a StallingProxy of their own.
PROXIED = True
TL = 100
DONE = ["withdrawal", "settlement_withdrawal"]

# bank-adapter's record of one transfer (the insert inside bank.record_transfer) waits here: the
# bank has been called, the row is not written. Only for the test's own IBAN.
HOLD_RECORD_SQL = """
CREATE FUNCTION public.e2e_hold_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.destination_iban = '{iban}' THEN
        PERFORM pg_sleep(60);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER e2e_hold_record BEFORE INSERT ON bank.transfers
    FOR EACH ROW EXECUTE FUNCTION public.e2e_hold_record();
"""
# The orchestrator's move of one saga to ``{state}`` waits here (inside the results consumer's
# transaction: the result handled, not committed, not acked).
HOLD_MOVE_SQL = """
CREATE FUNCTION public.e2e_hold_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id = '{saga_id}' AND NEW.state = '{state}' THEN
        PERFORM pg_sleep(60);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER e2e_hold_move BEFORE UPDATE ON withdrawal.sagas
    FOR EACH ROW EXECUTE FUNCTION public.e2e_hold_move();
"""
DROP_MOVE_SQL = "DROP TRIGGER e2e_hold_move ON withdrawal.sagas; DROP FUNCTION public.e2e_hold_move();"
DROP_HOLD_SQL = "DROP TRIGGER e2e_hold_record ON bank.transfers; DROP FUNCTION public.e2e_hold_record();"


async def sleepers(database: str) -> int:
    """Sessions of ``database`` waiting in pg_sleep (a held write)."""
    conn = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event = 'PgSleep'", database
        )
        return n
    finally:
        await conn.close()


async def end_sleepers(database: str) -> None:
    """What the server does to the sessions of a client that died (once it notices): end them,
    their transactions and locks."""
    conn = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND wait_event = 'PgSleep'",
            database,
        )
    finally:
        await conn.close()


async def test_bank_adapter_killed_after_calling_the_bank_before_recording(
    withdrawals: WithdrawalSystem,
) -> None:
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    iban = system.iban()
    owner = await asyncpg.connect(db.owner_dsn(system.bank_db))
    try:
        await owner.execute(HOLD_RECORD_SQL.format(iban=iban))
        saga_id = await system.withdraw(customer, 400 * TL, iban)
        bank_command = command_id(saga_id, "bank")
        await harness.until(
            lambda: system.bank.transfers(bank_command), 20, "the bank asked for the transfer"
        )
        await harness.until(lambda: sleepers(system.bank_db), 20, "the transfer's record held")
        await system.adapter.crash()
        await end_sleepers(system.bank_db)
        await owner.execute(DROP_HOLD_SQL)
    finally:
        await owner.close()
    assert await system.transfers(saga_id) == []
    # Meanwhile the bank decided it and called back: kept, for a transfer not recorded yet.
    [at_bank] = await harness.until(
        lambda: _decided(system, bank_command), 20, "the bank decided the transfer"
    )
    await harness.until(lambda: system.inbox(at_bank["reference"]), 20, "the callback kept before the record")

    # Started again, the command delivered again asks the bank with the same key: the same transfer.
    await system.restart(BANK_ADAPTER)
    await system.ended(saga_id, "completed", customer.wallet_id, 1_000 * TL - 400 * TL - FEE_MINOR, DONE)
    assert [t["reference"] for t in await system.bank.transfers(bank_command)] == [at_bank["reference"]]
    [transfer] = await system.transfers(saga_id)
    assert (transfer["state"], transfer["bank_reference"]) == ("succeeded", at_bank["reference"])


async def _decided(system: WithdrawalSystem, client_reference: str) -> list[dict[str, object]]:
    found = await system.bank.transfers(client_reference)
    return found if found and all(t["status"] != "pending" for t in found) else []


async def test_the_orchestrator_killed_in_the_middle_of_a_move(withdrawals: WithdrawalSystem) -> None:
    """Killed while it moved the saga from bank_transfer_pending to settling (the bank's success
    in hand, the transaction not committed): started again, the result is delivered again and
    the saga moves on once; nothing is posted or sent twice."""
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    iban = system.iban()
    await system.bank.rule(iban, outcome="hold")
    saga_id = await system.withdraw(customer, 300 * TL, iban)
    await system.reaches(saga_id, "bank_transfer_pending")
    [transfer] = await harness.until(lambda: system.transfers(saga_id), 20, "the transfer recorded")
    owner = await asyncpg.connect(db.owner_dsn(system.withdrawal_db))
    try:
        await owner.execute(HOLD_MOVE_SQL.format(saga_id=saga_id, state="settling"))
        await system.bank.decide(transfer["bank_reference"], "accept")
        await harness.until(lambda: sleepers(system.withdrawal_db), 20, "the move to settling held")
        await system.orchestrator.crash()
        await end_sleepers(system.withdrawal_db)
        await owner.execute(DROP_MOVE_SQL)
    finally:
        await owner.close()
    assert (await system.saga(saga_id))["state"] == "bank_transfer_pending"

    await system.restart(ORCHESTRATOR)
    await system.ended(saga_id, "completed", customer.wallet_id, 1_000 * TL - 300 * TL - FEE_MINOR, DONE)
    assert await system.path(saga_id) == [
        "initiated",
        "debited",
        "bank_transfer_pending",
        "settling",
        "completed",
    ]
    assert len(await system.bank.transfers(transfer["command_id"])) == 1


async def test_the_orchestrator_killed_between_states_the_stuck_saga_scan_drives_it_on(
    withdrawals: WithdrawalSystem,
) -> None:
    """The orchestrator's own state is durable (its outbox, the results queue): killed, it loses
    nothing a restart does not pick up (the test above). What only the stuck saga scan recovers
    is a saga whose command was lost while it waited: here its DebitForWithdrawal, purged from
    the wallet's queue while the orchestrator was down (a broker that lost the message, an
    operator's purge). Started again with short scan intervals, the orchestrator publishes the
    command again, with the same command id."""
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    await system.consumer.crash()  # the command waits in the queue
    saga_id = await system.withdraw(customer, 150 * TL, system.iban())

    async def command_queued() -> bool:
        return (await system.queues())[WALLET_QUEUE] == 1 and await system.unsent() == 0

    await harness.until(command_queued, 20, "the debit command published")
    await system.orchestrator.crash()  # between states: initiated, its command out
    await _purge(system, WALLET_QUEUE)
    await system.restart(WALLET_CONSUMER)
    assert (await system.saga(saga_id))["state"] == "initiated"

    orchestrator = await system.replace(ORCHESTRATOR, stuck_scan_interval_s=1, stuck_after_s=2)
    await system.ended(saga_id, "completed", customer.wallet_id, 1_000 * TL - 150 * TL - FEE_MINOR, DONE)
    samples = await orchestrator.metrics()
    assert total(samples, "hiwallet_withdrawal_stuck_republished_total", state="initiated") >= 1, samples
    assert await system.path(saga_id) == [
        "initiated",
        "debited",
        "bank_transfer_pending",
        "settling",
        "completed",
    ]


async def _purge(system: WithdrawalSystem, queue_name: str) -> None:
    connection = await aio_pika.connect(harness.amqp_url(system.vhost), timeout=10)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, passive=True)
        await queue.purge()
    finally:
        await connection.close()


async def test_wallet_consumer_killed_between_the_debit_and_its_ack(withdrawals: WithdrawalSystem) -> None:
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    amqp = system.proxies[WALLET_CONSUMER]
    with amqp.stall_upstream():
        # What the broker sends reaches wallet-consumer; nothing it sends back (its ack, its
        # relay's publish of the answer) arrives.
        saga_id = await system.withdraw(customer, 200 * TL, system.iban())
        debit = command_id(saga_id, "debit")

        async def debited() -> bool:
            rows = await system.fetch(
                system.wallet_db, "SELECT 1 FROM wallet.processed_messages WHERE command_id = $1", debit
            )
            return bool(rows)

        await harness.until(debited, 20, "the debit committed")
        assert await system.postings(saga_id) == ["withdrawal"]
        await system.consumer.crash()
        amqp.cut()  # its connections cut while held: the ack never reaches the broker

    consumer = await system.restart(WALLET_CONSUMER)
    await system.ended(saga_id, "completed", customer.wallet_id, 1_000 * TL - 200 * TL - FEE_MINOR, DONE)
    samples = await consumer.metrics()
    # RabbitMQ delivered the unacknowledged debit again; it changed nothing.
    assert total(samples, "hiwallet_consumer_messages_total", outcome="duplicate") >= 1, samples


async def test_rabbitmq_restarted_mid_saga(withdrawals: WithdrawalSystem) -> None:
    """RabbitMQ restarted, as its clients see it: every process's proxy to it broken (open
    connections cut, new ones refused) and healed later. Meanwhile a held transfer is decided
    (its callback kept by bank-webhook, its outcome waiting in bank.outbox) and a new withdrawal
    is asked for (kept in the orchestrator's outbox); both complete once RabbitMQ is back."""
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    held = system.iban()
    await system.bank.rule(held, outcome="hold")
    first = await system.withdraw(customer, 100 * TL, held)
    await system.reaches(first, "bank_transfer_pending")
    [transfer] = await harness.until(lambda: system.transfers(first), 20, "the transfer recorded")

    async with AsyncExitStack() as outage:
        for proxy in system.proxies.values():
            await outage.enter_async_context(proxy.down())
        await system.bank.decide(transfer["bank_reference"], "accept")
        await harness.until(lambda: system.inbox(transfer["bank_reference"]), 20, "the callback kept")
        second = await system.withdraw(customer, 200 * TL, system.iban())
        await harness.until(lambda: _unsent_at_least(system, 2), 20, "both announcements waiting")
        await harness.until(
            lambda: _not_ready(system.orchestrator), 20, "the orchestrator not ready without RabbitMQ"
        )
        # a while: reconnection attempts fail meanwhile
        refused = sum(proxy.connections_refused for proxy in system.proxies.values())
        await harness.until(
            lambda: sum(proxy.connections_refused for proxy in system.proxies.values()) >= refused + 2,
            20,
            "reconnections refused",
        )
        assert (await system.saga(first))["state"] == "bank_transfer_pending"
        assert (await system.saga(second))["state"] == "initiated"

    for process in (system.orchestrator, system.consumer, system.adapter):
        await process.wait_ready()
    expected = 1_000 * TL - 300 * TL - 2 * FEE_MINOR
    for saga_id in (first, second):
        await system.ended(saga_id, "completed", customer.wallet_id, expected, DONE, timeout_s=60)


async def _unsent_at_least(system: WithdrawalSystem, n: int) -> bool:
    return await system.unsent() >= n


async def _not_ready(process: harness.Process) -> bool:
    return not await process.ready()


async def test_the_stuck_saga_scan_racing_every_step_with_two_instances_of_each_consumer(
    withdrawals: WithdrawalSystem,
) -> None:
    """The stuck saga scan made impatient (every 0.3 s, for sagas waiting 0.2 s: nearly every
    command published twice or more, the copies racing the originals), two wallet-consumers and
    two bank-adapters taking them at once, and the bank's every behaviour (accepted, rejected,
    callback lost, called back three times with distinct ids): every saga ends once, each wallet
    right to the kuruş, one transfer per saga at the bank, no dead letter. A withdrawal under
    review is left alone by the scan, and its cancellation races it too."""
    system = withdrawals
    orchestrator = await system.replace(ORCHESTRATOR, stuck_scan_interval_s=0.3, stuck_after_s=0.2)
    await system.another(WALLET_CONSUMER)
    await system.another(BANK_ADAPTER)
    customers = [await system.customer(funds=1_000 * TL) for _ in range(4)]
    _accepted, rejected, lost, repeated = ibans = [system.iban() for _ in range(4)]
    await system.bank.rule(rejected, outcome="reject")
    await system.bank.rule(lost, lose_callback=True)
    await system.bank.rule(repeated, duplicate_callback=3, duplicate_distinct_ids=True)
    reviewed_customer = await system.customer(funds=20_000 * TL)
    reviewed = await system.withdraw(reviewed_customer, 15_000 * TL, system.iban())
    sagas = await asyncio.gather(
        *(
            system.withdraw(customer, amount, iban)
            for customer, iban in zip(customers, ibans, strict=True)
            for amount in (10 * TL, 20 * TL, 30 * TL)
        )
    )

    for i, saga_id in enumerate(sagas):
        customer, iban = customers[i // 3], ibans[i // 3]
        if iban == rejected:
            await system.ended(
                saga_id, "failed", customer.wallet_id, 1_000 * TL, ["withdrawal", "refund"], 60
            )
        else:
            expected = 1_000 * TL - 60 * TL - 3 * FEE_MINOR
            await system.ended(saga_id, "completed", customer.wallet_id, expected, DONE, 60)
        [transfer] = await system.transfers(saga_id)
        assert len(await system.bank.transfers(transfer["command_id"])) == 1
    samples = await orchestrator.metrics()
    assert total(samples, "hiwallet_withdrawal_stuck_republished_total") >= len(sagas), samples

    # (Its debit may have been published again while it was initiated; under review, never.)
    waiting = await system.reaches(reviewed, "under_review")

    async def untouched() -> bool:  # by the scan's rounds (every 0.3 s): under review, never republished
        saga = await system.saga(reviewed)
        return (saga["state"], saga["republished"]) == ("under_review", waiting["republished"])

    await harness.stays(untouched, 1.0, "under review, not republished", interval_s=0.1)
    saga = await system.saga(reviewed)
    assert saga["last_published_at"] == waiting["last_published_at"]
    status, out = await system.cli("withdrawals", "cancel", reviewed)
    assert status == 0, out
    await system.ended(
        reviewed, "cancelled", reviewed_customer.wallet_id, 20_000 * TL, ["withdrawal", "refund"]
    )
