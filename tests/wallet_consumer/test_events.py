"""``TopupCredited`` (contracts/events.py): a bank top-up (a wire) credited for the first time puts
one event into wallet.outbox in the credit's transaction, on the single path, the batched path
and an operator's attribution alike; a card top-up, a replay, an unattributed wire put nothing;
through the app the relay delivers it to onboarding's queue. Ids and the amount only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from hiwallet.contracts.events import ONBOARDING_WIRES_QUEUE, TOPUP_CREDITED, TopupCredited, topup_credited_id
from hiwallet.core.broker import Broker
from hiwallet.ledger import Ledger
from hiwallet.wallet_consumer import TopupHandler, attribute
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.core.spine import collect
from tests.wallet_consumer.conftest import TL, consume, message, outgoing, running, topup_body, verified
from tests.wallet_consumer.test_batch import consume_batch

FIELDS = {
    "event_id",
    "payment_id",
    "provider",
    "provider_payment_id",
    "wallet",
    "amount_minor",
    "currency",
    "credited_at",
}


async def events(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(
        await pool.fetch(
            "SELECT message_id, exchange, routing_key, message_type, body FROM wallet.outbox"
            " WHERE message_type = 'TopupCredited' ORDER BY id"
        )
    )


def wire(wallet: str | None, amount: int, wire_id: str, **kwargs: Any) -> dict[str, Any]:
    return topup_body(wallet, amount, provider="bank", provider_payment_id=wire_id, **kwargs)


async def test_a_credited_wire_is_announced_once_with_ids_only(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla", bucket=421)).wallet_id
    body = wire(wallet, 300 * TL, "wire_a1")
    done = await consume(pool, handler, message(body))
    assert done is not None and done["result"] == "credited"

    [row] = await events(pool)
    assert (row["exchange"], row["routing_key"]) == ("hiwallet.events", TOPUP_CREDITED)
    assert row["message_id"] == topup_credited_id(body["payment_id"])
    assert set(row["body"]) == FIELDS  # nothing else: no sender, no reference
    event = TopupCredited.model_validate(row["body"])
    assert (event.event_id, event.payment_id, event.provider, event.provider_payment_id) == (
        row["message_id"],
        body["payment_id"],
        "bank",
        "wire_a1",
    )
    assert (event.wallet, event.amount_minor, event.currency) == (wallet, 300 * TL, "TRY")
    tx = await ledger.transaction(done["transaction_id"])
    assert event.credited_at == tx.posted_at

    # the same payment again, under another message id (reconciliation found it): a replay,
    # no second event; the same message again: nothing at all
    again = await consume(pool, handler, message(body))
    assert again is not None and again["result"] == "replayed"
    assert len(await events(pool)) == 1
    await verified(ledger)


async def test_card_topups_and_wires_not_credited_announce_nothing(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla", bucket=422)).wallet_id
    card = await consume(pool, handler, message(topup_body(wallet, 50 * TL)))
    assert card is not None and card["result"] == "credited"
    lost = await consume(pool, handler, message(wire(None, 20 * TL, "wire_b1", reference="havale")))
    assert lost is not None and lost["result"] == "unattributed"
    assert await events(pool) == []
    assert await pool.fetchval("SELECT count(*) FROM wallet.outbox") == 0


async def test_the_batched_path_announces_the_wires_of_a_batch_in_order(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    ayla = (await ledger.open_wallet("ayla", bucket=431)).wallet_id
    bob = (await ledger.open_wallet("bob", bucket=432)).wallet_id
    bodies = [
        topup_body(ayla, 10 * TL),
        wire(bob, 11 * TL, "wire_c1"),
        wire(ayla, 12 * TL, "wire_c2"),
        topup_body(bob, 13 * TL),
        wire(None, 14 * TL, "wire_c3"),  # unattributed: the single path inside the batch
    ]
    answers = await consume_batch(pool, handler, [message(b) for b in bodies])
    assert [a["result"] for a in answers if a is not None] == [
        "credited",
        "credited",
        "credited",
        "credited",
        "unattributed",
    ]
    rows = await events(pool)
    assert [(r["body"]["wallet"], r["body"]["provider_payment_id"]) for r in rows] == [
        (bob, "wire_c1"),
        (ayla, "wire_c2"),
    ]
    assert [r["message_id"] for r in rows] == [topup_credited_id(bodies[i]["payment_id"]) for i in (1, 2)]

    # the batch again under other message ids: every top-up a replay, no event more
    again = await consume_batch(pool, handler, [message(b) for b in bodies[:4]])
    assert {a["result"] for a in again if a is not None} == {"replayed"}
    assert len(await events(pool)) == 2
    await verified(ledger)


async def test_an_operators_attribution_of_a_wire_announces_it(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger, handler: TopupHandler
) -> None:
    target = (await ledger.open_wallet("ayla", bucket=441)).wallet_id
    lost_wire = wire(None, 40 * TL, "wire_d1", reference="havale")
    lost_card = topup_body(None, 41 * TL, reference="no wallet")
    for body in (lost_wire, lost_card):
        done = await consume(pool, handler, message(body))
        assert done is not None and done["result"] == "unattributed"
    assert await events(pool) == []

    await attribute(consumer_ledger, lost_card["payment_id"], target, operator="ayla")
    assert await events(pool) == []
    attributed = await attribute(consumer_ledger, lost_wire["payment_id"], target, operator="ayla")
    [row] = await events(pool)
    event = TopupCredited.model_validate(row["body"])
    assert (event.payment_id, event.wallet, event.amount_minor, event.provider_payment_id) == (
        lost_wire["payment_id"],
        target,
        40 * TL,
        "wire_d1",
    )
    assert event.credited_at == (await ledger.transaction(attributed.transaction_id)).posted_at
    assert isinstance(event.credited_at, datetime)
    await verified(ledger)


async def test_the_app_delivers_a_credited_wire_to_onboardings_queue(
    wallet_db: str, ledger: Ledger, broker: Broker, settings: WalletConsumerSettings
) -> None:
    wallet = (await ledger.open_wallet("ayla", bucket=451)).wallet_id
    body = wire(wallet, 75 * TL, "wire_e1")
    async with running(settings, wallet_db) as client:
        assert (await client.get("/ready")).status_code == 200
        await broker.publish([outgoing(settings, topup_body(wallet, 5 * TL)), outgoing(settings, body)])
        [delivered] = await collect(broker, [settings.events_queue_prefix + ONBOARDING_WIRES_QUEUE], 1, 20)
    assert (delivered.type, delivered.routing_key, delivered.exchange) == (
        "TopupCredited",
        TOPUP_CREDITED,
        settings.events_exchange,
    )
    assert delivered.message_id == topup_credited_id(body["payment_id"])
    event = TopupCredited.model_validate_json(delivered.body)
    assert (event.wallet, event.provider_payment_id, event.amount_minor) == (wallet, "wire_e1", 75 * TL)
