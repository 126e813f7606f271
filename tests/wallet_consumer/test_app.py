"""wallet-consumer as it runs: core's Consumer on real RabbitMQ queues (unique names per test,
deleted afterwards), the handler on a fresh wallet database. One wallet's messages are credited
in the order they were published, across partitions; repeats change nothing; poison is
dead-lettered with its reason; a redelivery after the consumer died before its ack changes
nothing."""

from __future__ import annotations

import re
from collections.abc import Awaitable

import aio_pika.abc
import asyncpg
import pytest

from hiwallet.contracts.events import events_topology
from hiwallet.contracts.topups import topups_topology
from hiwallet.contracts.withdrawals import withdrawals_topology
from hiwallet.core.broker import Broker
from hiwallet.core.consumer import DEAD_REASON_HEADER, Consumer
from hiwallet.core.deadletters import list_dead_letters, replay_dead_letters
from hiwallet.core.settings import Settings
from hiwallet.ledger import MAX_BATCH, Ledger, LedgerStore, cash_account
from hiwallet.wallet_consumer.app import topology_of
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.core.spine import collect
from tests.faultproxy import FaultProxy
from tests.wallet_consumer.conftest import (
    TL,
    cash,
    outgoing,
    running,
    topup_body,
    until,
    verified,
)


