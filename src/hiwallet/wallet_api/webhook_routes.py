"""wallet-api's routes of the merchants' webhooks (docs/webhooks.md): endpoints and deliveries.
They only translate between HTTP and :class:`hiwallet.wallet_api.webhooks.Webhooks`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from hiwallet.contracts.merchant_events import EVENT_TYPES
from hiwallet.core.text import PrintableText
from hiwallet.wallet_api.domain import ACCOUNT_ID_PATTERN
from hiwallet.wallet_api.routes import _COMMON, CallerDep, ServiceDep

__all__ = ["webhook_router"]

EventType = Literal[
    "payment.received", "payment.refunded", "withdrawal.completed", "withdrawal.failed", "promo.granted"
]
assert set(EventType.__args__) == set(EVENT_TYPES)  # type: ignore[attr-defined]
EventTypes = Annotated[list[EventType], Field(min_length=1, max_length=16)]
# No space or control character (the SSRF check refuses them too; the document says it).
Url = Annotated[
    StrictStr,
    Field(
        min_length=1,
        max_length=2048,
        pattern=r"^[^\x00-\x20\x7f-\x9f]+$",
        description="http(s); a public address",
    ),
]
Description = Annotated[PrintableText, Field(min_length=1, max_length=200)]
_ENDPOINT_ID = r"^[0-9]{4}:we:[0-9a-f-]{36}$"
_DELIVERY_ID = r"^[0-9]{4}:wd:[0-9a-f-]{36}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EndpointIn(_In):
    account_id: Annotated[StrictStr, Field(pattern=ACCOUNT_ID_PATTERN)] = Field(
        description="The business account whose events the endpoint receives (the caller is its member)."
    )
    url: Url
    event_types: EventTypes
    description: Description | None = None


class EndpointPatch(_In):
    url: Url | None = None
    event_types: EventTypes | None = None
    description: Description | None = None
    enabled: StrictBool | None = None


class EndpointOut(BaseModel):
    id: str
    account_id: str
    url: str
    event_types: list[str]
    description: str | None
    enabled: bool
    disabled_reason: Literal["member", "failing"] | None = Field(
        description="member: a member disabled it; failing: every attempt failed for the configured time"
    )
    disabled_at: str | None
    failing_since: str | None
    previous_secret_until: str | None = Field(description="Until then the previous secret signs too")
    created_at: str
    updated_at: str


class EndpointWithSecretOut(EndpointOut):
    secret: str = Field(description="whsec_…: shown once; sign-checks every delivery (Standard Webhooks)")


class EndpointsOut(BaseModel):
    endpoints: list[EndpointOut]


class DeliveryOut(BaseModel):
    id: str
    endpoint_id: str
    event_id: str = Field(description="The webhook-id header: the same on every attempt and replay")
    event_type: str
    resource_id: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: str | None
    last_status_code: int | None
    last_error: str | None
    created_at: str
    delivered_at: str | None


class AttemptOut(BaseModel):
    attempted_at: str
    status_code: int | None
    error: str | None
    duration_ms: int


class EventOut(BaseModel):
    type: str
    timestamp: str
    data: dict[str, Any]


class DeliveryDetailOut(DeliveryOut):
    event: EventOut
    attempt_log: list[AttemptOut]


class DeliveriesOut(BaseModel):
    deliveries: list[DeliveryOut]
    next_cursor: str | None


webhook_router = APIRouter(prefix="/v1", responses=_COMMON, tags=["webhooks"])

EndpointIdPath = Annotated[str, Path(json_schema_extra={"pattern": _ENDPOINT_ID})]
DeliveryIdPath = Annotated[str, Path(json_schema_extra={"pattern": _DELIVERY_ID})]


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
