"""sms-fake: an SMS provider's API (port 8095) that sends nothing and keeps what it was asked to
send, for tests to read.

``POST /v1/sms`` ``{"to": "+905321234567", "body": "…", "from": "HIWALLET"}`` with a bearer API
key (as bank-fake's) → 202 ``{"id": "sms_…", "status": "queued", …}``: accepted, as a real
provider answers before the operator delivers. ``to`` must be E.164 (``+``, country code, at
most 15 digits); ``body`` 1 to ``max_body_chars`` characters. An ``Idempotency-Key`` header makes
a retry answer the first message (``Idempotent-Replayed: true``) instead of sending it twice.

``GET /v1/sms?to=&limit=`` lists what it "sent", the newest first (``{"data": [...]}``), for
tests; ``DELETE /v1/sms`` forgets everything. Memory is bounded: at most ``max_messages``, the
oldest forgotten first.

Refusals are ``application/problem+json`` (RFC 9457) with a machine ``code`` and the ``field``;
never the refused value (a phone number is personal data), and the log never has the number or
the text.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from collections import OrderedDict
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.fakes.serving import serve

__all__ = ["SmsFake", "SmsFakeSettings", "create_sms_fake_app", "get_sms_fake_settings", "run_sms_fake"]

log = structlog.get_logger("hiwallet.fakes.sms")

PROBLEM_JSON = "application/problem+json"
# E.164: a plus, a country code that does not start with 0, at most 15 digits in all (at least
# 8: no country's full numbers are shorter).
E164 = re.compile(r"^\+[1-9][0-9]{7,14}$")
# An alphanumeric sender id: up to 11 letters, digits and spaces (the GSM limit).
SENDER_ID = re.compile(r"^[A-Za-z0-9 ]{1,11}$")
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


class SmsFakeSettings(BaseSettings):
    """``SMS_FAKE_*``."""

    model_config = SettingsConfigDict(env_prefix="SMS_FAKE_", extra="ignore")

    port: int = 8095
    api_key: str = "sms_dev_key"
    default_sender: str = "HIWALLET"
    max_messages: int = Field(default=10_000, ge=1, le=1_000_000)
    # 10 concatenated GSM-7 segments of 153 characters: longer texts are refused, as providers do.
    max_body_chars: int = Field(default=1530, ge=1, le=10_000)
    max_request_bytes: int = Field(default=16_384, ge=256, le=1_048_576)


class _Problem(Exception):
    def __init__(self, status: int, code: str, title: str, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.body: dict[str, Any] = {
            "type": f"https://sms-fake.invalid/problems/{code.replace('_', '-')}",
            "title": title,
            "status": status,
            "detail": detail,
            "code": code,
        }
        if field is not None:
            self.body["field"] = field


class _SmsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    to: str
    body: str = Field(min_length=1)
    sender: str | None = Field(default=None, alias="from")


class SmsFake:
    """What it "sent", oldest first, at most ``max_messages``; and the answers to idempotency keys."""

    def __init__(self, settings: SmsFakeSettings) -> None:
        self.settings = settings
        self.messages: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._by_key: OrderedDict[str, tuple[dict[str, Any], str]] = OrderedDict()

    def send(self, request: _SmsRequest, key: str | None) -> tuple[dict[str, Any], bool]:
        fingerprint = json.dumps(request.model_dump(by_alias=True), sort_keys=True)
        if key is not None and key in self._by_key:
            first, first_fingerprint = self._by_key[key]
            if first_fingerprint != fingerprint:
                raise _Problem(
                    422,
                    "idempotency_key_reused",
                    "Idempotency-Key reused",
                    "this Idempotency-Key was used for another message",
                    field="Idempotency-Key",
                )
            return first, True
        if not E164.fullmatch(request.to):
            raise _Problem(
                422,
                "invalid_phone_number",
                "Invalid phone number",
                "to: an E.164 number (+, the country code, the number; at most 15 digits)",
                field="to",
            )
        if len(request.body) > self.settings.max_body_chars:
            raise _Problem(
                422,
                "body_too_long",
                "Body too long",
                f"body: at most {self.settings.max_body_chars} characters",
                field="body",
            )
        sender = request.sender or self.settings.default_sender
        if not SENDER_ID.fullmatch(sender) and not E164.fullmatch(sender):
            raise _Problem(
                422,
                "invalid_sender",
                "Invalid sender",
                "from: up to 11 letters and digits, or E.164",
                field="from",
            )
        message = {
            "id": f"sms_{secrets.token_hex(12)}",
            "status": "queued",
            "to": request.to,
            "from": sender,
            "body": request.body,
            "created_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        self.messages[message["id"]] = message
        while len(self.messages) > self.settings.max_messages:
            self.messages.popitem(last=False)
        if key is not None:
            self._by_key[key] = (message, fingerprint)
            while len(self._by_key) > self.settings.max_messages:
                self._by_key.popitem(last=False)
        log.info("sms accepted", id=message["id"], chars=len(request.body))
        return message, False

    def forget(self) -> None:
        self.messages.clear()
        self._by_key.clear()

    def listing(self, to: str | None, limit: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for message in reversed(self.messages.values()):
            if to is None or message["to"] == to:
                found.append(message)
                if len(found) == limit:
                    break
        return found


def _sms_request(body: bytes, max_bytes: int) -> _SmsRequest:
    if len(body) > max_bytes:
        raise _Problem(413, "too_large", "Request too large", f"at most {max_bytes} bytes")
    try:
        fields = json.loads(body)
    except ValueError as exc:
        raise _Problem(400, "invalid_json", "Invalid JSON", "the body is not JSON") from exc
    try:
        return _SmsRequest.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise _Problem(
            422, "invalid_request", "Invalid request", f"{field}: {first['msg']}", field=field
        ) from exc


def create_sms_fake_app(settings: SmsFakeSettings | None = None) -> FastAPI:
    """The app; ``app.state.fake`` is its :class:`SmsFake` (tests read it)."""
    settings = settings or get_sms_fake_settings()
    fake = SmsFake(settings)
    app = FastAPI(title="sms-fake", docs_url=None, redoc_url=None)
    app.state.fake = fake

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

    @app.post("/v1/sms", status_code=202)
    async def send(request: Request, response: Response) -> dict[str, Any]:
        require_key(request)
        key = request.headers.get("idempotency-key")
        if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise _Problem(
                400,
                "invalid_parameter",
                "Invalid parameter",
                "Idempotency-Key: 1 to 255 visible ASCII characters",
                field="Idempotency-Key",
            )
        message, replayed = fake.send(_sms_request(await request.body(), settings.max_request_bytes), key)
        response.headers["Location"] = f"/v1/sms/{message['id']}"
        if replayed:
            response.headers["Idempotent-Replayed"] = "true"
        return message

    @app.get("/v1/sms")
    async def listing(request: Request) -> dict[str, Any]:
        require_key(request)
        to = request.query_params.get("to")
        try:
            limit = int(request.query_params.get("limit", "100"))
        except ValueError as exc:
            raise _Problem(
                400, "invalid_parameter", "Invalid parameter", "limit: an integer", field="limit"
            ) from exc
        if not 1 <= limit <= 1000:
            raise _Problem(400, "invalid_parameter", "Invalid parameter", "limit: 1 to 1000", field="limit")
        return {"data": fake.listing(to, limit)}

    @app.get("/v1/sms/{message_id}")
    async def one(message_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        message = fake.messages.get(message_id)
        if message is None:
            raise _Problem(404, "not_found", "Not found", f"no message {message_id}")
        return message

    @app.delete("/v1/sms", status_code=204)
    async def forget(request: Request) -> None:
        require_key(request)
        fake.forget()

    return app


@lru_cache(maxsize=1)
def get_sms_fake_settings() -> SmsFakeSettings:
    return SmsFakeSettings()


def run_sms_fake(port: int | None, host: str) -> None:
    """Serve sms-fake (the process entry point; the caller has set up logging)."""
    settings = get_sms_fake_settings()
    serve(create_sms_fake_app(settings), host, port or settings.port)
