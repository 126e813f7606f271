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

from fastapi import APIRouter
from fastapi.responses import Response

from hiwallet.contracts.front import LISTED, WALLET
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
from hiwallet.core.edge.document import answers, path_param, query_param
from hiwallet.core.edge.routes import Forwarding, reading
from hiwallet.core.http import LeanRoute

__all__ = ["router"]

_WRITE = answers(400, 401, 403, 404, 409, 413, 422, 429, 503)
_EVENT_TYPES = [*EVENT_TYPES, ENDPOINT_DISABLED]

router = APIRouter(route_class=LeanRoute)

_ENDPOINTS = reading("/v1/webhook-endpoints", WALLET, EndpointsOut, "webhooks")
_ENDPOINTS.declare(
    router,
    "create_endpoint",
    method="POST",
    description="Register an endpoint of one of the business's accounts: its URL (http or https, a "
    "public\naddress), the events it wants. The answer holds its signing secret, shown this once.",
    body="EndpointIn",
    status_code=201,
    response_model=EndpointWithSecretOut,
    responses=_WRITE,
)
_ENDPOINTS.declare(router, "list_endpoints")

# One endpoint: the same path behind.
_ENDPOINT = reading(
    "/v1/webhook-endpoints/{endpoint_id}",
    WALLET,
    EndpointOut,
    "webhooks",
    parameters=[path_param("endpoint_id", ENDPOINT_ID_PATTERN)],
)
_ENDPOINT.declare(router, "get_endpoint")
_ENDPOINT.declare(
    router,
    "change_endpoint",
    method="PATCH",
    description="Change its URL, events or description, or disable (``enabled: false``) and enable it.",
    body="EndpointPatch",
    responses=_WRITE,
)
_ENDPOINT.declare(
    router,
    "delete_endpoint",
    method="DELETE",
    status_code=204,
    response_model=None,
    response_class=Response,
)
_ENDPOINT.declare(
    router,
    "rotate_secret",
    method="POST",
    path="/v1/webhook-endpoints/{endpoint_id}/rotate-secret",
    description="A new signing secret (in the answer, once); the previous one signs too until\n"
    "``previous_secret_until``, so a receiver can switch without missing a delivery.",
    response_model=EndpointWithSecretOut,
    responses=_WRITE,
)

Forwarding(
    "GET",
    "/v1/webhook-deliveries",
    WALLET,
    description="The deliveries to the business's endpoints, newest first; ``next_cursor`` continues.",
    params=("endpoint", "event_type", "status", "cursor", "limit"),
    parameters=[
        query_param("endpoint", {"type": "string", "maxLength": 64}),
        query_param("event_type", {"type": "string", "enum": _EVENT_TYPES}),
        query_param("status", {"type": "string", "enum": ["pending", "delivered", "failed"]}),
        query_param("cursor", {"type": "string", "maxLength": 200}),
        query_param("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 50}),
    ],
    route={"response_model": DeliveriesOut, "responses": LISTED, "tags": ["webhooks"]},
).declare(router, "list_deliveries")

# One delivery: the same path behind.
_DELIVERY = reading(
    "/v1/webhook-deliveries/{delivery_id}",
    WALLET,
    DeliveryDetailOut,
    "webhooks",
    description="A delivery, its event and every attempt.",
    parameters=[path_param("delivery_id", DELIVERY_ID_PATTERN)],
)
_DELIVERY.declare(router, "get_delivery")
_DELIVERY.declare(
    router,
    "replay_delivery",
    method="POST",
    path="/v1/webhook-deliveries/{delivery_id}/replay",
    description="Send it again: new attempts, the same ``webhook-id`` (a receiver deduplicates by it).",
    status_code=202,
    response_model=DeliveryOut,
    responses=_WRITE,
)
