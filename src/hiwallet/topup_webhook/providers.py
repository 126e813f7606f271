"""What a verified notification says, per provider: its id and type, and the payment it reports
(if any), read from the shapes the providers send (CONTRACT-10, "Wire shapes").

The payment's id at the provider is what makes one record per payment: Stripe's PaymentIntent
id (``pi_…``), named by both ``checkout.session.completed`` and ``payment_intent.succeeded``;
the bank's wire id. Our wallet id, when the payer gave one: Stripe's ``metadata.wallet``, a
wallet id found in a wire's free-text ``reference``. A notification of a type we do nothing
with, or one whose payment cannot be read (``unreadable`` says why, for the log), reports none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from hiwallet.core.ids import derived_id
from hiwallet.core.text import has_control_characters

PROVIDERS = ("stripe", "bank")

# Our wallet ids (wallet_api.domain.WALLET_ID_PATTERN): a bucket's four digits, ":w:", a UUID.
# Found anywhere in a reference a person typed (upper case too), not inside a longer number.
_WALLET = r"[0-9]{4}:w:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
WALLET_IN_TEXT = re.compile(rf"(?<![0-9A-Za-z]){_WALLET}(?![0-9A-Za-z-])", re.IGNORECASE)
WALLET_ID = re.compile(_WALLET)

# What a notification's fields may be, bounded as the ledger bounds what a top-up posts (its
# ref is the payment's id at the provider: printable, at most 200 characters; an amount at most
# 10**15 minor units) and wallet-consumer reads a TopupRecorded (a reference of at most 500,
# Stripe's own limit on a metadata value): a payment recorded here is one that can be credited.
MAX_ID_CHARS = 255
MAX_PAYMENT_ID_CHARS = 200
MAX_REFERENCE_CHARS = 500
MAX_AMOUNT_MINOR = 10**15
_CURRENCY = re.compile(r"[A-Za-z]{3}")


class Unreadable(Exception):
    """The body is not a notification (not a JSON object, no id or type): nothing is stored."""


@dataclass(frozen=True)
class Payment:
    provider: str
    provider_payment_id: str
    amount_minor: int
    currency: str
    wallet: str | None
    reference: str | None

    @cached_property  # asked for twice per notification (the log, the statement)
    def id(self) -> str:
        return derived_id("topup", self.provider, self.provider_payment_id)


@dataclass(frozen=True)
class Notification:
    provider: str
    event_id: str
    event_type: str
    # the JSON text as the provider sent it (stored as jsonb)
    payload: str
    payment: Payment | None
    # why a notification of a payment's type reports none (logged); None otherwise
    unreadable: str | None = None


def _text(value: Any, limit: int = MAX_ID_CHARS) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def _amount(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_AMOUNT_MINOR
    return value if ok else None


def _payment_id(value: Any) -> str | None:
    text = _text(value, MAX_PAYMENT_ID_CHARS)
    return text if text is not None and text.strip() and not has_control_characters(text) else None


def wallet_in(reference: str | None) -> str | None:
    """The one wallet id a reference names; None when it names none, or several different ones
    (which of them was meant is for an operator to say)."""
    if not reference:
        return None
    found = {m.lower() for m in WALLET_IN_TEXT.findall(reference)}
    return found.pop() if len(found) == 1 else None


def _payment(
    provider: str, payment_id: Any, amount: Any, currency: Any, reference: Any, wallet: str | None
) -> Payment | str:
    """A Payment, or why the fields do not make one."""
    pid = _payment_id(payment_id)
    if pid is None:
        return "no printable payment id"
    minor = _amount(amount)
    if minor is None:
        return "no amount in range"
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        return "no currency code"
    ref = reference[:MAX_REFERENCE_CHARS] if isinstance(reference, str) and reference else None
    return Payment(provider, pid, minor, currency.upper(), wallet, ref)


def _stripe_payment(event_type: str, obj: Any) -> Payment | str | None:
    if event_type not in ("checkout.session.completed", "payment_intent.succeeded"):
        return None
    if not isinstance(obj, dict):
        return "no data.object"
    metadata = obj.get("metadata")
    given = metadata.get("wallet") if isinstance(metadata, dict) else None
    wallet = given.lower() if isinstance(given, str) and WALLET_ID.fullmatch(given.lower()) else None
    if event_type == "checkout.session.completed":
        if obj.get("payment_status") != "paid":
            return "checkout not paid"
        intent = obj.get("payment_intent")
        if isinstance(intent, dict):  # expanded
            intent = intent.get("id")
        return _payment("stripe", intent, obj.get("amount_total"), obj.get("currency"), given, wallet)
    amount = obj.get("amount_received", obj.get("amount"))
    return _payment("stripe", obj.get("id"), amount, obj.get("currency"), given, wallet)


def _bank_payment(event_type: str, wire: Any) -> Payment | str | None:
    if event_type != "incoming_wire.received":
        return None
    if not isinstance(wire, dict):
        return "no data"
    reference = wire.get("reference")
    wallet = wallet_in(reference if isinstance(reference, str) else None)
    return _payment("bank", wire.get("id"), wire.get("amount_minor"), wire.get("currency"), reference, wallet)


def _object(raw: bytes | str) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Unreadable("not JSON") from exc
    if not isinstance(body, dict):
        raise Unreadable("not a JSON object")
    return body


def read(provider: str, raw: bytes, message_id: str | None = None) -> Notification:
    """A verified body as a Notification. ``message_id``: Standard Webhooks' webhook-id, the
    bank notification's id (the same on every retry of one message)."""
    body = _object(raw)
    event_type = _text(body.get("type"))
    if event_type is None:
        raise Unreadable("no type")
    if provider == "stripe":
        event_id = _text(body.get("id"))
        data = body.get("data")
        found = _stripe_payment(event_type, data.get("object") if isinstance(data, dict) else None)
    else:
        event_id = message_id
        found = _bank_payment(event_type, body.get("data"))
    if event_id is None:
        raise Unreadable("no event id")
    # the JSON text as sent: PostgreSQL parses it into the jsonb (orjson checked it is UTF-8)
    payload = raw.decode() if provider == "stripe" else _without_identity_number(body, raw)
    if isinstance(found, Payment):
        return Notification(provider, event_id, event_type, payload, found)
    return Notification(provider, event_id, event_type, payload, None, found)


