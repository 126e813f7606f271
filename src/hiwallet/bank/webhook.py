"""The bank-webhook process (port 8021): ``POST /v1/webhooks/bank``, the bank's signed callbacks
of our transfers' outcomes. The body is read raw (bounded by ``max_body_bytes``), verified over
those bytes (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature; core.webhooks,
the verifier topup-webhook uses too: constant-time, every configured secret, a tolerance either
way), and only then parsed. A verified callback is kept in one transaction
(bank.receive_callback): the inbox row (a webhook id seen before: 202, nothing new), the outcome
recorded on the transfer it names (once per transfer) and its announcement in bank.outbox.
Forged, stale or altered: 400 problem, nothing stored. Concurrent verified callbacks share that
transaction and its commit (bank.receive_callbacks, BankStore's coalescer: the transfers' locks
taken first in one order), each kept as alone, each request answered for its own callback, and
only once the commit holding it is done.

No broker connection: after each commit a RelayHint wakes bank-adapter's relay (one pg_notify
in a transaction of its own, coalesced; core.outbox).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from hiwallet.bank import errors
from hiwallet.bank.metrics import WebhookMetrics
from hiwallet.bank.pool import database_spec
from hiwallet.bank.settings import (
    BankSettings,
    BankWebhookSettings,
    get_bank_settings,
    get_bank_webhook_settings,
)
from hiwallet.bank.store import OUTBOX_CHANNEL, BankStore, Received, StoreUnavailable, Unstorable
from hiwallet.core.http import ClientNetworks, LeanRoute, serve, settle_heap_once_started
from hiwallet.core.logging import configure_logging
from hiwallet.core.relay_hint import RelayHint
from hiwallet.core.service import Runtime, ServiceSpec, build_app
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.core.text import has_control_characters
from hiwallet.core.webhooks import StandardWebhookSignature, VerificationFailed

log = structlog.get_logger(__name__)

SERVICE = "bank-webhook"
PATH = "/v1/webhooks/bank"
OUTCOME_TYPES = frozenset({"transfer.succeeded", "transfer.failed"})
_REFERENCE = re.compile(r"[A-Za-z0-9:_.\-|]{1,200}")
MAX_TYPE_CHARS = 255
MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class Callback:
    webhook_id: str
    type: str
    bank_reference: str | None
    failure_reason: str | None
    body: str  # the JSON text as the bank sent it (stored as jsonb)


def read_callback(body: bytes, webhook_id: str) -> Callback:
    """A verified body as a callback: {type, data: {reference, failure_reason?, …}}.
    :class:`errors.CallbackUnreadable` when it is not one."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise errors.CallbackUnreadable("the body is not JSON") from exc
    if not isinstance(document, dict):
        raise errors.CallbackUnreadable("the body is not a JSON object")
    kind = document.get("type")
    if not isinstance(kind, str) or not 0 < len(kind) <= MAX_TYPE_CHARS or has_control_characters(kind):
        raise errors.CallbackUnreadable("the callback has no type")
    data = document.get("data")
    reference = data.get("reference") if isinstance(data, dict) else None
    reason = data.get("failure_reason") if isinstance(data, dict) else None
    if not isinstance(reference, str) or not _REFERENCE.fullmatch(reference):
        reference = None
    if kind in OUTCOME_TYPES and reference is None:
        raise errors.CallbackUnreadable("a transfer outcome names no reference")
    reason = reason[:MAX_REASON_CHARS] if isinstance(reason, str) and reason else None
    return Callback(webhook_id, kind, reference, reason, body.decode())


class BankWebhookService:
    def __init__(self, store: BankStore, verifier: StandardWebhookSignature, metrics: WebhookMetrics) -> None:
        self.store = store
        self.verifier = verifier
        self.metrics = metrics

    async def receive(self, body: bytes, headers: Mapping[str, str]) -> Received:
        try:
            verified = self.verifier.verify(body, headers)
        except VerificationFailed as exc:
            self.metrics.callbacks.labels("refused").inc()
            # the reason only; never the body or a header's value
            log.warning("bank callback refused", reason=exc.reason, body_bytes=len(body))
            raise errors.SignatureRefused(f"refused: {exc.reason}", reason=exc.reason) from exc
        if verified.message_id is None:  # Standard Webhooks always has one; kept for mypy
            raise errors.SignatureRefused("refused: malformed-signature", reason="malformed-signature")
        try:
            callback = read_callback(body, verified.message_id)
        except errors.CallbackUnreadable as exc:
            self.metrics.callbacks.labels("unreadable").inc()
            log.warning("bank callback unreadable", reason=exc.detail, body_bytes=len(body))
            raise
        try:
            outcome = await self.store.receive_callback(
                callback.webhook_id,
                callback.type,
                callback.bank_reference,
                callback.body,
                callback.failure_reason,
            )
        except Unstorable as exc:
            self.metrics.callbacks.labels("unreadable").inc()
            raise errors.CallbackUnreadable("the callback cannot be stored as JSON") from exc
        except StoreUnavailable as exc:
            self.metrics.callbacks.labels("unavailable").inc()
            raise errors.Unavailable(
                "the callback could not be stored; send it again", headers={"Retry-After": "5"}
            ) from exc
        self.metrics.callbacks.labels(outcome.value).inc()
        log.info(
            "bank callback kept",
            webhook_id=callback.webhook_id,
            type=callback.type,
            bank_reference=callback.bank_reference,
            outcome=outcome.value,
        )
        return outcome


