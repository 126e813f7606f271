"""``POST /v1/webhooks/topup/{provider}``: one lean route per provider (a LeanRoute declares no
path parameter; and each is a plain match, no parsing). The body is read raw, verified over those
bytes, and only then parsed (service.TopupService.receive)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from hiwallet.core.http import LeanRoute
from hiwallet.core.logging import REQUEST_ID
from hiwallet.topup_webhook.providers import PROVIDERS
from hiwallet.topup_webhook.service import TopupService

_PROBLEM: dict[str, Any] = {"content": {"application/problem+json": {}}}
_ANSWERS: dict[int | str, dict[str, Any]] = {
    202: {"description": "Verified and kept (or kept before: a repeat stores nothing new)"},
    400: {**_PROBLEM, "description": "Unsigned, forged, stale or altered: nothing is stored"},
    413: {**_PROBLEM, "description": "The body is larger than the limit"},
    422: {**_PROBLEM, "description": "Verified, but not a notification (no id or type)"},
    503: {**_PROBLEM, "description": "Could not be stored now: send it again"},
}

lean_router = APIRouter(prefix="/v1/webhooks/topup", route_class=LeanRoute, tags=["webhooks"])


def _endpoint(provider: str) -> Any:
    async def receive(request: Request) -> Response:
        service: TopupService = request.app.state.service
        body = await request.body()
        request_id = REQUEST_ID.get()
        await service.receive(
            provider, body, request.headers, request_id if isinstance(request_id, str) else None
        )
        # the provider needs a status, not a body
        return Response(status_code=202)

    receive.__name__ = f"receive_{provider}"
    receive.__doc__ = f"A {provider} notification (signed as {provider} signs)."
    return receive


for _provider in PROVIDERS:
    lean_router.add_api_route(
        f"/{_provider}",
        _endpoint(_provider),
        methods=["POST"],
        status_code=202,
        # no body: the document's 202 has no content (FastAPI would declare application/json)
        response_class=Response,
        responses=_ANSWERS,
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {}}}},
    )
