"""End to end, with faults: processes killed with SIGKILL at the moments that matter, RabbitMQ and
PostgreSQL unreachable for a while (a TCP proxy in front of each, broken and healed), two relays
at once, a poison message. Every test ends with each wallet credited exactly once and the ledger
verified.

Where a fault must strike between two steps of a process (after the broker confirmed a publish
and before the relay marks the row sent; after wallet-consumer committed and before its ack
reaches the broker), the test holds the second step from the outside (a trigger that makes the
mark wait; a proxy that holds what the consumer sends) rather than racing a kill against it.
"""

from __future__ import annotations

import json
import uuid

import asyncpg

from hiwallet.core import db
from tests.e2e import harness
from tests.e2e.system import System
from tests.servers import free_port
from tests.stripe_events import stripe_event

# The relay's mark waits in this trigger (the owner adds it to the test's clone only).
HOLD_MARK_SQL = """
CREATE FUNCTION public.e2e_hold_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.sent_at IS NOT NULL AND OLD.sent_at IS NULL THEN
        PERFORM pg_sleep(30);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER e2e_hold_mark BEFORE UPDATE ON topup.outbox
    FOR EACH ROW EXECUTE FUNCTION public.e2e_hold_mark();
"""


async def card(webhook: harness.Process, wallet: str | None, amount: int, currency: str = "try") -> str:
    """A card payment's notification, delivered to topup-webhook as Stripe does; the payment
    intent's id."""
    payment_intent = f"pi_{uuid.uuid4().hex[:24]}"
    event = stripe_event("payment_intent.succeeded", payment_intent, wallet, amount, currency)
    assert await harness.post_stripe_event(webhook.url, event) == 202
    return payment_intent


async def processed(system: System) -> int:
    rows = await system.wallet_fetch("SELECT count(*) AS n FROM processed_events")
    return int(rows[0]["n"])


def total(samples: dict[str, float], prefix: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    found = 0.0
    for name, value in samples.items():
        if name.startswith(prefix) and all(f'{k}="{v}"' in name for k, v in labels.items()):
            found += value
    return found


async def terminate_backends(database: str, role: str) -> None:
    """What the server does to the sessions of a client that died (once it notices): end them,
    their transactions and locks."""
    conn = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND usename = $2",
            database,
            role,
        )
    finally:
        await conn.close()


async def terminate_client_ports(ports: list[int]) -> None:
    """End the sessions of these client ports (the proxy's to PostgreSQL) as a shutting-down
    server does: FATAL 57P01, admin_shutdown."""
    conn = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY($1::int[])",
            ports,
        )
    finally:
        await conn.close()


async def test_the_relay_stopped_between_publishing_and_marking_publishes_again_and_the_consumer_ignores_it(
    system: System,
) -> None:
    webhook, consumer = system.topup_webhook(), system.wallet_consumer()
    await system.start(webhook, consumer)
    wallet = await system.open_wallet()
    owner = await system.owner(system.topup_db)
    try:
        await owner.execute(HOLD_MARK_SQL)
        await card(webhook, wallet, 2_000)
        # Published and confirmed (the consumer has credited it), not marked sent (the mark waits).
        await system.credited(wallet, [2_000])
        assert await system.outbox_unsent() == 1
        await webhook.crash()
        # Its sessions (one of them waits in the mark), as the server ends them once it notices.
        await terminate_backends(system.topup_db, db.app_role("topup"))
        await owner.execute("DROP TRIGGER e2e_hold_mark ON topup.outbox")
    finally:
        await owner.close()

    webhook.start()
    await webhook.wait_ready()
    await harness.until(lambda: _unsent_is(system, 0), 20, "the message published again and marked")
    samples = await webhook.metrics()
    assert total(samples, "hiwallet_relay_published_total") >= 1
    # The consumer got it a second time and changed nothing.
    await harness.until(lambda: _consumer_saw_repeat(consumer), 20, "wallet-consumer acknowledged the repeat")
    await system.credited(wallet, [2_000])
    assert await processed(system) == 1


async def _unsent_is(system: System, n: int) -> bool:
    return await system.outbox_unsent() == n


async def _consumer_saw_repeat(consumer: harness.Process) -> bool:
    return total(await consumer.metrics(), "hiwallet_consumer_messages_total", outcome="duplicate") >= 1