_PROBLEM: dict[str, Any] = {"content": {"application/problem+json": {}}}
_ANSWERS: dict[int | str, dict[str, Any]] = {
    202: {"description": "Verified and kept (or kept before: a repeat stores nothing new)"},
    400: {**_PROBLEM, "description": "Unsigned, forged, stale or altered: nothing is stored"},
    413: {**_PROBLEM, "description": "The body is larger than the limit"},
    422: {**_PROBLEM, "description": "Verified, but not a bank callback"},
    503: {**_PROBLEM, "description": "Could not be stored now: send it again"},
}

router = APIRouter(route_class=LeanRoute, tags=["webhooks"])


@router.post(
    PATH,
    status_code=202,
    # no body: the document's 202 has no content (FastAPI would declare application/json)
    response_class=Response,
    responses=_ANSWERS,
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {}}}},
)
async def receive_bank_callback(request: Request) -> Response:
    """A transfer's outcome, signed by the bank (Standard Webhooks)."""
    service: BankWebhookService = request.app.state.service
    await service.receive(await request.body(), request.headers)
    return Response(status_code=202)  # the bank needs a status, not a body


def service_spec(
    settings: BankSettings,
    verifier: StandardWebhookSignature,
    webhook_settings: BankWebhookSettings | None = None,
) -> ServiceSpec:
    """bank-webhook, declared: the bank database, no issuers (the bank signs, it has no token),
    no messaging (bank-adapter's relay publishes what it records), and in ``setup`` the store and
    the service."""

    hooks = webhook_settings or get_bank_webhook_settings()

    async def setup(rt: Runtime) -> None:
        app, pool = rt.app, rt.db
        # A recorded outcome wakes bank-adapter's relay: one pg_notify after the commits, in a
        # transaction of its own, coalesced (bank.outbox has no NOTIFY trigger: migration 0003).
        hint = app.state.relay_hint = RelayHint(pool, OUTBOX_CHANNEL)
        rt.close(hint.aclose)
        spare_after_ms = hooks.callback_spare_after_ms
        store = app.state.store = BankStore(
            pool,
            settings.exchange,
            on_committed=hint.committed,
            callback_writers=max(0, hooks.callback_writers),
            callback_max_batch=hooks.callback_max_batch,
            callback_spare_after_s=spare_after_ms / 1000 if spare_after_ms > 0 else None,
        )
        app.state.service = BankWebhookService(store, verifier, app.state.webhook_metrics)

    def metrics(app: FastAPI) -> None:
        app.state.webhook_metrics = WebhookMetrics(app.state.metrics_registry)

    networks = hooks.webhook_networks

    return ServiceSpec(
        SERVICE,
        setup,
        database=database_spec(settings),
        routers=(router,),
        max_body_bytes=settings.max_body_bytes,
        metrics=metrics,
        # the bank's networks only, on its callbacks (the probes and /metrics come from inside)
        client_networks=ClientNetworks.of(networks, (PATH,)),
    )


def create_bank_webhook_app(
    settings: BankSettings | None = None,
    *,
    core_settings: Settings | None = None,
    webhook_settings: BankWebhookSettings | None = None,
) -> FastAPI:
    settings = settings or get_bank_settings()
    # a bad secret stops the start, not the first request
    verifier = StandardWebhookSignature(
        [s.get_secret_value() for s in settings.webhook_secrets], settings.tolerance_s
    )
    return build_app(service_spec(settings, verifier, webhook_settings), settings=core_settings)


def run_bank_webhook(port: int | None, host: str) -> None:
    """Serve bank-webhook (the process entry point)."""
    configure_logging(SERVICE)
    settings, webhook_settings = get_bank_settings(), get_bank_webhook_settings()
    refuse_insecure_start(settings, webhook_settings)
    serve(
        settle_heap_once_started(create_bank_webhook_app(settings, webhook_settings=webhook_settings)),
        host=host,
        port=port or settings.webhook_port,
    )
