"""End to end, the paths a payment takes when nothing crashes: a card payment at stripe-fake and a
wire at bank-fake reach the wallet once, however the providers repeat, reorder or fail to send
their notifications; an unattributable payment waits for an operator. Real processes
(``hiwallet run …``), real PostgreSQL and RabbitMQ; every test ends with the wallet credited
exactly once and the ledger verified.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx

from hiwallet.core.ids import derived_id
from tests.e2e import harness
from tests.e2e.system import System
from tests.servers import free_port
from tests.stripe_events import stripe_event


async def _everything(
    system: System, **webhook_settings: object
) -> tuple[harness.StripeFake, harness.BankFake, harness.Process]:
    stripe, bank = system.stripe_fake(), system.bank_fake()
    webhook = system.topup_webhook(**webhook_settings)
    await system.start(stripe.process, bank.process, webhook, system.wallet_consumer())
    return stripe, bank, webhook


async def _inbox_types(system: System, provider: str, provider_payment_id: str) -> list[str]:
    """The notification types of one payment, in the order topup-webhook received them."""
    rows = await system.topup_fetch(
        "SELECT event_type FROM topup.inbox WHERE payment_id = $1 ORDER BY id",
        derived_id("topup", provider, provider_payment_id),
    )
    return [row["event_type"] for row in rows]


async def _payment(system: System, provider: str, provider_payment_id: str) -> dict[str, object]:
    rows = await system.topup_fetch(
        "SELECT * FROM topup.payments WHERE id = $1", derived_id("topup", provider, provider_payment_id)
    )
    assert len(rows) == 1, rows
    return dict(rows[0])


async def test_a_card_payment_and_a_wire_arrive_in_the_wallet_once(system: System) -> None:
    stripe, bank, _ = await _everything(system)
    wallet = await system.open_wallet()

    card = await stripe.pay(wallet, 1_500)
    wire = await bank.wire(f"HiWallet top-up {wallet} thanks", 2_500)

    await system.credited(wallet, [1_500, 2_500])
    # One record per payment; the card payment was reported by both of its notifications.
    card_record = await _payment(system, "stripe", card["id"])
    await harness.until(lambda: _reported_twice(system, card["id"]), 10, "both card notifications recorded")
    wire_record = await _payment(system, "bank", wire["id"])
    assert card_record["wallet"] == wallet and wire_record["wallet"] == wallet
    assert wire_record["routes"] == ["webhook"]
    # The ledger's key is the payment record's id; its ref the provider's id of the payment.
    refs = {line["ref"] for line in await system.topup_lines(wallet)}
    assert refs == {card["id"], wire["id"]}


async def _reported_twice(system: System, payment_intent: str) -> bool:
    record = await _payment(system, "stripe", payment_intent)
    return len(record["reported_by"]) == 2  # type: ignore[arg-type]


async def test_one_notification_five_times_one_after_another_and_five_at_once(system: System) -> None:
    stripe, bank, _ = await _everything(system)
    wallet = await system.open_wallet()

    # Five copies at once, each with its own signature (the fake's duplicate fault).
    await stripe.faults(duplicate=5, once=True)
    card = await stripe.pay(wallet, 700)
    await bank.faults(duplicate=5, once=True)
    wire = await bank.wire(f"ref {wallet}", 900)
    await system.credited(wallet, [700, 900])

    # The same notification four times more, one after another (a provider's redelivery).
    delivered = await stripe.deliveries()
    event_id = next(d["event_id"] for d in delivered if d.get("status") == 202)
    for _ in range(4):
        await stripe.redeliver(event_id)
    wire_event = next(d["event_id"] for d in await bank.deliveries() if d.get("status") == 202)
    for _ in range(4):
        await bank.redeliver(wire_event)

    async def all_answered() -> bool:
        answered = [d for d in await stripe.deliveries() if d["event_id"] == event_id and d.get("status")]
        wired = [d for d in await bank.deliveries() if d["event_id"] == wire_event and d.get("status")]
        return len(answered) >= 9 and len(wired) >= 9  # 5 at once + 4, the first copy included

    await harness.until(all_answered, 20, "every copy answered")
    for attempt in [*(await stripe.deliveries()), *(await bank.deliveries())]:
        assert attempt.get("status") in (202, None), attempt  # a repeat is 202 as well
    await system.credited(wallet, [700, 900])
    assert len(await system.payments()) == 2
    assert (await _payment(system, "stripe", card["id"]))["routes"] == ["webhook"]
    assert (await _payment(system, "bank", wire["id"]))["reported_by"] == [wire_event]


async def test_both_notification_types_of_one_payment_in_either_order(system: System) -> None:
    stripe, _, _ = await _everything(system)
    wallet = await system.open_wallet()

    in_order = await stripe.pay(wallet, 1_100)
    await system.credited(wallet, [1_100])
    # payment_intent.succeeded first, then checkout.session.completed.
    await stripe.faults(reorder=True, once=True)
    reversed_ = await stripe.pay(wallet, 1_200)
    await system.credited(wallet, [1_100, 1_200])

    for payment in (in_order, reversed_):
        await harness.until(lambda p=payment: _reported_twice(system, p["id"]), 15, "both types recorded")
    # Each order did happen: the checkout first for the one, the payment intent for the other.
    assert await _inbox_types(system, "stripe", in_order["id"]) == [
        "checkout.session.completed",
        "payment_intent.succeeded",
    ]
    assert await _inbox_types(system, "stripe", reversed_["id"]) == [
        "payment_intent.succeeded",
        "checkout.session.completed",
    ]
    await system.credited(wallet, [1_100, 1_200])


async def test_a_payment_no_webhook_reported_is_found_by_reconciliation_and_credited_once(
    system: System,
) -> None:
    stripe, bank, webhook = await _everything(system, reconcile_interval_s=1, reconcile_window_s=3600)
    wallet = await system.open_wallet()

    await stripe.faults(drop=True, once=True)
    card = await stripe.pay(wallet, 3_000)
    await bank.faults(drop=True, once=True)
    wire = await bank.wire(f"for {wallet}", 4_000)

    await system.credited(wallet, [3_000, 4_000], timeout_s=30)
    assert (await _payment(system, "stripe", card["id"]))["routes"] == ["reconciliation"]
    assert (await _payment(system, "bank", wire["id"]))["routes"] == ["reconciliation"]
    found = await webhook.metrics()
    assert sum(v for k, v in found.items() if k.startswith("hiwallet_topup_reconciliation_found_total")) >= 2

    # The webhooks that were dropped arrive late after all (the same events the listing gave):
    # answered 202, the same record, nothing more.
    dropped = {d["event_id"] for d in await stripe.deliveries() if d.get("outcome") == "dropped"}
    assert len(dropped) == 2, dropped  # both notifications of the card payment
    for event_id in dropped:
        await stripe.redeliver(event_id)

    async def answered() -> bool:
        return {d["event_id"] for d in await stripe.deliveries() if d.get("status") == 202} >= dropped

    await harness.until(answered, 15, "the late webhooks answered 202")
    await system.credited(wallet, [3_000, 4_000])
    assert set((await _payment(system, "stripe", card["id"]))["routes"]) <= {"reconciliation", "webhook"}  # type: ignore[arg-type]


async def test_an_unattributable_payment_is_listed_then_credited_once_by_an_operator(system: System) -> None:
    stripe, _, _ = await _everything(system)
    wallet = await system.open_wallet()

    card = await stripe.pay(None, 5_500)
    payment_id = derived_id("topup", "stripe", card["id"])

    async def kept() -> bool:
        rows = await system.wallet_fetch(
            "SELECT reason FROM wallet.unattributed_topups WHERE payment_id = $1", payment_id
        )
        return bool(rows)

    await harness.until(kept, 20, "the payment kept as unattributed")
    status, out = await system.cli("topups", "unattributed")
    assert status == 0, out
    assert payment_id in out.replace("\n", "").replace(" ", "") or card["id"] in out, out
    assert await system.topup_lines(wallet) == []

    status, out = await system.cli("topups", "attribute", payment_id, "--wallet", wallet)
    assert status == 0, out
    await system.credited(wallet, [5_500])
    # A second attribution (to this wallet or another) credits nothing.
    other = await system.open_wallet()
    status, out = await system.cli("topups", "attribute", payment_id, "--wallet", other)
    assert status != 0, out
    await system.credited(wallet, [5_500])
    assert await system.topup_lines(other) == []


async def test_one_wallets_messages_are_handled_in_order_across_partitions(system: System) -> None:
    """Eight wallets (spread over the four partitions by the consistent hash), six top-ups each,
    interleaved; two wallet-consumer processes (single active consumer per queue), one killed
    halfway. Each wallet's ledger lines follow the order its payments were recorded."""
    webhook = system.topup_webhook()
    first = system.wallet_consumer()
    second = system.wallet_consumer(port=free_port())
    await system.start(webhook, first, second)
    wallets = [await system.open_wallet() for _ in range(8)]

    async def send(round_: int) -> None:
        for i, wallet in enumerate(wallets):
            event = stripe_event(
                "payment_intent.succeeded", f"pi_{uuid.uuid4().hex[:20]}", wallet, 100 * (round_ + 1) + i
            )
            assert await harness.post_stripe_event(webhook.url, event) == 202

    for round_ in range(3):
        await send(round_)
    await first.crash()  # whichever held some queues: the other takes them over
    for round_ in range(3, 6):
        await send(round_)

    for i, wallet in enumerate(wallets):
        await system.credited(wallet, [100 * (r + 1) + i for r in range(6)], timeout_s=30)
        recorded = [
            row["ref"]
            for row in await system.topup_fetch(
                "SELECT body->>'provider_payment_id' AS ref FROM topup.outbox"
                " WHERE routing_key = $1 ORDER BY id",
                wallet,
            )
        ]
        posted = [line["ref"] for line in await system.topup_lines(wallet)]
        assert posted == recorded, (wallet, posted, recorded)
    # The survivor handled the last rounds on every partition it holds now: more than one (the
    # wallets' messages did cross partitions).
    samples = await second.metrics()
    partitions = {
        name.split('queue="')[1].split('"')[0]
        for name, value in samples.items()
        if name.startswith("hiwallet_consumer_messages_total") and value > 0
    }
    assert len(partitions) >= 2, samples