async def processed(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM processed_events"))


def test_the_default_topology_is_the_contracts() -> None:
    contracts = topups_topology() + withdrawals_topology() + events_topology()
    assert topology_of(WalletConsumerSettings()) == contracts


def test_a_batch_larger_than_the_ledger_takes_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch is one call of the ledger's batched posting (at most MAX_BATCH postings): a larger
    # setting would fail every full batch, so it is refused at start.
    assert WalletConsumerSettings(max_batch=MAX_BATCH).max_batch == MAX_BATCH
    for name in ("MAX_BATCH", "WITHDRAWALS_BATCH"):
        monkeypatch.setenv(f"HIWALLET_WALLET_CONSUMER_{name}", str(MAX_BATCH + 1))
        with pytest.raises(ValueError, match=name.lower()):
            WalletConsumerSettings()
        monkeypatch.delenv(f"HIWALLET_WALLET_CONSUMER_{name}")
    with pytest.raises(ValueError, match="prefetch"):
        WalletConsumerSettings(prefetch=0)


async def test_the_app_credits_each_wallets_topups_once_and_in_order(
    wallet_db: str, pool: asyncpg.Pool, ledger: Ledger, broker: Broker, settings: WalletConsumerSettings
) -> None:
    wallets = [(await ledger.open_wallet(f"w{i}", bucket=100 + 37 * i)).wallet_id for i in range(4)]
    per_wallet = 12
    bodies = {
        w: [
            topup_body(w, (i + 1) * TL, provider_payment_id=f"pi_{w[-6:]}_{i:03d}") for i in range(per_wallet)
        ]
        for w in wallets
    }
    async with running(settings, wallet_db) as client:
        ready = await client.get("/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"] == {
            "database": "ok",
            "broker": "ok",
            "consumers": "ok",
            "background": "ok",
        }

        messages = [outgoing(settings, bodies[w][i]) for i in range(per_wallet) for w in wallets]
        await broker.publish(messages)
        # repeats: the same message again (the relay published it twice), the same payment
        # under another message id (another route), a poison message, a body that is no JSON
        unattributed = topup_body(None, 7 * TL, reference="no wallet here")
        await broker.publish(
            [
                messages[0],
                outgoing(settings, bodies[wallets[1]][3]),
                outgoing(settings, unattributed),
                outgoing(settings, {**bodies[wallets[2]][0], "amount_minor": "a lot"}),
                outgoing(settings, b"{not json"),
            ]
        )
        expected = len(messages) + 2  # the new message id of a known payment, the unattributed
        await until(lambda: _equals(processed(pool), expected))
        dead = await collect(broker, [settings.dead_letter_queue], 2, timeout_s=20)
        reasons = sorted(str(m.headers[DEAD_REASON_HEADER]) for m in dead)
        assert reasons[0].startswith("malformed TopupRecorded (amount_minor: int_type)"), reasons
        assert reasons[1] == "malformed: the body is not JSON", reasons

        for w in wallets:
            assert await cash(ledger, w) == sum(b["amount_minor"] for b in bodies[w])
            lines = (await ledger.statement(cash_account(w), limit=100)).lines
            # credited in the order published: the ledger's versions follow the refs
            assert [line.ref for line in lines] == [b["provider_payment_id"] for b in bodies[w]]
        assert (
            await pool.fetchval(
                "SELECT count(*) FROM wallet.unattributed_topups WHERE payment_id = $1",
                unattributed["payment_id"],
            )
            == 1
        )

        async def gauge_seen() -> bool:
            return "hiwallet_topups_unattributed 1.0" in (await client.get("/metrics")).text

        await until(gauge_seen, 5)
        metrics = (await client.get("/metrics")).text
        assert 'outcome="duplicate"' in metrics and "hiwallet_consumer_messages_total" in metrics
        assert 'hiwallet_dead_letters_total{reason="unprocessable"} 1.0' in metrics
        assert 'hiwallet_dead_letters_total{reason="malformed"} 1.0' in metrics
        assert 'hiwallet_topups_handled_total{result="replayed"} 1.0' in metrics
        assert "0421:" not in metrics and wallets[0] not in metrics  # no id in a label
    await verified(ledger)


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def test_a_redelivery_after_the_consumer_died_before_its_ack_changes_nothing(
    wallet_db: str,
    pool: asyncpg.Pool,
    ledger: Ledger,
    broker: Broker,
    settings: WalletConsumerSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first consumer commits the credit and dies before its ack (its ack never happens, its
    connection closes): the broker delivers the message again to the next one, which finds it
    processed, acks it, and credits nothing."""
    wallet = (await ledger.open_wallet("ayla", bucket=421)).wallet_id
    body = topup_body(wallet, 40 * TL)
    dying = {"on": True}
    real_ack = Consumer._ack

    async def ack_unless_dying(
        self: Consumer, queue: str, message: aio_pika.abc.AbstractIncomingMessage, outcome: str
    ) -> None:
        if dying["on"]:
            return  # committed, never acked
        await real_ack(self, queue, message, outcome)

    real_ack_batch = Consumer._ack_batch

    async def ack_batch_unless_dying(
        self: Consumer,
        queue: str,
        messages: list[aio_pika.abc.AbstractIncomingMessage],
        outcomes: list[str],
    ) -> None:
        if dying["on"]:
            return  # the batch mode's ack (core.consumer): committed, never acked
        await real_ack_batch(self, queue, messages, outcomes)

    monkeypatch.setattr(Consumer, "_ack", ack_unless_dying)
    monkeypatch.setattr(Consumer, "_ack_batch", ack_batch_unless_dying)
    async with running(settings, wallet_db):
        await broker.publish([outgoing(settings, body)])
        await until(lambda: _equals(processed(pool), 1))
        assert await cash(ledger, wallet) == 40 * TL
    dying["on"] = False  # the process is gone; the message was never acked

    async with running(settings, wallet_db) as client:

        async def repeat_acked() -> bool:
            text = (await client.get("/metrics")).text
            return (
                re.search(r'hiwallet_consumer_messages_total\{outcome="duplicate",[^}]*\} 1\.0', text)
                is not None
            )

        await until(repeat_acked)
        metrics = (await client.get("/metrics")).text
        assert re.search(r"hiwallet_consumer_redeliveries_total\{[^}]*\} 1\.0", metrics), metrics
    assert await cash(ledger, wallet) == 40 * TL
    assert await processed(pool) == 1
    outcome = await pool.fetchval("SELECT outcome FROM processed_events")
    assert outcome["result"] == "credited"
    await verified(ledger)


async def test_a_topup_without_its_clearing_account_is_dead_lettered_then_replayed_once_fixed(
    wallet_db: str,
    pool: asyncpg.Pool,
    api_pool: asyncpg.Pool,
    ledger: Ledger,
    broker: Broker,
    settings: WalletConsumerSettings,
) -> None:
    """The poison message of the issue: a provider the ledger has no clearing account for. It is
    dead-lettered with its reason (not lost, not retried forever); once the accounts exist,
    `hiwallet dead-letters replay` puts it back and it is credited, once."""
    wallet = (await ledger.open_wallet("ayla", bucket=8)).wallet_id
    body = topup_body(wallet, 33 * TL, provider="papara")
    async with running(settings, wallet_db) as client:
        await broker.publish([outgoing(settings, body)])

        async def dead_lettered() -> bool:
            return len(await list_dead_letters(broker, settings.dead_letter_queue)) == 1

        await until(dead_lettered)
        (letter,) = await list_dead_letters(broker, settings.dead_letter_queue)
        assert "no ledger account 0008:sys:clearing:papara:TRY" in letter.reason
        assert await cash(ledger, wallet) == 0 and await processed(pool) == 0

        await LedgerStore(api_pool, providers=["stripe", "bank", "papara"]).ensure_system_accounts("TRY", [8])
        replayed = await replay_dead_letters(broker, settings.dead_letter_queue)
        assert [r.replayed for r in replayed] == [True]
        await until(lambda: _equals(processed(pool), 1))
        assert await cash(ledger, wallet) == 33 * TL
        # replayed again by mistake (the same message id): nothing more
        await broker.publish([outgoing(settings, body, message_id=letter.message_id)])

        async def repeat_acked() -> bool:
            text = (await client.get("/metrics")).text
            return (
                re.search(r'hiwallet_consumer_messages_total\{outcome="duplicate",[^}]*\} 1\.0', text)
                is not None
            )

        await until(repeat_acked, what="the repeat counted as a duplicate")
        assert await cash(ledger, wallet) == 33 * TL and await processed(pool) == 1
    await verified(ledger)


async def test_a_database_restart_pauses_the_consumer_and_dead_letters_nothing(
    wallet_db: str, pool: asyncpg.Pool, ledger: Ledger, broker: Broker, settings: WalletConsumerSettings
) -> None:
    """PostgreSQL "restarts" under the consumer (every connection cut, new ones refused): the
    top-ups wait, none is dead-lettered, and each is credited once when it is back."""
    proxy = FaultProxy()
    await proxy.start()
    wallets = [(await ledger.open_wallet(f"w{i}")).wallet_id for i in range(3)]
    bodies = [topup_body(w, (i + 1) * TL) for i, w in enumerate(wallets)]
    through_proxy = Settings(database_url=f"postgresql://127.0.0.1:{proxy.port}")
    try:
        async with running(settings, wallet_db, core_settings=through_proxy) as client:
            await broker.publish([outgoing(settings, bodies[0])])
            await until(lambda: _equals(processed(pool), 1))
            async with proxy.down():
                await broker.publish([outgoing(settings, b) for b in bodies[1:]])

                async def unready() -> bool:  # the consumer paused
                    return (await client.get("/ready")).status_code == 503

                await until(unready, 10, "unready (paused)")
                assert await processed(pool) == 1
            await until(lambda: _equals(processed(pool), 3))
            assert (await client.get("/ready")).status_code == 200
            metrics = (await client.get("/metrics")).text
            assert re.search(r"hiwallet_consumer_pauses_total [1-9]", metrics), metrics
        assert await list_dead_letters(broker, settings.dead_letter_queue) == []
        for i, w in enumerate(wallets):
            assert await cash(ledger, w) == (i + 1) * TL
    finally:
        await proxy.close()
    await verified(ledger)