def _without_identity_number(body: dict[str, Any], raw: bytes) -> str:
    """The bank's notification as stored: without the sender's identity number (TCKN). Crediting
    a wire never needs it, and a national id is personal data that belongs in onboarding's
    database only (KVKK's data minimisation): onboarding reads it from the bank itself, for the
    first-wire rule (docs/events.md). The sender's name and IBAN stay: an operator attributing
    a wire reads them. The signature was checked on the bytes as sent, before this."""
    data = body.get("data")
    if not isinstance(data, dict) or data.get("sender_tckn") is None:
        return raw.decode()
    return orjson.dumps({**body, "data": {**data, "sender_tckn": None}}).decode()


def from_stripe_listing(event: dict[str, Any]) -> Notification:
    """An event from Stripe's ``GET /v1/events`` (the same object its webhook carries)."""
    return read("stripe", orjson.dumps(event))


def from_bank_listing(wire: dict[str, Any]) -> Notification:
    """A wire from the bank's ``GET /v1/incoming-wires``: no notification names it, so its
    inbox id is ``reconciliation:<wire id>`` (found again by a later round: stored once)."""
    wire_id = _text(wire.get("id"), MAX_ID_CHARS - len("reconciliation:"))
    if wire_id is None:
        raise Unreadable("no wire id")
    body = {"type": "incoming_wire.received", "data": wire}
    return read("bank", orjson.dumps(body), f"reconciliation:{wire_id}")
