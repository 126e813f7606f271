"""bank-adapter and bank-webhook tests: the apps in-process (their lifespans run, requests
through httpx's ASGI transport), a fresh hiwallet_bank per test (the root ``bank_db``), real
PostgreSQL and, for the adapter, real RabbitMQ under names of the test's own.

The bank's HTTP side is :class:`StubBank`, a minimal app with CONTRACT-11's transfer API (Part D:
``POST /v1/transfers`` with Idempotency-Key, ``GET /v1/transfers/{reference}``), served
in-process through httpx's ASGI transport (or on a socket, tests.servers, for the processes):
what the real bank-fake does not offer (down on demand, an idempotency conflict, a status set by
hand) for the unit tests; test_with_bank_fake.py runs the whole path against the real bank-fake.
Callbacks are signed by the standardwebhooks package, as the bank signs them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from standardwebhooks import Webhook

from hiwallet.bank.adapter import create_bank_adapter_app
from hiwallet.bank.settings import BankSettings
from hiwallet.bank.webhook import PATH, create_bank_webhook_app
from hiwallet.contracts.withdrawals import RESULTS, StartBankTransfer, command_id
from hiwallet.core.broker import (
    DELIVERY_LIMIT,
    Broker,
    ExchangeSpec,
    OutgoingMessage,
    QueueSpec,
    Topology,
    dead_letter_topology,
)
from hiwallet.core.ids import new_id
from tests import pgtemplate

BANK_SECRET = "whsec_ZGV2LWJhbmstZmFrZS1zZWNyZXQtMDEyMzQ1Njc4OQ=="
BANK_SECRET_NEW = "whsec_bmV3LWJhbmstc2VjcmV0LWZvci1yb3RhdGlvbi0wMTIz"
API_KEY = "bank_test_key"
IBAN = "TR330006100519786457841326"


@pytest.fixture
async def owner(bank_db: str) -> AsyncIterator[asyncpg.Connection]:
    async with pgtemplate.owner_connection(bank_db) as conn:
        yield conn


# ---- the saga's names, the test's own ----------------------------------------------------------


class Names:
    """contracts.withdrawals' topology under a unique prefix: the bank queue bound to
    StartBankTransfer, the orchestrator's queue bound to every result, and the dead letters
    (the real queue names are fixed; a test never touches them)."""

    def __init__(self) -> None:
        self.prefix = f"hwtest.{uuid.uuid4().hex[:10]}"
        self.exchange = f"{self.prefix}.withdrawals"
        self.bank_queue = f"{self.prefix}.withdrawals.bank"
        self.results_queue = f"{self.prefix}.withdrawals.orchestrator"
        self.dlx = f"{self.prefix}.dead-letters"
        self.dead_key = f"{self.prefix}.withdrawals"
        self.dlq = f"{self.prefix}.withdrawals.dead"

    def topology(self) -> Topology:
        arguments = {
            "x-queue-type": "quorum",
            "x-delivery-limit": DELIVERY_LIMIT,
            "x-dead-letter-exchange": self.dlx,
            "x-dead-letter-routing-key": self.dead_key,
        }
        own = Topology(
            exchanges=(ExchangeSpec(self.exchange, "direct"),),
            queues=(
                QueueSpec(self.bank_queue, dict(arguments), ((self.exchange, "StartBankTransfer"),)),
                QueueSpec(self.results_queue, dict(arguments), tuple((self.exchange, t) for t in RESULTS)),
            ),
        )
        return own + dead_letter_topology(self.dlx, self.dlq, self.dead_key)


@pytest.fixture
async def names(broker: Broker) -> AsyncIterator[Names]:
    n = Names()
    yield n
    await broker.delete(n.topology())


def bank_settings(database: str, names: Names | None = None, **overrides: Any) -> BankSettings:
    values: dict[str, Any] = {
        "database": database,
        "bank_url": "http://bank",
        "bank_api_key": API_KEY,
        "webhook_secrets": [BANK_SECRET],
        "bank_attempts": 2,
        "bank_retry_backoff_s": 0.01,
        "bank_timeout_s": 2.0,
        "relay_poll_s": 0.2,
        "metrics_interval_s": 0.5,
        "max_attempts": 2,
        "stop_timeout_s": 10.0,
        **overrides,
    }
    if names is not None:
        values.update(
            exchange=names.exchange,
            queue=names.bank_queue,
            dead_letter_exchange=names.dlx,
            dead_letter_key=names.dead_key,
            dead_letter_queue=names.dlq,
        )
    return BankSettings(**values)


# ---- the bank ---------------------------------------------------------------------------------


class StubBank:
    """CONTRACT-11 Part D's transfer API, minimal: a transfer per Idempotency-Key (the same key
    and body: the same answer; another body: 422 idempotency_conflict), 422 invalid_iban for an
    IBAN in ``refused_ibans``, 503 while ``down``; ``statuses`` is what GET answers."""

    def __init__(self) -> None:
        self.down = False
        self.refused_ibans: set[str] = set()
        self.by_key: dict[str, tuple[bytes, dict[str, Any]]] = {}
        self.statuses: dict[str, dict[str, Any]] = {}
        self.posts: list[str] = []  # the Idempotency-Key of every POST that reached the bank
        self.gets: list[str] = []
        self.auth: set[str] = set()
        self.app = FastAPI()
        self.app.post("/v1/transfers")(self.create)
        self.app.get("/v1/transfers/{reference}")(self.show)

    @staticmethod
    def _problem(status: int, code: str) -> JSONResponse:
        return JSONResponse(
            {
                "type": f"https://bank-fake.invalid/problems/{code}",
                "title": code,
                "status": status,
                "code": code,
            },
            status_code=status,
            media_type="application/problem+json",
        )

    async def create(self, request: Request) -> JSONResponse:
        self.auth.add(request.headers.get("authorization", ""))
        if self.down:
            return self._problem(503, "unavailable")
        key = request.headers.get("idempotency-key")
        if not key:
            return self._problem(400, "missing_idempotency_key")
        self.posts.append(key)
        body = await request.body()
        data = orjson.loads(body)
        fingerprint = orjson.dumps(
            {k: data.get(k) for k in ("amount_minor", "currency", "destination_iban")},
            option=orjson.OPT_SORT_KEYS,
        )
        if key in self.by_key:
            seen, answer = self.by_key[key]
            if seen != fingerprint:
                return self._problem(422, "idempotency_conflict")
            return JSONResponse(answer, status_code=202)
        if data.get("destination_iban") in self.refused_ibans:
            return self._problem(422, "invalid_iban")
        reference = f"trf_{uuid.uuid4().hex[:20]}"
        answer = {
            "reference": reference,
            "status": "pending",
            "client_reference": key,
            "amount_minor": data["amount_minor"],
            "currency": data["currency"],
        }
        self.by_key[key] = (fingerprint, answer)
        self.statuses[reference] = {
            "reference": reference,
            "client_reference": key,
            "status": "pending",
            "failure_reason": None,
        }
        return JSONResponse(answer, status_code=202)

    async def show(self, reference: str) -> JSONResponse:
        self.gets.append(reference)
        if self.down:
            return self._problem(503, "unavailable")
        if reference not in self.statuses:
            return self._problem(404, "not_found")
        return JSONResponse(self.statuses[reference])

    def decide(self, reference: str, status: str, failure_reason: str | None = None) -> None:
        self.statuses[reference].update(status=status, failure_reason=failure_reason)

    def transport(self) -> httpx.AsyncBaseTransport:
        return httpx.ASGITransport(app=self.app)


@pytest.fixture
def bank() -> StubBank:
    return StubBank()


# ---- commands and callbacks --------------------------------------------------------------------


def start_command(amount_minor: int = 150_000, iban: str = IBAN) -> StartBankTransfer:
    saga = new_id()
    return StartBankTransfer(
        command_id=command_id(saga, "bank"),
        saga_id=saga,
        amount_minor=amount_minor,
        currency="TRY",
        destination_iban=iban,
    )


def command_message(
    names: Names, command: StartBankTransfer, message_id: str | None = None
) -> OutgoingMessage:
    """As the orchestrator publishes it (CONTRACT-11, "Publishing")."""
    return OutgoingMessage(
        message_id=message_id or new_id(),
        exchange=names.exchange,
        routing_key="StartBankTransfer",
        type="StartBankTransfer",
        body=orjson.dumps(command.model_dump(mode="json")),
        correlation_id=command.saga_id,
    )


def callback_body(
    kind: str, reference: str | None, client_reference: str = "", reason: str | None = None
) -> bytes:
    data: dict[str, Any] = {
        "reference": reference,
        "client_reference": client_reference,
        "status": kind.removeprefix("transfer."),
        "amount_minor": 150_000,
        "currency": "TRY",
    }
    if reason is not None:
        data["failure_reason"] = reason
    return orjson.dumps({"type": kind, "timestamp": datetime.now(UTC).isoformat(), "data": data})


def signed(
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


async def post_callback(client: httpx.AsyncClient, body: bytes, **sign: Any) -> httpx.Response:
    return await client.post(PATH, content=body, headers=signed(body, **sign))


# ---- the apps ---------------------------------------------------------------------------------


@asynccontextmanager
async def webhook_client(settings: BankSettings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_bank_webhook_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bank-webhook") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@asynccontextmanager
async def adapter(
    settings: BankSettings, names: Names, bank: StubBank, **kwargs: Any
) -> AsyncIterator[FastAPI]:
    app = create_bank_adapter_app(
        settings, topology=names.topology(), bank_transport=bank.transport(), **kwargs
    )
    async with app.router.lifespan_context(app):
        await consuming(app)
        yield app


async def consuming(app: FastAPI, timeout_s: float = 15.0) -> None:
    """Until bank-adapter consumes (its topology declared once RabbitMQ answered: core.service)."""
    await asyncio.wait_for(app.state.consumer.wait_started(), timeout_s)


# ---- what was stored --------------------------------------------------------------------------


async def transfers(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM bank.transfers ORDER BY requested_at")


async def inbox(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM bank.inbox ORDER BY id")


async def outbox(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM bank.outbox ORDER BY id")


def body_of(row: asyncpg.Record) -> dict[str, Any]:
    value = row["body"]
    return orjson.loads(value) if isinstance(value, str) else dict(value)