async def test_refused_notifications_store_nothing_and_a_rotated_secret_overlaps_then_retires(
    system: System,
) -> None:
    """On the real process: a forged signature, a stale timestamp and a body changed after signing
    are refused (400 problem+json) and store nothing; during a rotation the old and the new
    secret are both accepted; once the old one is retired (topup-webhook restarted without it)
    it is refused. The wallet holds exactly what was accepted."""
    old, new = harness.STRIPE_SECRET, harness.ROTATED_STRIPE_SECRET
    webhook = system.topup_webhook(stripe_secrets=[old, new])
    await system.start(webhook, system.wallet_consumer())
    wallet = await system.open_wallet()

    async def post(
        event: dict[str, object], secret: str, *, at: int | None = None, tamper: bool = False
    ) -> int:
        body = json.dumps(event).encode()
        headers = {
            "Content-Type": "application/json",
            "Stripe-Signature": harness.stripe_signature(body, secret, at),
        }
        if tamper:
            body = body.replace(b'"amount": 1', b'"amount": 9')
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(f"{webhook.url}/v1/webhooks/topup/stripe", content=body, headers=headers)
        if answer.status_code >= 400:
            assert answer.headers["content-type"].startswith("application/problem+json"), answer.headers
        return answer.status_code

    def event(amount: int) -> dict[str, object]:
        return stripe_event("payment_intent.succeeded", f"pi_{uuid.uuid4().hex[:24]}", wallet, amount)

    assert await post(event(100), "whsec_forged_0123456789abcdef0123456789") == 400
    assert await post(event(101), old, at=int(time.time()) - 3_600) == 400  # outside the tolerance
    assert await post(event(102), old, tamper=True) == 400
    assert await _inbox_rows(system) == 0  # nothing stored for the refused

    assert await post(event(110), old) == 202  # the overlap: both accepted
    assert await post(event(120), new) == 202
    await system.credited(wallet, [110, 120])

    await webhook.stop()
    retired = system.topup_webhook(stripe_secrets=[new])
    await system.start(retired)
    assert await post(event(130), old) == 400  # the old secret, retired
    assert await post(event(140), new) == 202
    await system.credited(wallet, [110, 120, 140])
    assert await _inbox_rows(system) == 3


async def _inbox_rows(system: System) -> int:
    return int((await system.topup_fetch("SELECT count(*) AS n FROM topup.inbox"))[0]["n"])
