"""bank-webhook accepts callbacks only from the bank's networks when they are set
(HIWALLET_BANK_WEBHOOK_NETWORKS): from another address, 403 problem+json, one log line without
the body, and nothing stored or announced; unset (a laptop), every address is accepted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx
import pytest
from structlog.testing import capture_logs

from hiwallet.bank.settings import BankSettings, BankWebhookSettings
from hiwallet.bank.webhook import PATH, create_bank_webhook_app
from tests.bank.conftest import bank_settings, callback_body, inbox, outbox, post_callback

BANK_NETWORKS = ["192.0.2.0/24"]


@asynccontextmanager
async def from_address(
    settings: BankSettings, networks: list[str], address: str
) -> AsyncIterator[httpx.AsyncClient]:
    """bank-webhook with its lifespan, every request arriving from ``address`` (the peer)."""
    webhook_settings = BankWebhookSettings(webhook_networks=networks)
    app = create_bank_webhook_app(settings, webhook_settings=webhook_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=(address, 40_000))
        async with httpx.AsyncClient(transport=transport, base_url="http://bank-webhook") as client:
            yield client


@pytest.mark.parametrize(("networks", "address"), [(BANK_NETWORKS, "192.0.2.10"), ([], "198.51.100.9")])
async def test_a_callback_from_the_banks_network_or_with_no_list_is_kept(
    bank_db: str, owner: asyncpg.Connection, networks: list[str], address: str
) -> None:
    async with from_address(bank_settings(bank_db), networks, address) as client:
        response = await post_callback(client, callback_body("transfer.succeeded", "BNK-net-1"))
    assert response.status_code == 202, response.text
    assert [r["type"] for r in await inbox(owner)] == ["transfer.succeeded"]


async def test_a_callback_from_elsewhere_is_refused_before_anything_is_stored(
    bank_db: str, owner: asyncpg.Connection
) -> None:
    with capture_logs() as logs:
        async with from_address(bank_settings(bank_db), BANK_NETWORKS, "198.51.100.9") as client:
            response = await post_callback(client, callback_body("transfer.succeeded", "BNK-net-2"))
            assert (await client.get("/health")).status_code == 200  # the probes come from inside
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["instance"] == PATH
    assert await inbox(owner) == []
    assert await outbox(owner) == []
    [line] = [line for line in logs if line["event"] == "client address refused"]
    assert (line["service"], line["client"], line["path"], line["method"]) == (
        "bank-webhook",
        "198.51.100.9",
        PATH,
        "POST",
    )
    assert "BNK-net-2" not in str(logs)  # nothing of the body
