"""wallet-api's routes of the merchants' webhooks (docs/webhooks.md): endpoints and deliveries.
They only translate between HTTP and :class:`hiwallet.wallet_api.webhooks.Webhooks`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from hiwallet.contracts.webhook_api import (
    DELIVERY_ID_PATTERN,
    ENDPOINT_ID_PATTERN,
    DeliveriesOut,
    DeliveryDetailOut,
    DeliveryOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
    EndpointsOut,
    EndpointWithSecretOut,
    EventType,
)
from hiwallet.wallet_api.routes import _COMMON, CallerDep, ServiceDep

__all__ = ["webhook_router"]

webhook_router = APIRouter(prefix="/v1", responses=_COMMON, tags=["webhooks"])

EndpointIdPath = Annotated[str, Path(json_schema_extra={"pattern": ENDPOINT_ID_PATTERN})]
DeliveryIdPath = Annotated[str, Path(json_schema_extra={"pattern": DELIVERY_ID_PATTERN})]


@webhook_router.post("/webhook-endpoints", response_model=EndpointWithSecretOut, status_code=201)
async def create_endpoint(body: EndpointIn, who: CallerDep, svc: ServiceDep) -> JSONResponse:
    """Register an endpoint of a business the caller is a member of. The answer holds the
    signing secret, shown this once."""
    view = await svc.webhooks.create(who, body.account_id, body.url, body.event_types, body.description)
    return JSONResponse(view, status_code=201)


@webhook_router.get("/webhook-endpoints", response_model=EndpointsOut)
async def list_endpoints(who: CallerDep, svc: ServiceDep) -> Any:
    """The endpoints of every business the caller is a member of."""
    return {"endpoints": await svc.webhooks.endpoints(who)}


@webhook_router.get("/webhook-endpoints/{endpoint_id}", response_model=EndpointOut)
async def get_endpoint(endpoint_id: EndpointIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    return await svc.webhooks.endpoint(who, endpoint_id)


@webhook_router.patch("/webhook-endpoints/{endpoint_id}", response_model=EndpointOut)
async def change_endpoint(
    endpoint_id: EndpointIdPath, body: EndpointPatch, who: CallerDep, svc: ServiceDep
) -> Any:
    """Change the URL, the event types, the description, or enable and disable it. Enabling an
    endpoint disabled for failing starts it afresh; its pending deliveries are sent again."""
    changes = body.model_dump(exclude_unset=True)
    for name in ("url", "event_types", "enabled"):
        if name in changes and changes[name] is None:
            del changes[name]  # null is "unchanged" for what cannot be empty
    return await svc.webhooks.change(who, endpoint_id, changes)


@webhook_router.delete("/webhook-endpoints/{endpoint_id}", status_code=204, response_class=Response)
async def delete_endpoint(endpoint_id: EndpointIdPath, who: CallerDep, svc: ServiceDep) -> Response:
    """The endpoint and its deliveries are gone; its events stay (other endpoints')."""
    await svc.webhooks.delete(who, endpoint_id)
    return Response(status_code=204)


@webhook_router.post("/webhook-endpoints/{endpoint_id}/rotate-secret", response_model=EndpointWithSecretOut)
async def rotate_secret(endpoint_id: EndpointIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    """A new signing secret, shown this once. The previous one signs too until
    ``previous_secret_until`` (both signatures in ``webhook-signature``)."""
    return await svc.webhooks.rotate(who, endpoint_id)


@webhook_router.get("/webhook-deliveries", response_model=DeliveriesOut)
async def list_deliveries(
    who: CallerDep,
    svc: ServiceDep,
    endpoint: Annotated[str | None, Query(max_length=64)] = None,
    event_type: EventType | Literal["endpoint.disabled"] | None = None,
    status: Literal["pending", "delivered", "failed"] | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> Any:
    """The deliveries of the caller's endpoints, newest first; ``next_cursor`` continues."""
    return await svc.webhooks.deliveries(
        who, endpoint=endpoint, event_type=event_type, status=status, cursor=cursor, limit=limit
    )


@webhook_router.get("/webhook-deliveries/{delivery_id}", response_model=DeliveryDetailOut)
async def get_delivery(delivery_id: DeliveryIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    """A delivery, its event and every attempt."""
    return await svc.webhooks.delivery(who, delivery_id)


@webhook_router.post("/webhook-deliveries/{delivery_id}/replay", response_model=DeliveryOut, status_code=202)
async def replay_delivery(
    delivery_id: DeliveryIdPath, request: Request, who: CallerDep, svc: ServiceDep
) -> Any:
    """Send it again (new attempts, the same ``webhook-id``), as soon as its endpoint is enabled
    and no earlier delivery of its resource is pending."""
    view = await svc.webhooks.replay(who, delivery_id, svc.events_hint)
    return JSONResponse(view, status_code=202)
