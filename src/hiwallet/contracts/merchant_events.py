"""The merchants' webhook events (docs/webhooks.md): what wallet-api and wallet-consumer write
into ``wallet.webhook_events`` in the transaction of a movement, and what merchant-webhooks
delivers. The types, the id of an event (derived from its type and resource, so the same
event written twice is a key violation, and a receiver deduplicates by it), the channel that
wakes the dispatcher, and the development key ring that seals the endpoints' signing secrets
(wallet-api seals, merchant-webhooks opens: both must hold the same ring)."""

from __future__ import annotations

from typing import Final

from hiwallet.core.ids import derived_id

__all__ = [
    "DEV_SECRET_KEYS",
    "ENDPOINT_DISABLED",
    "EVENT_TYPES",
    "NOTIFY_CHANNEL",
    "PAYMENT_RECEIVED",
    "PAYMENT_REFUNDED",
    "PROMO_GRANTED",
    "WITHDRAWAL_COMPLETED",
    "WITHDRAWAL_FAILED",
    "event_id",
    "secret_place",
]

PAYMENT_RECEIVED: Final = "payment.received"
PAYMENT_REFUNDED: Final = "payment.refunded"
WITHDRAWAL_COMPLETED: Final = "withdrawal.completed"
WITHDRAWAL_FAILED: Final = "withdrawal.failed"
PROMO_GRANTED: Final = "promo.granted"
# A notice, not subscribed to: sent to every other enabled endpoint of the business when one is
# disabled for failing.
ENDPOINT_DISABLED: Final = "endpoint.disabled"

# What an endpoint may subscribe to.
EVENT_TYPES: Final = (
    PAYMENT_RECEIVED,
    PAYMENT_REFUNDED,
    WITHDRAWAL_COMPLETED,
    WITHDRAWAL_FAILED,
    PROMO_GRANTED,
)

# pg_notify channel: a writer's commit wakes merchant-webhooks (its poll is the safety net).
NOTIFY_CHANNEL: Final = "hiwallet_merchant_events"

# kid:base64(32 bytes). Ships in this repository: production refuses it (refuse_insecure_start).
DEV_SECRET_KEYS: Final = "dev1:ZGV2LXdlYmhvb2stc2VjcmV0cy1rZXktMzItYnl0ZXM="


def event_id(type_: str, resource_id: str) -> str:
    """The event's id (``webhook-id``): the same for the same type and resource, everywhere."""
    return "evt_" + derived_id("merchant-event", type_, resource_id).replace("-", "")


def secret_place(endpoint_id: str) -> str:
    """The associated data of an endpoint's sealed secrets (the current one and, during a
    rotation, the previous one): a sealed secret opens only for its endpoint."""
    return f"wallet.webhook_endpoints:{endpoint_id}"
