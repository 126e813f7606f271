"""Delivering the merchants' webhooks (docs/webhooks.md): signed so that the standardwebhooks
library verifies them unchanged, both signatures during a rotation, the retry schedule with a
controllable clock, an endpoint disabled after three days and its business told, order per
resource, a receiver down and back, replay through wallet-api, SSRF at delivery time."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from hiwallet.contracts import merchant_events as me
from hiwallet.contracts.databases import service_role
from hiwallet.core import db
from hiwallet.merchant_webhooks.dispatcher import Dispatcher, next_delay_s
from hiwallet.merchant_webhooks.settings import DEFAULT_SCHEDULE_S
from tests.merchant_webhooks.conftest import (
    Received,
    Receiver,
    attempts,
    deliveries,
    register,
    start_receiver,
)
from tests.servers import stop
from tests.waiting import Clock, until
from tests.wallet_api.conftest import TL, WalletApi


def signed_by(secret: str, got: Received) -> bool:
    """The signature checked as standardwebhooks does, without its ±5 minutes of the wall
    clock (the test's clock is days ahead)."""
    when = datetime.fromtimestamp(int(got.headers["webhook-timestamp"]), UTC)
    expected = Webhook(secret).sign(got.id, when, got.body.decode())
    return expected in got.headers["webhook-signature"].split(" ")


async def settle(dispatcher: Dispatcher, rounds: int = 10) -> None:
    """Rounds until one finds nothing more to do now (bounded)."""
    for _ in range(rounds):
        if not await dispatcher.round():
            return


async def test_a_payment_is_delivered_signed_and_the_library_verifies_it(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    endpoint = await register(api, shop, receiver.url)
    payment = (await api.transfer(payer, shop.number, 25 * TL, reference="order 7")).json()
    await settle(dispatcher)

    [got] = receiver.requests
    payload = Webhook(endpoint["secret"]).verify(got.body, got.headers)  # raises if not
    assert got.id == me.event_id("payment.received", payment["id"])
    assert payload["type"] == "payment.received"
    datetime.fromisoformat(payload["timestamp"])
    assert payload["data"] == {
        "account_id": shop.account_id,
        "wallet_id": shop.wallet_id,
        "transfer_id": payment["id"],
        "transfer_type": "payment",
        "amount_minor": 25 * TL,
        "currency": "TRY",
        "reference": "order 7",
    }
    # another secret does not verify it
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(got.body, got.headers)

    # listed through wallet-api, with its attempt
    listed = (await api.http.get("/v1/webhook-deliveries", headers=shop.auth)).json()
    [delivery] = listed["deliveries"]
    assert delivery["status"] == "delivered" and delivery["event_id"] == got.id
    assert listed["next_cursor"] is None
    detail = (await api.http.get(f"/v1/webhook-deliveries/{delivery['id']}", headers=shop.auth)).json()
    assert [a["status_code"] for a in detail["attempt_log"]] == [200]
    assert detail["event"]["data"]["transfer_id"] == payment["id"]
    # nothing more is sent
    await settle(dispatcher)
    assert len(receiver.requests) == 1


async def test_only_subscribed_enabled_endpoints_of_the_business_get_an_event(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    other = await api.business("Başka", client="merchant-two")
    await register(api, shop, receiver.url + "?all", ["payment.received", "payment.refunded"])
    await register(api, shop, receiver.url + "?promo", ["promo.granted"])
    off = await register(api, shop, receiver.url + "?off", ["payment.received"])
    await api.http.patch(f"/v1/webhook-endpoints/{off['id']}", json={"enabled": False}, headers=shop.auth)
    await register(api, other, receiver.url + "?other", ["payment.received"])
    await api.transfer(payer, shop.number, 5 * TL)
    await settle(dispatcher)
    assert len(receiver.requests) == 1
    assert len(await deliveries(api)) == 1


async def test_during_a_rotation_both_secrets_sign_and_after_it_only_the_new(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver, clock: Clock
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    endpoint = await register(api, shop, receiver.url)
    old = endpoint["secret"]
    rotated = (
        await api.http.post(f"/v1/webhook-endpoints/{endpoint['id']}/rotate-secret", headers=shop.auth)
    ).json()
    new = rotated["secret"]
    assert new != old

    await api.transfer(payer, shop.number, 1 * TL)
    await settle(dispatcher)
    [during] = receiver.requests
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(during.body, during.headers)
    Webhook(new).verify(during.body, during.headers)

    # the overlap over: the clock past it
    async with api.owner_connection() as conn:
        until = await conn.fetchval(
            "SELECT extract(epoch FROM previous_secret_until)::float8"
            " FROM wallet.webhook_endpoints WHERE id = $1",
            endpoint["id"],
        )
    assert until > clock() + 23 * 3600  # the overlap is 24 h by default
    clock.now = until + 1
    await api.transfer(payer, shop.number, 1 * TL)
    await settle(dispatcher)
    after = receiver.requests[1]
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    assert signed_by(new, after) and not signed_by(old, after)  # (a day ahead: no wall-clock check)


def test_the_delay_grows_with_jitter_within_its_bounds() -> None:
    rng = random.Random(7)
    seen = []
    for attempt in range(1, len(DEFAULT_SCHEDULE_S) + 1):
        base = DEFAULT_SCHEDULE_S[attempt - 1]
        delays = [next_delay_s(attempt, DEFAULT_SCHEDULE_S, 0.2, rng) for _ in range(200)]
        assert all(d is not None and base <= d <= base * 1.2 for d in delays)
        assert len(set(delays)) > 100  # jittered, not one value
        seen.append(base)
    assert seen == sorted(seen)
    assert next_delay_s(len(DEFAULT_SCHEDULE_S) + 1, DEFAULT_SCHEDULE_S, 0.2, rng) is None
    assert sum(DEFAULT_SCHEDULE_S) >= 3 * 24 * 3600  # tried for three days


async def test_a_failing_endpoint_is_retried_on_schedule_for_three_days_then_disabled_and_the_business_told(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver, clock: Clock
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    failing = await register(api, shop, receiver.url + "?failing")
    healthy = await register(api, shop, receiver.url + "?healthy", ["promo.granted"])
    receiver.fail_first = 10_000  # every request fails
    await api.transfer(payer, shop.number, 1 * TL)
    schedule = dispatcher.settings.retry_schedule_s
    jitter = dispatcher.settings.retry_jitter

    await settle(dispatcher)
    [delivery] = await deliveries(api)
    for n, delay in enumerate(schedule, start=1):
        [delivery] = await deliveries(api)
        assert delivery["attempts"] == n and delivery["status"] == "pending"
        [*_, last] = await attempts(api, delivery["id"])
        waited = (delivery["next_attempt_at"] - last["attempted_at"]).total_seconds()
        assert delay <= waited <= delay * (1 + jitter) + 0.001, (n, waited)
        # not sent again before its time
        clock.advance(delay * 0.99)
        await settle(dispatcher)
        assert len(await attempts(api, delivery["id"])) == n
        clock.advance(waited - delay * 0.99 + 0.001)
        await settle(dispatcher)
    [delivery] = [d for d in await deliveries(api) if d["endpoint_id"] == failing["id"]]
    log = await attempts(api, delivery["id"])
    assert len(log) == len(schedule) + 1  # every attempt recorded
    assert all(a["status_code"] == 500 and a["error"] == "status 500" for a in log)
    assert delivery["status"] == "failed"
    # three days of failures: disabled, visible on the endpoint with the reason
    seen = (await api.http.get(f"/v1/webhook-endpoints/{failing['id']}", headers=shop.auth)).json()
    assert seen["enabled"] is False and seen["disabled_reason"] == "failing"
    # and the business's other endpoint is told (its first attempt failed with the rest)
    receiver.fail_first = 0
    clock.advance(60)
    await settle(dispatcher)
    notices = [r for r in receiver.requests if r.event["type"] == "endpoint.disabled"]
    assert len({n.id for n in notices}) == 1 and len(notices) == 2  # failed once, then delivered
    notice = notices[-1]
    assert signed_by(healthy["secret"], notice)  # (its timestamp is the moved clock's: days ahead)
    assert notice.event["data"]["endpoint_id"] == failing["id"]
    assert notice.event["data"]["reason"] == "failing"
    # nothing is sent to the disabled one any more
    sent = len(receiver.requests)
    await api.transfer(payer, shop.number, 1 * TL)
    clock.advance(3600)
    await settle(dispatcher)
    assert len(receiver.requests) == sent
    # a member enables it again: a fresh start
    on = await api.http.patch(
        f"/v1/webhook-endpoints/{failing['id']}", json={"enabled": True}, headers=shop.auth
    )
    assert on.json()["enabled"] is True and on.json()["failing_since"] is None


async def test_an_endpoint_that_recovers_is_not_disabled(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver, clock: Clock
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    endpoint = await register(api, shop, receiver.url)
    receiver.fail_first = 3
    await api.transfer(payer, shop.number, 1 * TL)
    for _ in range(4):
        await settle(dispatcher)
        clock.advance(2 * 3600)
    [delivery] = await deliveries(api)
    assert delivery["status"] == "delivered" and delivery["attempts"] == 4
    seen = (await api.http.get(f"/v1/webhook-endpoints/{endpoint['id']}", headers=shop.auth)).json()
    assert seen["enabled"] is True and seen["failing_since"] is None


async def test_events_of_one_resource_arrive_in_order(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver, clock: Clock
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    await register(api, shop, receiver.url, ["payment.received", "payment.refunded"])
    payment = (await api.transfer(payer, shop.number, 10 * TL)).json()
    refund = await api.post(f"/v1/transfers/{payment['id']}/refund", {}, shop.auth)
    assert refund.status_code == 201
    receiver.fail_first = 1  # the payment's first attempt fails
    await settle(dispatcher)
    # the refund is due, but waits for the payment's delivery
    assert [r.event["type"] for r in receiver.requests] == ["payment.received"]
    clock.advance(DEFAULT_SCHEDULE_S[0] * 1.2 + 1)
    await settle(dispatcher)
    assert [r.event["type"] for r in receiver.requests] == [
        "payment.received",
        "payment.received",
        "payment.refunded",
    ]
    assert len({r.id for r in receiver.requests}) == 2


async def test_a_receiver_down_for_a_while_gets_every_event_once_it_is_back(
    api: WalletApi, dispatcher: Dispatcher, clock: Clock
) -> None:
    receiver = Receiver()
    server, thread = start_receiver(receiver)
    port = int(receiver.url.split(":")[2].split("/")[0])
    payer = await api.customer(funds=1_000 * TL)
    shop = await api.business()
    await register(api, shop, receiver.url)
    stop(server, thread)  # down: connections refused
    payments = [(await api.transfer(payer, shop.number, (i + 1) * TL)).json()["id"] for i in range(12)]
    await settle(dispatcher)
    for d in await deliveries(api):
        [a] = await attempts(api, d["id"])
        assert a["status_code"] is None and a["error"] == "ConnectError"
    clock.advance(60)
    await settle(dispatcher)  # still down: the second attempts fail too
    server, thread = start_receiver(receiver, port=port)  # back
    try:
        for _ in range(3):
            clock.advance(3600)
            await settle(dispatcher)
        assert {d["status"] for d in await deliveries(api)} == {"delivered"}
        kept = receiver.unique()
        assert set(kept) == {me.event_id("payment.received", p) for p in payments}
        assert sorted(r.event["data"]["amount_minor"] for r in kept.values()) == [
            (i + 1) * TL for i in range(12)
        ]
    finally:
        stop(server, thread)


async def test_replay_sends_the_same_event_again(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver, clock: Clock
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    endpoint = await register(api, shop, receiver.url)
    await api.transfer(payer, shop.number, 1 * TL)
    await settle(dispatcher)
    [delivery] = (await api.http.get("/v1/webhook-deliveries", headers=shop.auth)).json()["deliveries"]
    other = await api.business("Başka", client="merchant-two")
    assert (
        await api.http.post(f"/v1/webhook-deliveries/{delivery['id']}/replay", headers=other.auth)
    ).status_code == 404
    r = await api.http.post(f"/v1/webhook-deliveries/{delivery['id']}/replay", headers=shop.auth)
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "pending"
    # the replay is due at wallet-api's now (the wall clock's), which runs ahead of the fixture's
    # clock by however long the test has taken so far (over 5 s on a loaded machine): past both
    clock.now = max(clock.now, time.time()) + 5
    await settle(dispatcher)
    first, again = receiver.requests
    assert first.id == again.id
    Webhook(endpoint["secret"]).verify(again.body, again.headers)
    detail = (await api.http.get(f"/v1/webhook-deliveries/{delivery['id']}", headers=shop.auth)).json()
    assert detail["status"] == "delivered" and len(detail["attempt_log"]) == 2
    # filters and the cursor
    for _ in range(3):
        await api.transfer(payer, shop.number, 1 * TL)
    await settle(dispatcher)
    page = (await api.http.get("/v1/webhook-deliveries?limit=2", headers=shop.auth)).json()
    assert len(page["deliveries"]) == 2 and page["next_cursor"]
    rest = (
        await api.http.get(f"/v1/webhook-deliveries?limit=2&cursor={page['next_cursor']}", headers=shop.auth)
    ).json()
    assert len(rest["deliveries"]) == 2 and rest["next_cursor"] is None
    ids = [d["id"] for d in page["deliveries"] + rest["deliveries"]]
    assert len(set(ids)) == 4
    filtered = await api.http.get(
        f"/v1/webhook-deliveries?endpoint={endpoint['id']}&event_type=payment.received&status=delivered",
        headers=shop.auth,
    )
    assert len(filtered.json()["deliveries"]) == 4
    none = await api.http.get("/v1/webhook-deliveries?status=failed", headers=shop.auth)
    assert none.json()["deliveries"] == []


@pytest.mark.parametrize("dispatcher_settings", [{"allow_private_targets": False}])
async def test_an_address_that_became_private_is_refused_at_delivery(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver
) -> None:
    """wallet-api accepted the URL (development); the dispatcher (production's setting) checks
    again before every call and refuses it: nothing reaches the receiver."""
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    await register(api, shop, receiver.url.replace("127.0.0.1", "localhost"))
    await api.transfer(payer, shop.number, 1 * TL)
    await settle(dispatcher)
    [delivery] = await deliveries(api)
    [attempt] = await attempts(api, delivery["id"])
    assert attempt["error"] == "forbidden-target:private-address"
    assert receiver.requests == []


@pytest.mark.parametrize(
    "dispatcher_settings", [{"allow_private_targets": True, "connect_timeout_s": 1.0, "purge_batch": 2}]
)
async def test_events_past_the_retention_go_with_their_deliveries_and_attempts_unless_pending(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver, clock: Clock
) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    await register(api, shop, receiver.url)
    for _ in range(5):
        await api.transfer(payer, shop.number, 1 * TL)
    # Another business's endpoint refuses connections: its delivery stays pending.
    other = await api.business("Başka", client="merchant-two")
    await register(api, other, "http://127.0.0.1:9/hook")
    await api.transfer(payer, other.number, 1 * TL)
    await settle(dispatcher)
    assert sorted(d["status"] for d in await deliveries(api)) == ["delivered"] * 5 + ["pending"]

    clock.advance(29 * 86_400)
    assert await dispatcher.purge() == 0  # not yet thirty days old
    clock.advance(2 * 86_400)
    assert await dispatcher.purge() == 5  # three batches of at most two
    [left] = await deliveries(api)
    assert left["status"] == "pending"
    async with api.owner_connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM wallet.webhook_events") == 1
        assert await conn.fetchval("SELECT count(*) FROM wallet.webhook_attempts") == len(
            await attempts(api, left["id"])
        )
    assert await dispatcher.purge() == 0


@pytest.mark.parametrize(
    "dispatcher_settings",
    [{"allow_private_targets": True, "request_timeout_s": 5.0, "poll_interval_s": 300.0}],
)
async def test_a_lost_listener_connection_is_listened_again(
    api: WalletApi, dispatcher: Dispatcher, receiver: Receiver
) -> None:
    """Polling is all but off (300 s): a delivery within seconds is the notice's doing, before
    the listener's backend is terminated and after."""
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    await register(api, shop, receiver.url)
    running = asyncio.create_task(
        dispatcher.run(db.dedicated_connection(api.database, service_role("wallet", "merchant_webhooks")))
    )
    try:
        await api.transfer(payer, shop.number, 1 * TL)
        await until(lambda: len(receiver.requests) == 1, 10, "the first delivery")
        listeners = "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'"
        async with api.owner_connection() as conn:
            [lost] = [r["pid"] for r in await conn.fetch(listeners, api.database)]
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", lost)

            async def listening_again() -> bool:
                pids = [r["pid"] for r in await conn.fetch(listeners, api.database)]
                return len(pids) == 1 and pids[0] != lost

            await until(listening_again, 10, "a new LISTEN connection")
        await api.transfer(payer, shop.number, 2 * TL)
        await until(lambda: len(receiver.requests) == 2, 10, "the delivery after the loss")
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
