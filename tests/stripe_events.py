"""Stripe-shaped events of one card payment, as stripe-fake sends them (CONTRACT-10), for the
tests that post a notification themselves (tests/topup_webhook, tests/e2e)."""

from __future__ import annotations

import time
import uuid
from typing import Any


def stripe_event(
    event_type: str,
    payment_intent: str,
    wallet: str | None,
    amount: int,
    currency: str = "try",
    *,
    created: int | None = None,
) -> dict[str, Any]:
    """A Stripe-shaped event of one card payment, as stripe-fake sends (CONTRACT-10): the
    checkout session's for ``checkout.session.completed``, the payment intent's otherwise."""
    created = int(time.time()) if created is None else created
    metadata = {"wallet": wallet} if wallet else {}
    if event_type == "checkout.session.completed":
        obj: dict[str, Any] = {
            "id": f"cs_{uuid.uuid4().hex[:24]}",
            "object": "checkout.session",
            "payment_intent": payment_intent,
            "amount_total": amount,
            "currency": currency,
            "payment_status": "paid",
            "metadata": metadata,
        }
    else:
        obj = {
            "id": payment_intent,
            "object": "payment_intent",
            "status": "succeeded",
            "amount": amount,
            "amount_received": amount,
            "currency": currency,
            "metadata": metadata,
            "created": created,
        }
    return {
        "id": f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "livemode": False,
        "pending_webhooks": 1,
        "type": event_type,
        "data": {"object": obj},
    }
