"""bank-fake: our bank in a bank API's shape (port 8094), for development and tests.

``POST /v1/topups`` books an incoming wire to our account (the sender's name and IBAN, checked
with schwifty; an optional TCKN, checked with python-stdnum; the reference the sender typed; the
amount) and answers it. Moments later the bank reports it with a Standard Webhooks notification
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64> [v1,<base64>…]``, one
signature per configured secret; the id stays the same across retries, the timestamp and
signatures are each attempt's). ``GET /v1/incoming-wires`` lists the wires, oldest first, with
a cursor.

Refusals are ``application/problem+json`` (RFC 9457) with a machine ``code`` and the ``field``;
never the refused value.

:meth:`BankFake.notify` is the one way out for every notification type: outgoing transfers
(``POST /v1/transfers``, the withdrawal issue) add their types and callbacks through it, on the
same delivery machinery (:mod:`hiwallet.fakes.delivery`). State is in memory.
"""

from __future__ import annotations

import base64
import hmac
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import structlog
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict
from schwifty import IBAN
from schwifty.exceptions import SchwiftyException
from standardwebhooks import Webhook
from stdnum.exceptions import ValidationError as NumberInvalid
from stdnum.tr import tckimlik

from hiwallet.fakes.delivery import (
    Deliverer,
    DeliverySettings,
    Notification,
    control_router,
    iso_now,
    random_id,
)

__all__ = ["BankFake", "BankFakeSettings", "create_bank_fake_app", "get_bank_fake_settings", "run_bank_fake"]

log = structlog.get_logger("hiwallet.fakes.bank")

INCOMING_WIRE_RECEIVED = "incoming_wire.received"
PROBLEM_JSON = "application/problem+json"


class BankFakeSettings(DeliverySettings):
    """``BANK_FAKE_*``; lists as JSON (``BANK_FAKE_SIGNING_SECRETS='["whsec_…","whsec_…"]'``)."""

    model_config = SettingsConfigDict(env_prefix="BANK_FAKE_", extra="ignore")

    port: int = 8094
    webhook_url: str = "http://127.0.0.1:8020/v1/webhooks/topup/bank"
    # Standard Webhooks secrets (whsec_ + base64 of the key); every one signs every attempt.
    signing_secrets: list[str] = Field(
        default=["whsec_ZGV2LWJhbmstZmFrZS1zZWNyZXQtMDEyMzQ1Njc4OQ=="], min_length=1, max_length=5
    )
    api_key: str = "bank_dev_key"
    # Our account at the bank: where wires arrive unless the request names another.
    receiver_iban: str = "TR420006100000000012345678"
    max_body_bytes: int = 16_384

    @field_validator("signing_secrets")
    @classmethod
    def _valid_secrets(cls, value: list[str]) -> list[str]:
        for secret in value:
            Webhook(secret)  # raises on an empty or undecodable secret
        return value

    @field_validator("receiver_iban")
    @classmethod
    def _valid_iban(cls, value: str) -> str:
        return str(IBAN(value).compact)


