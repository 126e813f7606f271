"""topup-webhook accepts notifications only from the providers' networks when they are set
(HIWALLET_TOPUP_PROVIDER_NETWORKS): from another address, 403 problem+json, one log line
without the body, and nothing stored or announced; the probes stay open; unset (a laptop),
every address is accepted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx
import pytest
from structlog.testing import capture_logs

from hiwallet.topup_webhook.app import create_topup_webhook_app
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from tests.topup_webhook.conftest import (
    BANK_PATH,
    post_bank,
    post_stripe,
    stored,
    stripe_events,
    topup_settings,
    wallet_id,
    wire,
)

PROVIDERS = ["203.0.113.0/24", "2001:db8::/32"]


@asynccontextmanager
async def from_address(settings: TopupWebhookSettings, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan, every request arriving from ``address`` (the socket's peer)."""
    app = create_topup_webhook_app(settings, background=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=(address, 40_000))
        async with httpx.AsyncClient(transport=transport, base_url="http://topup") as client:
            yield client


async def test_a_notification_from_a_provider_network_is_handled(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    settings = topup_settings(topup_db, provider_networks=PROVIDERS)
    checkout, _ = stripe_events()
    async with from_address(settings, "203.0.113.7") as client:
        assert (await post_stripe(client, checkout)).status_code == 202
    async with from_address(settings, "2001:db8::5") as client:
        assert (await post_bank(client, wire(reference=wallet_id()))).status_code == 202
    s = await stored(owner)
    assert len(s.inbox) == 2
    assert len(s.outbox) == 2


async def test_a_notification_from_elsewhere_is_refused_before_anything_is_stored(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    settings = topup_settings(topup_db, provider_networks=PROVIDERS)
    checkout, _ = stripe_events()
    with capture_logs() as logs:
        async with from_address(settings, "198.51.100.9") as client:
            refused = await post_stripe(client, checkout)
            refused_bank = await post_bank(client, wire(reference=wallet_id()))
            # the platform's probes come from inside, not from the providers
            assert (await client.get("/health")).status_code == 200
            assert (await client.get("/metrics")).status_code == 200
    for response, path in ((refused, "/v1/webhooks/topup/stripe"), (refused_bank, BANK_PATH)):
        assert response.status_code == 403
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["instance"] == path
    s = await stored(owner)
    assert (s.inbox, s.payments, s.outbox) == ([], [], [])
    lines = [line for line in logs if line["event"] == "client address refused"]
    assert [(line["client"], line["path"], line["log_level"]) for line in lines] == [
        ("198.51.100.9", "/v1/webhooks/topup/stripe", "warning"),
        ("198.51.100.9", BANK_PATH, "warning"),
    ]
    assert all(line["service"] == "topup-webhook" for line in lines)
    assert checkout["id"] not in str(logs)  # nothing of the body


async def test_without_networks_every_address_is_accepted(topup_db: str, owner: asyncpg.Connection) -> None:
    """Development's default: no list, no restriction."""
    settings = topup_settings(topup_db)
    assert settings.provider_networks == []
    checkout, _ = stripe_events()
    async with from_address(settings, "198.51.100.9") as client:
        assert (await post_stripe(client, checkout)).status_code == 202
    assert len((await stored(owner)).inbox) == 1


def test_the_networks_are_read_from_the_environment_and_a_bad_one_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mp = monkeypatch
    mp.setenv("HIWALLET_TOPUP_PROVIDER_NETWORKS", '["203.0.113.0/24", "2001:db8::/32"]')
    assert [str(n) for n in TopupWebhookSettings().provider_networks] == PROVIDERS
    mp.setenv("HIWALLET_TOPUP_PROVIDER_NETWORKS", '["203.0.113.0/33"]')
    with pytest.raises(ValueError, match="provider_networks"):
        TopupWebhookSettings()