async def test_wallet_consumer_killed_after_its_commit_before_its_ack(system: System) -> None:
    amqp = await system.proxy(harness.AMQP_PORT)
    webhook, consumer = system.topup_webhook(), system.wallet_consumer(amqp_port=amqp.port)
    await system.start(webhook, consumer)
    wallet = await system.open_wallet()
    await card(webhook, wallet, 100)
    await system.credited(wallet, [100])

    with amqp.stall_upstream():
        # What the broker sends reaches the consumer; nothing it sends back (its ack) arrives.
        await card(webhook, wallet, 200)
        await harness.until(lambda: _processed_is(system, 2), 20, "the second top-up committed")
        await consumer.crash()
        # Its connections cut while still held: the ack it sent never reaches the broker.
        amqp.cut()

    restarted = system.wallet_consumer()  # straight to the broker this time
    await system.start(restarted)
    # RabbitMQ delivers the unacknowledged message again; it changes nothing.
    await harness.until(
        lambda: _consumer_saw_repeat(restarted), 20, "the redelivered message acknowledged as a repeat"
    )
    await system.credited(wallet, [100, 200])
    assert await processed(system) == 2
    assert sum((await harness.queue_depths(system.vhost)).values()) == 0


async def _processed_is(system: System, n: int) -> bool:
    return await processed(system) == n


async def test_rabbitmq_unreachable_for_a_while_the_inbox_holds_and_the_relay_catches_up(
    system: System,
) -> None:
    # Both services reach RabbitMQ through the proxy: the outage is everyone's.
    amqp = await system.proxy(harness.AMQP_PORT)
    stripe, bank = system.stripe_fake(), system.bank_fake()
    webhook = system.topup_webhook(amqp_port=amqp.port)
    consumer = system.wallet_consumer(amqp_port=amqp.port)
    await system.start(stripe.process, bank.process, webhook, consumer)
    wallet = await system.open_wallet()
    await stripe.pay(wallet, 10)
    await system.credited(wallet, [10])

    async with amqp.down():
        for amount in (11, 12, 13):
            await stripe.pay(wallet, amount)
        await bank.wire(f"to {wallet}", 14)
        # Every notification answered 202 and kept: four payments recorded, four messages due.
        await harness.until(lambda: _unsent_is(system, 4), 20, "four messages waiting in the outbox")
        await harness.until(lambda: _not_ready(webhook), 20, "topup-webhook not ready without its broker")
        # a while: the relay's reconnection attempts fail meanwhile
        refused = amqp.connections_refused
        await harness.until(lambda: amqp.connections_refused >= refused + 2, 20, "reconnections refused")
        assert await system.outbox_unsent() == 4
        assert len(await system.topup_lines(wallet)) == 1

    await webhook.wait_ready()
    await harness.until(lambda: _unsent_is(system, 0), 30, "the relay caught up")
    await consumer.wait_ready()
    await harness.until(lambda: _queues_empty(system), 30, "wallet-consumer took the messages")
    await system.credited(wallet, [10, 11, 12, 13, 14], timeout_s=30)
    assert await system.outbox_unsent() == 0
    failed = [
        d for d in [*(await stripe.deliveries()), *(await bank.deliveries())] if d.get("outcome") == "gave_up"
    ]
    assert failed == []


async def _queues_empty(system: System) -> bool:
    return sum((await harness.queue_depths(system.vhost)).values()) == 0


async def _nothing_dead(system: System) -> bool:
    return (await harness.queue_depths(system.vhost))[harness.DEAD_LETTER_QUEUE] == 0


async def _not_ready(process: harness.Process) -> bool:
    return not await process.ready()


async def test_postgresql_unreachable_under_the_consumer_dead_letters_no_good_message(system: System) -> None:
    database = await system.proxy(5432)
    webhook = system.topup_webhook()
    consumer = system.wallet_consumer(db_port=database.port)
    await system.start(webhook, consumer)
    wallets = [await system.open_wallet() for _ in range(3)]
    await card(webhook, wallets[0], 50)
    await system.credited(wallets[0], [50])

    # As a restart looks to the consumer: its sessions ended by the server (FATAL 57P01), then
    # the server refuses connections for a while.
    await terminate_client_ports(database.upstream_ports)
    async with database.down():
        for wallet in wallets:
            for amount in (51, 52):
                await card(webhook, wallet, amount)
        await harness.until(lambda: _unsent_is(system, 0), 20, "the relay published all six")
        # Nothing dead-lettered over longer than the consumer's attempts for a poison message
        # would take.
        await harness.stays(lambda: _nothing_dead(system), 3.0, "no dead letter", interval_s=0.1)

    for wallet, amounts in zip(wallets, ([50, 51, 52], [51, 52], [51, 52]), strict=True):
        await system.credited(wallet, amounts, timeout_s=30)
    depths = await harness.queue_depths(system.vhost)
    assert depths[harness.DEAD_LETTER_QUEUE] == 0, depths
    samples = await consumer.metrics()
    assert total(samples, "hiwallet_dead_letters_total") == 0
    # It met the outage (and stopped taking messages), rather than never noticing it.
    assert total(samples, "hiwallet_consumer_pauses_total") >= 1, samples


