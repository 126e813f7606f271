"""The merchants' webhook endpoints and deliveries (docs/webhooks.md), forwarded to wallet-api,
which keeps them (and merchant-webhooks delivers): register an endpoint (its signing secret is
in the answer, once), list, change, disable, delete, rotate the secret; list the deliveries,
read one with its attempts, replay it. The shapes are contracts.webhook_api's, as wallet-api's.

| here | behind (wallet-api) |
|---|---|
| POST, GET /v1/webhook-endpoints | the same |
| GET, PATCH, DELETE /v1/webhook-endpoints/{endpoint_id} | the same |
| POST /v1/webhook-endpoints/{endpoint_id}/rotate-secret | the same |
| GET /v1/webhook-deliveries?endpoint=&event_type=&status=&cursor=&limit= | the same |
| GET /v1/webhook-deliveries/{delivery_id}, POST …/replay | the same |
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from hiwallet.contracts.merchant_events import ENDPOINT_DISABLED, EVENT_TYPES
from hiwallet.contracts.webhook_api import (
    DELIVERY_ID_PATTERN,
    ENDPOINT_ID_PATTERN,
    DeliveriesOut,
    DeliveryDetailOut,
    DeliveryOut,
    EndpointOut,
    EndpointsOut,
    EndpointWithSecretOut,
)
from hiwallet.core.edge import door, query, segment
from hiwallet.core.edge.document import answers, operation, path_param, query_param
from hiwallet.core.http import LeanRoute

__all__ = ["router"]

WALLET = "wallet-api"
_READ = answers(401, 403, 404, 429, 503)
_WRITE = answers(400, 401, 403, 404, 409, 413, 422, 429, 503)
_endpoint = path_param("endpoint_id", ENDPOINT_ID_PATTERN)
_delivery = path_param("delivery_id", DELIVERY_ID_PATTERN)
_EVENT_TYPES = [*EVENT_TYPES, ENDPOINT_DISABLED]

router = APIRouter(route_class=LeanRoute)


def _endpoint_path(request: Request, rest: str = "") -> str:
    return f"/v1/webhook-endpoints/{segment(request, 'endpoint_id')}{rest}"


def _delivery_path(request: Request, rest: str = "") -> str:
    return f"/v1/webhook-deliveries/{segment(request, 'delivery_id')}{rest}"


@router.post(
    "/v1/webhook-endpoints",
    status_code=201,
    response_model=EndpointWithSecretOut,
    responses=_WRITE,
    openapi_extra=operation(body="EndpointIn"),
    tags=["webhooks"],
)
async def create_endpoint(request: Request) -> Response:
    """Register an endpoint of one of the business's accounts: its URL (http or https, a public
    address), the events it wants. The answer holds its signing secret, shown this once."""
    return await door(request).forward(request, WALLET, "/v1/webhook-endpoints")


@router.get(
    "/v1/webhook-endpoints",
    response_model=EndpointsOut,
    responses=_READ,
    openapi_extra=operation(),
    tags=["webhooks"],
)
async def list_endpoints(request: Request) -> Response:
    return await door(request).forward(request, WALLET, "/v1/webhook-endpoints")


@router.get(
    "/v1/webhook-endpoints/{endpoint_id}",
    response_model=EndpointOut,
    responses=_READ,
    openapi_extra=operation(parameters=[_endpoint]),
    tags=["webhooks"],
)
async def get_endpoint(request: Request) -> Response:
    return await door(request).forward(request, WALLET, _endpoint_path(request))


@router.patch(
    "/v1/webhook-endpoints/{endpoint_id}",
    response_model=EndpointOut,
    responses=_WRITE,
    openapi_extra=operation(parameters=[_endpoint], body="EndpointPatch"),
    tags=["webhooks"],
)
async def change_endpoint(request: Request) -> Response:
    """Change its URL, events or description, or disable (``enabled: false``) and enable it."""
    return await door(request).forward(request, WALLET, _endpoint_path(request))


@router.delete(
    "/v1/webhook-endpoints/{endpoint_id}",
    status_code=204,
    response_class=Response,
    responses=_READ,
    openapi_extra=operation(parameters=[_endpoint]),
    tags=["webhooks"],
)
async def delete_endpoint(request: Request) -> Response:
    return await door(request).forward(request, WALLET, _endpoint_path(request))


@router.post(
    "/v1/webhook-endpoints/{endpoint_id}/rotate-secret",
    response_model=EndpointWithSecretOut,
    responses=_WRITE,
    openapi_extra=operation(parameters=[_endpoint]),
    tags=["webhooks"],
)
async def rotate_secret(request: Request) -> Response:
    """A new signing secret (in the answer, once); the previous one signs too until
    ``previous_secret_until``, so a receiver can switch without missing a delivery."""
    return await door(request).forward(request, WALLET, _endpoint_path(request, "/rotate-secret"))


@router.get(
    "/v1/webhook-deliveries",
    response_model=DeliveriesOut,
    responses=answers(401, 403, 404, 422, 429, 503),
    openapi_extra=operation(
        parameters=[
            query_param("endpoint", {"type": "string", "maxLength": 64}),
            query_param("event_type", {"type": "string", "enum": _EVENT_TYPES}),
            query_param("status", {"type": "string", "enum": ["pending", "delivered", "failed"]}),
            query_param("cursor", {"type": "string", "maxLength": 200}),
            query_param("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 50}),
        ]
    ),
    tags=["webhooks"],
)
async def list_deliveries(request: Request) -> Response:
    """The deliveries to the business's endpoints, newest first; ``next_cursor`` continues."""
    params = query(request, "endpoint", "event_type", "status", "cursor", "limit")
    return await door(request).forward(request, WALLET, "/v1/webhook-deliveries", params=params)


@router.get(
    "/v1/webhook-deliveries/{delivery_id}",
    response_model=DeliveryDetailOut,
    responses=_READ,
    openapi_extra=operation(parameters=[_delivery]),
    tags=["webhooks"],
)
async def get_delivery(request: Request) -> Response:
    """A delivery, its event and every attempt."""
    return await door(request).forward(request, WALLET, _delivery_path(request))


@router.post(
    "/v1/webhook-deliveries/{delivery_id}/replay",
    status_code=202,
    response_model=DeliveryOut,
    responses=_WRITE,
    openapi_extra=operation(parameters=[_delivery]),
    tags=["webhooks"],
)
async def replay_delivery(request: Request) -> Response:
    """Send it again: new attempts, the same ``webhook-id`` (a receiver deduplicates by it)."""
    return await door(request).forward(request, WALLET, _delivery_path(request, "/replay"))
