"""The merchants' webhook endpoints and deliveries as HTTP shows them (docs/webhooks.md): what
wallet-api takes and answers, and business-api forwards (the same shapes in both documents)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from hiwallet.contracts.merchant_events import EVENT_TYPES
from hiwallet.contracts.public import ACCOUNT_ID_PATTERN
from hiwallet.core.text import PrintableText

__all__ = [
    "DELIVERY_ID_PATTERN",
    "ENDPOINT_ID_PATTERN",
    "AttemptOut",
    "DeliveriesOut",
    "DeliveryDetailOut",
    "DeliveryOut",
    "EndpointIn",
    "EndpointOut",
    "EndpointPatch",
    "EndpointWithSecretOut",
    "EndpointsOut",
    "EventOut",
    "EventType",
]

EventType = Literal[
    "payment.received", "payment.refunded", "withdrawal.completed", "withdrawal.failed", "promo.granted"
]
if set(EventType.__args__) != set(EVENT_TYPES):  # type: ignore[attr-defined]
    raise RuntimeError("the webhook API's event types differ from contracts.merchant_events'")
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
ENDPOINT_ID_PATTERN = r"^[0-9]{4}:we:[0-9a-f-]{36}$"
DELIVERY_ID_PATTERN = r"^[0-9]{4}:wd:[0-9a-f-]{36}$"


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
