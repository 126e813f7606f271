"""The relay inside topup-webhook: a recorded payment leaves for the exchange as one
TopupRecorded (with confirms), within moments, and its outbox row is marked sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx

from hiwallet.core.broker import Broker
from hiwallet.core.ids import derived_id
from hiwallet.core.outbox import Relay
from hiwallet.core.settings import Settings, get_settings
from hiwallet.topup_webhook.app import RELAY_LOCK_KEY, create_topup_webhook_app, database_spec
from hiwallet.topup_webhook.retention import OUTBOX_CHANNEL, OUTBOX_TABLE
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from tests.core import spine
from tests.topup_webhook.conftest import (
    post_bank,
    post_stripe,
    running,
    stripe_events,
    topup_settings,
    wallet_id,
    wire,
)
from tests.waiting import until


@asynccontextmanager
async def with_relay(settings: TopupWebhookSettings, names: spine.Names) -> AsyncIterator[httpx.AsyncClient]:
    app = create_topup_webhook_app(settings, topology=names.topology())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://topup") as client:
            yield client


async def wait_sent(owner: asyncpg.Connection, count: int, timeout_s: float = 10.0) -> None:
    async def sent() -> bool:
        return bool(
            await owner.fetchval("SELECT count(*) FROM topup.outbox WHERE sent_at IS NOT NULL") >= count
        )

    await until(sent, timeout_s, f"the relay marked {count} rows sent", interval_s=0.05)


async def test_each_recorded_payment_is_published_once_and_marked_sent(
    topup_db: str, owner: asyncpg.Connection, broker: Broker, names: spine.Names
) -> None:
    settings = topup_settings(topup_db, exchange=names.exchange, relay_poll_s=5.0, metrics_interval_s=0.2)
    wallet = wallet_id()
    checkout, intent = stripe_events(wallet=wallet, amount=700)
    w = wire(reference=None)
    async with with_relay(settings, names) as client:

        async def is_ready() -> httpx.Response | None:
            answer = await client.get("/ready")
            return answer if answer.status_code == 200 else None

        ready = await until(is_ready, 10, "ready (the topology declared)", interval_s=0.1)
        assert ready.json()["checks"] == {"database": "ok", "broker": "ok", "background": "ok"}
        started = time.monotonic()
        for event in (checkout, intent, checkout):
            assert (await post_stripe(client, event)).status_code == 202
        response = await post_bank(client, w)
        assert response.status_code == 202
        # the service wakes its relay after the commit (no trigger): far sooner than its 5 s poll
        await wait_sent(owner, 2)
        assert time.monotonic() - started < 4.0
        got = await spine.collect(broker, names.queues, 3, timeout_s=2.0)
        expected = (
            "hiwallet_relay_published_total 2.0",
            "hiwallet_outbox_unsent 0.0",
            "hiwallet_topup_inbox_rows 3.0",  # the repeat stored nothing
        )

        async def refreshed() -> str | None:  # the gauges refresh every 0.2 s
            text = (await client.get("/metrics")).text
            return text if all(line in text for line in expected) else None

        metrics = await until(refreshed, 10, "the gauges refreshed", interval_s=0.05)
    assert len(got) == 2, [m.body for m in got]
    by_payment = {m.correlation_id: m for m in got}
    card = by_payment[derived_id("topup", "stripe", intent["data"]["object"]["id"])]  # type: ignore[index]
    assert (card.type, card.content_type, card.delivery_mode) == ("TopupRecorded", "application/json", 2)
    body_of_card = json.loads(card.body)
    assert (body_of_card["wallet"], body_of_card["amount_minor"], body_of_card["route"]) == (
        wallet,
        700,
        "webhook",
    )
    assert card.routing_key == wallet
    wired = by_payment[derived_id("topup", "bank", w["id"])]
    assert wired.routing_key == wired.correlation_id  # no wallet: routed by the payment id
    assert wired.headers["x-request-id"] == response.headers["x-request-id"]
    assert await owner.fetchval("SELECT count(*) FROM topup.outbox WHERE sent_at IS NULL") == 0
    assert "hiwallet_relay_published_total 2.0" in metrics
    assert "hiwallet_outbox_unsent 0.0" in metrics
    assert "hiwallet_topup_inbox_rows 3.0" in metrics  # the repeat stored nothing


async def test_ready_says_so_when_the_broker_is_away(topup_db: str, names: spine.Names) -> None:
    settings = topup_settings(topup_db, exchange=names.exchange)
    away = Settings(amqp_url="amqp://guest:guest@127.0.0.1:1/")
    app = create_topup_webhook_app(settings, core_settings=away, topology=names.topology())
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
        response = await client.get("/ready")
        assert response.status_code == 503
        assert response.json()["checks"] == {"broker": "unavailable"}
        # notifications are still kept: the outbox holds them until the broker is back
        assert (await post_stripe(client, stripe_events(wallet=wallet_id())[0])).status_code == 202


async def test_a_relay_leading_in_another_instance_is_woken_by_the_hint(
    topup_db: str, owner: asyncpg.Connection, broker: Broker, names: spine.Names
) -> None:
    """The outbox has no NOTIFY trigger: an instance whose relay does not lead sends one
    pg_notify after its commit, which wakes the leader elsewhere far sooner than its poll."""
    settings = topup_settings(topup_db, exchange=names.exchange)
    await broker.declare(names.topology())
    elsewhere = Relay(
        connect=database_spec(settings).dedicated(get_settings()),
        broker=broker,
        table=OUTBOX_TABLE,
        channel=OUTBOX_CHANNEL,
        lock_key=RELAY_LOCK_KEY,
        poll_interval_s=5.0,
    )
    task = asyncio.create_task(elsewhere.run())
    try:
        await until(lambda: elsewhere._worked, 10, "the relay's first pass (it listens)")
        async with running(settings) as client:  # this instance: the routes, no relay
            started = time.monotonic()
            assert (await post_stripe(client, stripe_events(wallet=wallet_id())[1])).status_code == 202
            await wait_sent(owner, 1)
            took_s = time.monotonic() - started
            assert client.app.state.relay_hint.sent == 1  # type: ignore[attr-defined]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert took_s < 1.5, took_s
    assert len(await spine.collect(broker, names.queues, 1, timeout_s=5.0)) == 1
