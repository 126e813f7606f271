"""merchant-webhooks tests: a real wallet-api (real tokens of the merchant-demo client, linked
to a business as `hiwallet business link` does) writes the events; a dispatcher on the same
database, as merchant-webhooks' own role, with a clock the test moves, sends them to a real
HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hiwallet.contracts.databases import service_role
from hiwallet.core import db
from hiwallet.merchant_webhooks.dispatcher import Dispatcher
from hiwallet.merchant_webhooks.settings import MerchantWebhooksSettings
from tests.servers import serve, stop
from tests.waiting import Clock
from tests.wallet_api.conftest import (  # noqa: F401 (fixtures)
    Business,
    WalletApi,
    customer_idp,
    idps,
    running_api,
    staff_idp,
)


@pytest.fixture
def wallet_api_settings() -> dict[str, Any]:
    # The receivers are on 127.0.0.1: development's setting (refused in production).
    return {"webhook_allow_private_targets": True}


@pytest.fixture
async def api(
    wallet_db: str,
    customer_idp: Any,  # noqa: F811
    staff_idp: Any,  # noqa: F811
    wallet_api_settings: dict[str, Any],
) -> AsyncIterator[WalletApi]:
    async with running_api(wallet_db, customer_idp, staff_idp, **wallet_api_settings) as running:
        yield running


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = orjson.loads(self.body)
        return parsed

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class Receiver:
    """A merchant's endpoint: keeps every request; answers ``status`` (or holds the request
    ``hold_s`` seconds first)."""

    url: str = ""
    requests: list[Received] = field(default_factory=list)
    status: int = 200
    hold_s: float = 0.0
    fail_first: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        with self._lock:
            self.requests.append(Received(dict(request.headers), body))
            failing = self.fail_first > 0
            if failing:
                self.fail_first -= 1
        if self.hold_s:
            await asyncio.sleep(self.hold_s)
        return Response(status_code=500 if failing else self.status)

    def unique(self) -> dict[str, Received]:
        """What a receiver that deduplicates by webhook-id keeps: the first of each id."""
        kept: dict[str, Received] = {}
        for r in self.requests:
            kept.setdefault(r.id, r)
        return kept


def start_receiver(receiver: Receiver, port: int | None = None) -> tuple[Any, Any]:
    app = Starlette(routes=[Route("/hook", receiver.handle, methods=["POST"])])
    base, server, thread = serve(app, "receiver", port=port)
    receiver.url = f"{base}/hook"
    return server, thread


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    server, thread = start_receiver(r)
    yield r
    stop(server, thread)


@pytest.fixture
def clock() -> Clock:
    return Clock(time.time())


@pytest.fixture
def dispatcher_settings() -> dict[str, Any]:
    return {"allow_private_targets": True, "request_timeout_s": 5.0, "connect_timeout_s": 2.0}


@pytest.fixture
async def dispatcher(
    api: WalletApi, clock: Clock, dispatcher_settings: dict[str, Any]
) -> AsyncIterator[Dispatcher]:
    pool = await db.create_pool(
        api.database, role=service_role("wallet", "merchant_webhooks"), min_size=1, max_size=4
    )
    d = Dispatcher(pool, MerchantWebhooksSettings(**dispatcher_settings), clock=clock)
    try:
        yield d
    finally:
        await d.aclose()
        await pool.close()


async def register(
    api: WalletApi, shop: Business, url: str, types: list[str] | None = None
) -> dict[str, Any]:
    r = await api.http.post(
        "/v1/webhook-endpoints",
        json={"account_id": shop.account_id, "url": url, "event_types": types or ["payment.received"]},
        headers=shop.auth,
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def deliveries(api: WalletApi) -> list[asyncpg.Record]:
    async with api.owner_connection() as conn:
        return list(await conn.fetch("SELECT * FROM wallet.webhook_deliveries ORDER BY event_seq, id"))


async def attempts(api: WalletApi, delivery_id: str) -> list[asyncpg.Record]:
    async with api.owner_connection() as conn:
        return list(
            await conn.fetch(
                "SELECT * FROM wallet.webhook_attempts WHERE delivery_id = $1 ORDER BY n", delivery_id
            )
        )
