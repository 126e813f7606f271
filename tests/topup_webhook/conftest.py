"""topup-webhook tests: the app in-process (its lifespan run, requests through httpx's ASGI
transport), a fresh hiwallet_topup per test (the root ``topup_db``), real PostgreSQL.
Notifications are signed as the providers sign them, with the providers' own packages: stripe's
``WebhookSignature`` and standardwebhooks' ``Webhook``."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
import stripe
from fastapi import FastAPI, Request
from standardwebhooks import Webhook

from hiwallet.core.broker import Broker
from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.fakes.stripe import StripeFakeSettings, create_stripe_fake_app
from hiwallet.topup_webhook.app import create_topup_webhook_app
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from tests import pgtemplate
from tests.core import spine
from tests.fakes.conftest import FAST
from tests.servers import serve, stop
from tests.stripe_events import stripe_event

STRIPE_SECRET = "whsec_dev_stripe_fake_0123456789abcdef"
STRIPE_SECRET_NEW = "whsec_rotated_stripe_secret_abcdef0123456789"
BANK_SECRET = "whsec_ZGV2LWJhbmstZmFrZS1zZWNyZXQtMDEyMzQ1Njc4OQ=="
BANK_SECRET_NEW = "whsec_bmV3LWJhbmstc2VjcmV0LWZvci1yb3RhdGlvbi0wMTIz"
STRIPE_PATH = "/v1/webhooks/topup/stripe"
BANK_PATH = "/v1/webhooks/topup/bank"


@pytest.fixture
async def owner(topup_db: str) -> AsyncIterator[asyncpg.Connection]:
    async with pgtemplate.owner_connection(topup_db) as conn:
        yield conn


def topup_settings(database: str, **overrides: Any) -> TopupWebhookSettings:
    values: dict[str, Any] = {
        "database": database,
        "stripe_secrets": [STRIPE_SECRET],
        "bank_secrets": [BANK_SECRET],
        "max_body_bytes": 65_536,
        **overrides,
    }
    return TopupWebhookSettings(**values)


@asynccontextmanager
async def running(settings: TopupWebhookSettings) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan (pool, service), without the relay and the jobs."""
    app = create_topup_webhook_app(settings, background=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://topup") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@pytest.fixture
async def client(topup_db: str) -> AsyncIterator[httpx.AsyncClient]:
    async with running(topup_settings(topup_db)) as c:
        yield c


@contextmanager
def served_fakes(webhook_url: str, *, stripe_key: str, bank_key: str) -> Iterator[tuple[str, str]]:
    """stripe-fake and bank-fake on free ports (their URLs), notifying topup-webhook at
    ``webhook_url`` with the secrets it accepts; stopped afterwards."""
    stripe_settings = StripeFakeSettings(
        webhook_url=f"{webhook_url}{STRIPE_PATH}", signing_secrets=[STRIPE_SECRET], api_key=stripe_key, **FAST
    )
    bank_settings = BankFakeSettings(
        webhook_url=f"{webhook_url}{BANK_PATH}", signing_secrets=[BANK_SECRET], api_key=bank_key, **FAST
    )
    stripe_url, stripe_server, stripe_thread = serve(create_stripe_fake_app(stripe_settings), "stripe-fake")
    bank_url, bank_server, bank_thread = serve(create_bank_fake_app(bank_settings), "bank-fake")
    try:
        yield stripe_url, bank_url
    finally:
        stop(stripe_server, stripe_thread)
        stop(bank_server, bank_thread)


# ---- what the providers send ---------------------------------------------------------------


def wallet_id() -> str:
    return f"0421:w:{uuid.uuid4()}"


def stripe_events(
    *, wallet: str | None = None, amount: int = 1000, currency: str = "try", pi: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two events stripe-fake sends for one payment: checkout completed, intent succeeded."""
    pi = pi or f"pi_{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    return (
        stripe_event("checkout.session.completed", pi, wallet, amount, currency, created=created),
        stripe_event("payment_intent.succeeded", pi, wallet, amount, currency, created=created),
    )


def stripe_signed(
    body: bytes, secrets: list[str] | None = None, timestamp: int | None = None
) -> dict[str, str]:
    """Stripe-Signature as Stripe makes it (one v1 per secret), with stripe's own signing."""
    t = int(time.time()) if timestamp is None else timestamp
    signed = f"{t}.{body.decode()}"
    v1 = [stripe.WebhookSignature._compute_signature(signed, s) for s in secrets or [STRIPE_SECRET]]
    return {
        "stripe-signature": ",".join([f"t={t}", *(f"v1={s}" for s in v1)]),
        "content-type": "application/json",
    }


def wire(*, reference: str | None, amount_minor: int = 25_000, wire_id: str | None = None) -> dict[str, Any]:
    return {
        "id": wire_id or f"wire_{uuid.uuid4().hex[:20]}",
        "amount_minor": amount_minor,
        "currency": "TRY",
        "sender_name": "Ayşe Yılmaz",
        "sender_iban": "TR330006100519786457841326",
        "sender_tckn": None,
        "reference": reference,
        "receiver_iban": "TR320010009999901234567890",
        "received_at": datetime.now(UTC).isoformat(),
    }


def bank_notification(w: dict[str, Any]) -> bytes:
    body = {"type": "incoming_wire.received", "timestamp": datetime.now(UTC).isoformat(), "data": w}
    return orjson.dumps(body)


def bank_signed(
    body: bytes,
    secrets: list[str] | None = None,
    timestamp: int | None = None,
    message_id: str | None = None,
) -> dict[str, str]:
    """Standard Webhooks headers, signed by the standardwebhooks package (one per secret)."""
    msg_id = message_id or f"msg_{uuid.uuid4().hex[:24]}"
    when = datetime.fromtimestamp(int(time.time()) if timestamp is None else timestamp, tz=UTC)
    signatures = [Webhook(s).sign(msg_id, when, body.decode()) for s in secrets or [BANK_SECRET]]
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": " ".join(signatures),
        "content-type": "application/json",
    }


async def post_stripe(client: httpx.AsyncClient, event: dict[str, Any], **sign: Any) -> httpx.Response:
    """POST one Stripe event, signed as Stripe signs (``stripe_signed``: secrets, timestamp)."""
    body = orjson.dumps(event)
    return await client.post(STRIPE_PATH, content=body, headers=stripe_signed(body, **sign))


async def post_bank(client: httpx.AsyncClient, w: dict[str, Any], **sign: Any) -> httpx.Response:
    """POST one incoming wire's notification, signed by Standard Webhooks (``bank_signed``)."""
    body = bank_notification(w)
    return await client.post(BANK_PATH, content=body, headers=bank_signed(body, **sign))


# ---- what was stored -----------------------------------------------------------------------


@dataclass
class Stored:
    inbox: list[asyncpg.Record]
    payments: list[asyncpg.Record]
    outbox: list[asyncpg.Record]


async def stored(conn: asyncpg.Connection) -> Stored:
    return Stored(
        await conn.fetch("SELECT * FROM topup.inbox ORDER BY id"),
        await conn.fetch("SELECT * FROM topup.payments ORDER BY created_at"),
        await conn.fetch("SELECT * FROM topup.outbox ORDER BY id"),
    )


Sign = Callable[[bytes], dict[str, str]]


# ---- the broker, under a unique prefix per test ----------------------------------------------


@pytest.fixture
async def names(broker: Broker) -> AsyncIterator[spine.Names]:
    """A unique exchange, partition queues and dead letters (the app declares them); deleted
    afterwards."""
    n = spine.Names()
    yield n
    await broker.delete(n.topology())


# ---- the providers' listings (what stripe-fake and bank-fake answer) -------------------------


class Listings:
    """A tiny provider API: Stripe's event list (newest first, ``starting_after``) and the bank's
    incoming wires (``cursor``), two items a page so that paging is exercised."""

    PAGE = 2

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.wires: list[dict[str, Any]] = []
        self.auth: list[str] = []
        self.app = FastAPI()
        self.app.get("/v1/events")(self.list_events)
        self.app.get("/v1/incoming-wires")(self.list_wires)

    async def list_events(self, request: Request) -> dict[str, Any]:
        self.auth.append(request.headers.get("authorization", ""))
        since = int(request.query_params["created[gte]"])
        events = sorted((e for e in self.events if e["created"] >= since), key=lambda e: -e["created"])
        after = request.query_params.get("starting_after")
        if after:
            events = events[[e["id"] for e in events].index(after) + 1 :]
        page = events[: self.PAGE]
        return {"object": "list", "data": page, "has_more": len(events) > self.PAGE, "url": "/v1/events"}

    async def list_wires(self, request: Request) -> dict[str, Any]:
        self.auth.append(request.headers.get("authorization", ""))
        start = int(request.query_params.get("cursor") or 0)
        page = self.wires[start : start + self.PAGE]
        more = start + self.PAGE < len(self.wires)
        return {"data": page, "next_cursor": str(start + self.PAGE) if more else None}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://provider")