async def test_topup_webhook_killed_right_after_answering_202(system: System) -> None:
    webhook, consumer = system.topup_webhook(), system.wallet_consumer()
    await system.start(webhook, consumer)
    wallet = await system.open_wallet()

    payment_intent = f"pi_{uuid.uuid4().hex[:24]}"
    event = stripe_event("payment_intent.succeeded", payment_intent, wallet, 7_700)
    assert await harness.post_stripe_event(webhook.url, event) == 202
    webhook.kill()  # at once: whatever it was about to do next (relay, log, metrics) is lost
    await webhook.wait_exit()

    # The 202 was a promise: the notification is kept, its payment recorded.
    records = await system.topup_fetch(
        "SELECT * FROM topup.payments WHERE provider_payment_id = $1", payment_intent
    )
    assert len(records) == 1
    webhook.start()
    await webhook.wait_ready()
    await system.credited(wallet, [7_700])
    # The provider, not having seen our 202, sends it again: 202, nothing more.
    assert await harness.post_stripe_event(webhook.url, event) == 202
    await system.credited(wallet, [7_700])
    assert await system.outbox_unsent() == 0


async def test_two_relays_one_works_and_the_other_takes_over_when_it_dies(system: System) -> None:
    first, second = system.topup_webhook(), system.topup_webhook(port=free_port())
    await system.start(first, second, system.wallet_consumer())
    wallet = await system.open_wallet()

    amounts = list(range(301, 307))
    for i, amount in enumerate(amounts):
        await card(first if i % 2 else second, wallet, amount)
    await system.credited(wallet, amounts)

    published = {p.port: total(await p.metrics(), "hiwallet_relay_published_total") for p in (first, second)}
    # One relay did all the work; the other waited.
    assert sorted(published.values())[0] == 0 and sorted(published.values())[1] == len(amounts), published
    leader, standby = (first, second) if published[first.port] else (second, first)
    await leader.crash()

    later = list(range(401, 404))
    for amount in later:
        await card(standby, wallet, amount)
    await system.credited(wallet, amounts + later, timeout_s=30)
    assert total(await standby.metrics(), "hiwallet_relay_published_total") == len(later)


async def test_a_poison_message_is_dead_lettered_with_its_reason_and_replayed_after_the_fix(
    system: System,
) -> None:
    webhook = system.topup_webhook()
    consumer = system.wallet_consumer(max_attempts=2)
    await system.start(webhook, consumer)
    # A EUR wallet whose card provider has no EUR clearing account yet (only the bank's): a
    # top-up by card in EUR cannot be posted, whatever the attempt.
    euro_wallet = await system.open_wallet_without_card_clearing("EUR")
    try_wallet = await system.open_wallet()

    poison = await card(webhook, euro_wallet, 900, "eur")
    await card(webhook, try_wallet, 901)  # the partition is not blocked by it
    await system.credited(try_wallet, [901])

    async def dead() -> list[object]:
        return await harness.dead_letters(system.vhost) if await _has_dead(system) else []

    [letter] = await harness.until(dead, 30, "the poison message dead-lettered")
    headers = letter.headers  # type: ignore[attr-defined]
    assert headers.get("x-hiwallet-dead-reason"), headers
    assert headers.get("x-hiwallet-original-exchange") == harness.TOPUPS_EXCHANGE
    assert json.loads(letter.body)["provider_payment_id"] == poison  # type: ignore[attr-defined]
    assert await system.topup_lines(euro_wallet) == []

    status, out = await system.cli("dead-letters", "list")
    assert status == 0, out
    assert letter.message_id in out.replace("\n", "").replace(" ", ""), out  # type: ignore[attr-defined]

    # The cause fixed (the card provider's EUR clearing accounts opened), then replayed: once.
    await system.open_card_clearing("EUR")
    status, out = await system.cli("dead-letters", "replay")
    assert status == 0, out
    await system.credited(euro_wallet, [900])
    assert (await harness.queue_depths(system.vhost))[harness.DEAD_LETTER_QUEUE] == 0
    # Replayed again by mistake: nothing left to replay, still credited once.
    status, out = await system.cli("dead-letters", "replay")
    assert status == 0, out
    await system.credited(euro_wallet, [900])


async def _has_dead(system: System) -> bool:
    depths = await harness.queue_depths(system.vhost)
    return depths.get(harness.DEAD_LETTER_QUEUE, 0) > 0