class _Problem(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        title: str,
        detail: str,
        *,
        field: str | None = None,
        errors: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.body: dict[str, Any] = {
            "type": f"https://bank-fake.invalid/problems/{code.replace('_', '-')}",
            "title": title,
            "status": status,
            "detail": detail,
            "code": code,
        }
        if field is not None:
            self.body["field"] = field
        if errors is not None:
            self.body["errors"] = errors


class _WireRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    sender_name: str = Field(min_length=1, max_length=140)
    sender_iban: str = Field(min_length=1, max_length=64)
    sender_tckn: str | None = Field(default=None, max_length=20)
    # The remittance information the sender typed (SEPA allows 140 characters).
    reference: str = Field(default="", max_length=140)
    amount_minor: int = Field(gt=0, le=10**15)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")
    receiver_iban: str | None = Field(default=None, max_length=64)


def _iban(value: str, field: str) -> str:
    try:
        return str(IBAN(value).compact)
    except SchwiftyException as exc:
        raise _Problem(400, "invalid_iban", "Invalid IBAN", f"{field}: {exc}", field=field) from exc


def _tckn(value: str) -> str:
    try:
        return str(tckimlik.validate(value))
    except NumberInvalid as exc:
        raise _Problem(
            400, "invalid_tckn", "Invalid TCKN", f"sender_tckn: {exc}", field="sender_tckn"
        ) from exc


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"w:{seq}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, seq = text.partition(":")
        if kind != "w":
            raise ValueError(cursor)
        return int(seq)
    except ValueError as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise _Problem(
            400, "invalid_cursor", "Invalid cursor", "cursor: not one this API gave", field="cursor"
        ) from exc


def _parse_since(value: str) -> datetime:
    try:
        since = datetime.fromisoformat(value)
    except ValueError as exc:
        raise _Problem(
            400, "invalid_parameter", "Invalid parameter", "since: not an ISO 8601 time", field="since"
        ) from exc
    return since if since.tzinfo is not None else since.replace(tzinfo=UTC)


class BankFake:
    """The fake's state: incoming wires in arrival order (each with its sequence number), bounded."""

    def __init__(self, settings: BankFakeSettings) -> None:
        self.settings = settings
        self._signers = [Webhook(secret) for secret in settings.signing_secrets]
        self.deliverer = Deliverer(
            name="bank-fake", signer=self._sign, settings=settings, user_agent="bank-fake-webhooks/1.0"
        )
        self.wires: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._seq: dict[str, int] = {}
        self._next_seq = 1
        self._idempotent: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def _sign(self, notification: Notification, timestamp: int) -> Mapping[str, str]:
        at = datetime.fromtimestamp(timestamp, tz=UTC)
        body = notification.body.decode()
        signatures = " ".join(s.sign(notification.event_id, at, body) for s in self._signers)
        return {
            "webhook-id": notification.event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures,
        }

    def notify(self, event_type: str, data: Mapping[str, Any], *, url: str | None = None) -> str:
        """Send one Standard Webhooks notification ``{"type", "timestamp", "data"}`` (to ``url``,
        else the configured webhook URL); its ``msg_…`` id, which every retry keeps."""
        message_id = random_id("msg_")
        body = json.dumps({"type": event_type, "timestamp": iso_now(), "data": dict(data)}).encode()
        self.deliverer.submit([Notification(message_id, event_type, url or self.settings.webhook_url, body)])
        return message_id

    def receive_wire(self, request: _WireRequest, idempotency_key: str | None) -> dict[str, Any]:
        fingerprint = request.model_dump_json()
        if idempotency_key is not None and idempotency_key in self._idempotent:
            seen, wire_id = self._idempotent[idempotency_key]
            if seen != fingerprint:
                raise _Problem(
                    409,
                    "idempotency_conflict",
                    "Idempotency key reused",
                    "Idempotency-Key: used before with other parameters",
                )
            if wire_id in self.wires:
                return self.wires[wire_id]
        sender_iban = _iban(request.sender_iban, "sender_iban")
        receiver_iban = (
            _iban(request.receiver_iban, "receiver_iban")
            if request.receiver_iban
            else self.settings.receiver_iban
        )
        tckn = _tckn(request.sender_tckn) if request.sender_tckn else None
        wire: dict[str, Any] = {
            "id": random_id("wire_"),
            "status": "received",
            "amount_minor": request.amount_minor,
            "currency": request.currency.upper(),
            "sender_name": request.sender_name,
            "sender_iban": sender_iban,
            "sender_tckn": tckn,
            "reference": request.reference,
            "receiver_iban": receiver_iban,
            "received_at": iso_now(),
        }
        self.wires[wire["id"]] = wire
        self._seq[wire["id"]] = self._next_seq
        self._next_seq += 1
        while len(self.wires) > self.settings.max_kept:
            old, _ = self.wires.popitem(last=False)
            del self._seq[old]
        if idempotency_key is not None:
            self._idempotent[idempotency_key] = (fingerprint, wire["id"])
            while len(self._idempotent) > self.settings.max_kept:
                self._idempotent.popitem(last=False)
        message_id = self.notify(INCOMING_WIRE_RECEIVED, wire)
        log.info(
            "incoming wire",
            wire=wire["id"],
            amount_minor=wire["amount_minor"],
            currency=wire["currency"],
            message_id=message_id,
        )
        return wire

    def list_wires(self, query: Mapping[str, str]) -> dict[str, Any]:
        try:
            limit = int(query.get("limit", "100"))
        except ValueError as exc:
            raise _Problem(
                400, "invalid_parameter", "Invalid parameter", "limit: not an integer", field="limit"
            ) from exc
        if not 1 <= limit <= 500:
            raise _Problem(400, "invalid_parameter", "Invalid parameter", "limit: 1 to 500", field="limit")
        since = _parse_since(query["since"]) if "since" in query else None
        after = _decode_cursor(query["cursor"]) if "cursor" in query else 0
        page: list[dict[str, Any]] = []
        has_more = False
        for wire_id, wire in self.wires.items():
            if self._seq[wire_id] <= after:
                continue
            if since is not None and datetime.fromisoformat(wire["received_at"]) < since:
                continue
            if len(page) == limit:
                has_more = True
                break
            page.append(wire)
        next_cursor = _encode_cursor(self._seq[page[-1]["id"]]) if has_more else None
        return {"data": page, "next_cursor": next_cursor}


def create_bank_fake_app(settings: BankFakeSettings | None = None) -> FastAPI:
    """The app; ``app.state.fake`` is its :class:`BankFake` (tests read it)."""
    settings = settings or get_bank_fake_settings()
    fake = BankFake(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await fake.deliverer.start()
        log.info("bank-fake started", webhook_url=settings.webhook_url, secrets=len(settings.signing_secrets))
        try:
            yield
        finally:
            await fake.deliverer.close()

    app = FastAPI(title="bank-fake", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.fake = fake
    app.include_router(control_router(lambda: fake.deliverer))

    @app.exception_handler(_Problem)
    async def problem(_: Request, exc: _Problem) -> JSONResponse:
        return JSONResponse(exc.body, status_code=exc.status, media_type=PROBLEM_JSON)

    def require_key(request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), settings.api_key.encode()
        ):
            raise _Problem(401, "unauthorized", "Unauthorized", "a valid bearer API key is required")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/topups")
    async def receive_wire(request: Request) -> dict[str, Any]:
        require_key(request)
        body = await request.body()
        if len(body) > settings.max_body_bytes:
            raise _Problem(413, "too_large", "Request too large", f"at most {settings.max_body_bytes} bytes")
        try:
            fields = json.loads(body)
        except ValueError as exc:
            raise _Problem(400, "invalid_json", "Invalid JSON", "the body is not JSON") from exc
        try:
            wire = _WireRequest.model_validate(fields)
        except ValidationError as exc:
            errors = [
                {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
            ]
            raise _Problem(
                400, "invalid_request", "Invalid request", "the request has invalid fields", errors=errors
            ) from exc
        key = request.headers.get("idempotency-key")
        if key is not None and len(key) > 255:
            raise _Problem(400, "invalid_parameter", "Invalid parameter", "Idempotency-Key: too long")
        return fake.receive_wire(wire, key)

    @app.get("/v1/incoming-wires")
    async def list_wires(request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.list_wires(request.query_params)

    @app.get("/v1/incoming-wires/{wire_id}")
    async def get_wire(wire_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        wire = fake.wires.get(wire_id)
        if wire is None:
            raise _Problem(404, "not_found", "Not found", f"no incoming wire {wire_id}")
        return wire

    return app


@lru_cache(maxsize=1)
def get_bank_fake_settings() -> BankFakeSettings:
    return BankFakeSettings()


def run_bank_fake(port: int | None, host: str) -> None:
    """Serve bank-fake (the process entry point; the caller has set up logging)."""
    settings = get_bank_fake_settings()
    uvicorn.run(
        create_bank_fake_app(settings),
        host=host,
        port=port or settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
