"""stripe-fake: a card provider in Stripe's shape (port 8096), for development and tests.

``POST /v1/topups`` takes a card payment (form-encoded as Stripe's API, or JSON; ``Authorization:
Bearer sk_test_…``) and answers a succeeded PaymentIntent. Moments later it reports that one
payment twice, as Stripe does when a Checkout Session is paid: ``checkout.session.completed``,
then ``payment_intent.succeeded``, each a Stripe event object signed in a ``Stripe-Signature``
header (``t=<unix>,v1=<hex>`` with one ``v1`` per configured secret: HMAC-SHA256 over
``f"{t}.{body}"``). ``GET /v1/events`` and ``GET /v1/payment_intents/{id}`` are Stripe's.

Money leaves it as Stripe pays out: each payment is a Charge with a Balance Transaction (gross
``amount``, ``fee``, ``net``; ``source`` the charge), and an automatic Payout gathers the
available ones of a currency, on a schedule (``payout_interval_s``) or on demand
(``POST /_control/payouts``, the fake's own: Stripe's automatic schedule cannot be triggered).
``GET /v1/payouts``, ``/v1/payouts/{id}``, ``/v1/balance_transactions?payout=po_…`` (with
``expand[]=data.source``), ``/v1/charges/{id}`` are Stripe's. ``settlement_model``: ``net``
(Stripe's default: the fee is kept from each payout) or ``gross`` (the fee is 0 on the
transactions, paid out whole; the provider invoices its fees separately).

Nothing of HiWallet is imported (an import-linter contract): only its address, secrets and key
change in production, by configuration. State is in memory (a restart forgets everything).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from typing import Any, Literal

import httpx
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from hiwallet.fakes.delivery import Deliverer, DeliverySettings, Notification, control_router, random_id
from hiwallet.fakes.serving import serve

__all__ = [
    "TEST_CARD_DECLINED",
    "TEST_CARD_SUCCEEDS",
    "Checkout",
    "Payouts",
    "StripeFake",
    "StripeFakeSettings",
    "create_stripe_fake_app",
    "get_stripe_fake_settings",
    "run_stripe_fake",
    "stripe_signature",
]

log = structlog.get_logger("hiwallet.fakes.stripe")

CHECKOUT_COMPLETED = "checkout.session.completed"
PAYMENT_SUCCEEDED = "payment_intent.succeeded"


class StripeFakeSettings(DeliverySettings):
    """``STRIPE_FAKE_*``; lists as JSON (``STRIPE_FAKE_SIGNING_SECRETS='["whsec_a","whsec_b"]'``)."""

    model_config = SettingsConfigDict(env_prefix="STRIPE_FAKE_", extra="ignore")

    port: int = 8096
    webhook_url: str = "http://127.0.0.1:8020/v1/webhooks/topup/stripe"
    # Every secret signs every attempt (one v1= each): a rotation's overlap.
    signing_secrets: list[str] = Field(
        default=["whsec_dev_stripe_fake_0123456789abcdef"], min_length=1, max_length=5
    )
    api_key: str = "sk_test_hiwallet_dev"
    # Where a person's browser reaches the hosted checkout pages (a Checkout Session's ``url``).
    public_url: str = "http://127.0.0.1:8096"
    checkout_lifetime_s: int = Field(default=86_400, ge=60, le=86_400)
    # The api_version the events carry (the stripe client this repository pins).
    api_version: str = "2026-10-28.endive"
    max_body_bytes: int = 16_384
    # Payouts: every payout_interval_s an automatic payout per currency of what is available
    # (0: only on demand). The fee of a card payment: fee_bps of it (rounded half up) plus
    # fee_fixed_minor; kept from the payout (net) or invoiced later (gross: 0 on the lines).
    payout_interval_s: float = Field(default=86_400.0, ge=0)
    settlement_model: Literal["net", "gross"] = "net"
    fee_bps: int = Field(default=290, ge=0, le=10_000)
    fee_fixed_minor: int = Field(default=30, ge=0, le=100_000)
    # Where a payout's money arrives: our bank's API for a credit to our account (bank-fake's
    # /_control/credits, with the payout's id as the reference); None: nowhere (tests).
    payout_deposit_url: str | None = "http://127.0.0.1:8094/_control/credits"
    payout_deposit_timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("signing_secrets")
    @classmethod
    def _non_empty(cls, value: list[str]) -> list[str]:
        if any(not s.strip() for s in value):
            raise ValueError("an empty signing secret")
        return value


def stripe_signature(body: bytes, secrets: list[str], timestamp: int) -> str:
    """The ``Stripe-Signature`` header: ``t=<unix>,v1=<hex>[,v1=<hex>…]``, one v1 per secret,
    each HMAC-SHA256(secret, f"{t}.{body}") in hex, as Stripe signs."""
    signed = str(timestamp).encode() + b"." + body
    v1 = ",".join("v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest() for secret in secrets)
    return f"t={timestamp},{v1}"


class _TopupRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    wallet: str | None = Field(default=None, min_length=1, max_length=200)
    # Stripe's ceiling on an amount: eight digits of minor units.
    amount: int = Field(gt=0, le=99_999_999)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")
    description: str | None = Field(default=None, max_length=500)


class _StripeError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"type": type_, "message": message, "code": code, "param": param}}


@dataclass(frozen=True, slots=True)
class _StoredEvent:
    """An event as kept: its body is the bytes the webhook sent (one copy shared with the
    deliverer's), parsed again only when listed; the rest is what the listing filters on."""

    id: str
    created: int
    type: str
    body: bytes

    def object(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


# A page of a listing, as Stripe bounds it.
_MAX_LIMIT = 100


class Payouts:
    """Charges, their balance transactions and the automatic payouts that gather them, in
    Stripe's shapes. A transaction is paid out once: it leaves ``_unpaid`` as its payout is
    made (one event loop: no two payouts take the same one)."""

    def __init__(self, settings: StripeFakeSettings) -> None:
        self.settings = settings
        self.charges: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.transactions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.payouts: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._unpaid: OrderedDict[str, str] = OrderedDict()  # txn id -> currency
        self._paid_in: dict[str, list[str]] = {}  # payout id -> its transactions, the payout's own last

    def fee_of(self, amount: int) -> int:
        if self.settings.settlement_model == "gross":
            return 0
        return (amount * self.settings.fee_bps + 5_000) // 10_000 + self.settings.fee_fixed_minor

    def _bound(self, store: OrderedDict[str, Any]) -> None:
        while len(store) > self.settings.max_kept:
            store.popitem(last=False)

    def charge(self, intent: Mapping[str, Any]) -> dict[str, Any]:
        """The succeeded payment's Charge and its balance transaction (available at once)."""
        amount, currency, created = int(intent["amount"]), str(intent["currency"]), int(intent["created"])
        fee = min(self.fee_of(amount), amount)
        txn_id = random_id("txn_")
        charge = {
            "id": intent["latest_charge"],
            "object": "charge",
            "amount": amount,
            "amount_captured": amount,
            "amount_refunded": 0,
            "balance_transaction": txn_id,
            "captured": True,
            "created": created,
            "currency": currency,
            "description": intent.get("description"),
            "livemode": False,
            "metadata": dict(intent.get("metadata") or {}),
            "paid": True,
            "payment_intent": intent["id"],
            "refunded": False,
            "status": "succeeded",
        }
        self.charges[charge["id"]] = charge
        self._bound(self.charges)
        self._transaction(
            txn_id,
            amount=amount,
            fee=fee,
            currency=currency,
            created=created,
            type_="charge",
            source=charge["id"],
            description=intent.get("description"),
        )
        self._unpaid[txn_id] = currency
        return charge

    def _transaction(
        self,
        txn_id: str,
        *,
        amount: int,
        fee: int,
        currency: str,
        created: int,
        type_: str,
        source: str,
        description: str | None,
    ) -> dict[str, Any]:
        fee_details = (
            [
                {
                    "amount": fee,
                    "application": None,
                    "currency": currency,
                    "description": "Stripe processing fees",
                    "type": "stripe_fee",
                }
            ]
            if fee
            else []
        )
        txn = {
            "id": txn_id,
            "object": "balance_transaction",
            "amount": amount,
            "available_on": created,
            "created": created,
            "currency": currency,
            "description": description,
            "exchange_rate": None,
            "fee": fee,
            "fee_details": fee_details,
            "net": amount - fee,
            "reporting_category": type_,
            "source": source,
            "status": "available",
            "type": type_,
        }
        self.transactions[txn_id] = txn
        self._bound(self.transactions)
        return txn

    def pay_out(self, currency: str | None = None) -> list[dict[str, Any]]:
        """An automatic payout per currency (or of ``currency``) of every available transaction
        not paid out yet; none for a currency whose total is not positive."""
        now = int(time.time())
        by_currency: dict[str, list[str]] = {}
        for txn_id, cur in self._unpaid.items():
            if currency is None or cur == currency.lower():
                by_currency.setdefault(cur, []).append(txn_id)
        made = []
        for cur, txn_ids in by_currency.items():
            present = [t for t in txn_ids if t in self.transactions]
            total = sum(int(self.transactions[t]["net"]) for t in present)
            if total <= 0:
                continue
            payout_id = random_id("po_")
            own = self._transaction(
                random_id("txn_"),
                amount=-total,
                fee=0,
                currency=cur,
                created=now,
                type_="payout",
                source=payout_id,
                description="STRIPE PAYOUT",
            )
            payout = {
                "id": payout_id,
                "object": "payout",
                "amount": total,
                "arrival_date": now,
                "automatic": True,
                "balance_transaction": own["id"],
                "created": now,
                "currency": cur,
                "description": "STRIPE PAYOUT",
                "destination": "ba_hiwallet_nostro",
                "failure_balance_transaction": None,
                "failure_code": None,
                "failure_message": None,
                "livemode": False,
                "metadata": {},
                "method": "standard",
                "reconciliation_status": "completed",
                "source_type": "card",
                "statement_descriptor": None,
                "status": "paid",
                "type": "bank_account",
            }
            for txn_id in txn_ids:
                self._unpaid.pop(txn_id, None)
            self.payouts[payout_id] = payout
            self._bound(self.payouts)
            self._paid_in[payout_id] = [*present, own["id"]]
            made.append(payout)
            log.info("payout made", payout=payout_id, amount=total, currency=cur, transactions=len(present))
        return made

    def get_payout(self, payout_id: str) -> dict[str, Any]:
        payout = self.payouts.get(payout_id)
        if payout is None:
            raise _StripeError(404, f"No such payout: '{payout_id}'", code="resource_missing", param="id")
        return payout

    def list_payouts(self, query: Mapping[str, str]) -> dict[str, Any]:
        status = query.get("status")
        items = [
            p
            for p in reversed(self.payouts.values())
            if (status is None or p["status"] == status) and _created_within(p, query)
        ]
        return _listing(items, query, "/v1/payouts", "payout")

    def list_transactions(self, query: Mapping[str, str], expand: Collection[str] = ()) -> dict[str, Any]:
        """Newest first; ``payout``: the transactions that payout paid out (its own last in
        time, so first here); ``expand`` ``data.source``: each source as its object."""
        payout = query.get("payout")
        if payout is not None:
            self.get_payout(payout)  # 404 for an unknown payout, as Stripe answers
            ids = list(reversed(self._paid_in.get(payout, [])))
            found = [self.transactions[t] for t in ids if t in self.transactions]
        else:
            found = list(reversed(self.transactions.values()))
        type_filter = query.get("type")
        items = [
            t
            for t in found
            if (type_filter is None or t["type"] == type_filter) and _created_within(t, query)
        ]
        listing = _listing(items, query, "/v1/balance_transactions", "balance_transaction")
        if "data.source" in expand:
            listing["data"] = [self._expanded(t) for t in listing["data"]]
        return listing

    def _expanded(self, txn: Mapping[str, Any]) -> dict[str, Any]:
        source = txn["source"]
        obj = self.charges.get(source) or self.payouts.get(source)
        return {**txn, "source": obj if obj is not None else source}

    def get_transaction(self, txn_id: str) -> dict[str, Any]:
        txn = self.transactions.get(txn_id)
        if txn is None:
            raise _StripeError(
                404, f"No such balance transaction: '{txn_id}'", code="resource_missing", param="id"
            )
        return txn

    def get_charge(self, charge_id: str) -> dict[str, Any]:
        charge = self.charges.get(charge_id)
        if charge is None:
            raise _StripeError(404, f"No such charge: '{charge_id}'", code="resource_missing", param="id")
        return charge

    async def pay_out_and_deposit(self, currency: str | None = None) -> list[dict[str, Any]]:
        """:meth:`pay_out`, then each payout's money sent to our bank (``payout_deposit_url``):
        a bank that does not answer is logged (the payout stays paid, as Stripe's would)."""
        made = self.pay_out(currency)
        url = self.settings.payout_deposit_url
        if url is None or not made:
            return made
        async with httpx.AsyncClient(timeout=self.settings.payout_deposit_timeout_s) as client:
            for payout in made:
                body = {
                    "amount_minor": payout["amount"],
                    "currency": payout["currency"].upper(),
                    "counterparty": "STRIPE PAYMENTS",
                    "reference": payout["id"],
                    "description": f"STRIPE PAYOUT {payout['id']}",
                }
                try:
                    response = await client.post(url, json=body)
                    response.raise_for_status()
                except httpx.HTTPError as exc:
                    log.warning("payout not deposited at the bank", payout=payout["id"], error=str(exc))
        return made

    async def schedule(self) -> None:
        """Automatic payouts every payout_interval_s (the first one interval after the start)."""
        while True:
            await asyncio.sleep(self.settings.payout_interval_s)
            try:
                await self.pay_out_and_deposit()
            except Exception:  # a fake's round: logged, the next one tries again
                log.exception("payout round failed")


def _created_within(item: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    created = int(item["created"])
    bounds = {op: _int_param(query, f"created[{op}]", None) for op in ("gt", "gte", "lt", "lte")}
    return not (
        (bounds["gt"] is not None and created <= bounds["gt"])
        or (bounds["gte"] is not None and created < bounds["gte"])
        or (bounds["lt"] is not None and created >= bounds["lt"])
        or (bounds["lte"] is not None and created > bounds["lte"])
    )


def _listing(items: list[dict[str, Any]], query: Mapping[str, str], url: str, kind: str) -> dict[str, Any]:
    """A Stripe list object of ``items`` (newest first): ``limit`` (1..100, default 10) and
    ``starting_after`` / ``ending_before`` by id, as Stripe pages."""
    limit = _int_param(query, "limit", 10)
    if not 1 <= limit <= _MAX_LIMIT:
        raise _StripeError(
            400, "limit must be between 1 and 100", param="limit", code="parameter_invalid_integer"
        )
    ids = [i["id"] for i in items]
    starting_after, ending_before = query.get("starting_after"), query.get("ending_before")
    if starting_after is not None:
        if starting_after not in ids:
            raise _StripeError(
                404, f"No such {kind}: '{starting_after}'", code="resource_missing", param="starting_after"
            )
        rest = items[ids.index(starting_after) + 1 :]
        page, has_more = rest[:limit], len(rest) > limit
    elif ending_before is not None:
        if ending_before not in ids:
            raise _StripeError(
                404, f"No such {kind}: '{ending_before}'", code="resource_missing", param="ending_before"
            )
        before = items[: ids.index(ending_before)]
        page, has_more = before[-limit:], len(before) > limit
    else:
        page, has_more = items[:limit], len(items) > limit
    return {"object": "list", "data": list(page), "has_more": has_more, "url": url}


class StripeFake:
    """The fake's state: payment intents, checkout sessions, events (newest last), bounded."""

    def __init__(self, settings: StripeFakeSettings) -> None:
        self.settings = settings
        self.deliverer = Deliverer(
            name="stripe-fake",
            signer=self._sign,
            settings=settings,
            user_agent="Stripe/1.0 (+https://stripe.com/docs/webhooks)",
        )
        self.payment_intents: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.events: OrderedDict[str, _StoredEvent] = OrderedDict()
        self._idempotent: OrderedDict[str, tuple[str, str]] = OrderedDict()  # key -> (fingerprint, pi)
        self.checkout_sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.payouts = Payouts(settings)

    def _sign(self, notification: Notification, timestamp: int) -> Mapping[str, str]:
        return {
            "Stripe-Signature": stripe_signature(notification.body, self.settings.signing_secrets, timestamp)
        }

    def _bound(self, store: OrderedDict[str, Any]) -> None:
        while len(store) > self.settings.max_kept:
            store.popitem(last=False)

    def create_topup(self, request: _TopupRequest, idempotency_key: str | None) -> dict[str, Any]:
        fingerprint = request.model_dump_json()
        if idempotency_key is not None and idempotency_key in self._idempotent:
            seen, pi_id = self._idempotent[idempotency_key]
            if seen != fingerprint:
                raise _StripeError(
                    400,
                    "Keys for idempotent requests can only be used with the same parameters "
                    "they were first used with.",
                    type_="idempotency_error",
                )
            if pi_id in self.payment_intents:
                return self.payment_intents[pi_id]
        request_info = {"id": random_id("req_", 14), "idempotency_key": idempotency_key}
        metadata = {"wallet": request.wallet} if request.wallet is not None else {}
        intent, _ = self.pay(
            amount=request.amount,
            currency=request.currency,
            metadata=metadata,
            description=request.description,
            request_info=request_info,
        )
        if idempotency_key is not None:
            self._idempotent[idempotency_key] = (fingerprint, intent["id"])
            self._bound(self._idempotent)
        return intent

    def pay(
        self,
        *,
        amount: int,
        currency: str,
        metadata: Mapping[str, str],
        description: str | None,
        request_info: Mapping[str, Any],
        session: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A card payment that succeeded: its PaymentIntent, its Checkout Session (``session``,
        completed here, or one made for it) and the two events, sent moments later."""
        now = int(time.time())
        currency = currency.lower()
        metadata = dict(metadata)
        pi_id = random_id("pi_")
        intent: dict[str, Any] = {
            "id": pi_id,
            "object": "payment_intent",
            "amount": amount,
            "amount_capturable": 0,
            "amount_received": amount,
            "capture_method": "automatic",
            "confirmation_method": "automatic",
            "created": now,
            "currency": currency,
            "customer": None,
            "description": description,
            "latest_charge": random_id("ch_"),
            "livemode": False,
            "metadata": metadata,
            "payment_method": random_id("pm_"),
            "payment_method_types": ["card"],
            "status": "succeeded",
        }
        if session is None:
            session = {
                "id": random_id("cs_test_", 56),
                "object": "checkout.session",
                "amount_subtotal": amount,
                "amount_total": amount,
                "client_reference_id": metadata.get("wallet"),
                "created": now,
                "currency": currency,
                "customer": None,
                "expires_at": now + 86_400,
                "livemode": False,
                "metadata": metadata,
                "mode": "payment",
                "payment_method_types": ["card"],
                "success_url": None,
                "url": None,
            }
        session.update(payment_intent=pi_id, payment_status="paid", status="complete", url=None)
        batch = []
        for event_type, obj in ((CHECKOUT_COMPLETED, session), (PAYMENT_SUCCEEDED, intent)):
            event_id = random_id("evt_")
            event: dict[str, Any] = {
                "id": event_id,
                "object": "event",
                "api_version": self.settings.api_version,
                "created": now,
                "data": {"object": obj},
                "livemode": False,
                "pending_webhooks": 1,
                "request": dict(request_info),
                "type": event_type,
            }
            # Stripe's bodies are pretty-printed, two spaces: a receiver must verify the raw bytes.
            body = json.dumps(event, indent=2).encode()
            self.events[event_id] = _StoredEvent(event_id, now, event_type, body)
            batch.append(Notification(event_id, event_type, self.settings.webhook_url, body))
        self.payment_intents[pi_id] = intent
        self._bound(self.payment_intents)
        self.payouts.charge(intent)
        self._bound(self.events)
        log.info(
            "payment accepted",
            payment_intent=pi_id,
            amount=amount,
            currency=currency,
            events=[n.event_id for n in batch],
        )
        self.deliverer.submit(batch)
        return intent, session

    def list_events(self, query: Mapping[str, str]) -> dict[str, Any]:
        limit = _int_param(query, "limit", 10)
        if not 1 <= limit <= 100:
            raise _StripeError(
                400, "limit must be between 1 and 100", param="limit", code="parameter_invalid_integer"
            )
        bounds = {op: _int_param(query, f"created[{op}]", None) for op in ("gt", "gte", "lt", "lte")}
        exact = _int_param(query, "created", None)
        type_filter = query.get("type")
        newest_first = list(reversed(self.events.values()))
        starting_after = query.get("starting_after")
        ending_before = query.get("ending_before")
        if starting_after is not None:
            newest_first = _after(newest_first, starting_after, "starting_after")
        elif ending_before is not None:
            older_first = _after(list(reversed(newest_first)), ending_before, "ending_before")
            newest_first = list(reversed(older_first))

        def wanted(event: _StoredEvent) -> bool:
            created = event.created
            if exact is not None and created != exact:
                return False
            if (bounds["gt"] is not None and created <= bounds["gt"]) or (
                bounds["gte"] is not None and created < bounds["gte"]
            ):
                return False
            if (bounds["lt"] is not None and created >= bounds["lt"]) or (
                bounds["lte"] is not None and created > bounds["lte"]
            ):
                return False
            if type_filter is None:
                return True
            if type_filter.endswith("*"):
                return event.type.startswith(type_filter[:-1])
            return event.type == type_filter

        matching = [e for e in newest_first if wanted(e)]
        if ending_before is not None and starting_after is None:
            page = matching[-limit:]
            has_more = len(matching) > limit
        else:
            page = matching[:limit]
            has_more = len(matching) > limit
        data = [event.object() for event in page]
        return {"object": "list", "data": data, "has_more": has_more, "url": "/v1/events"}


def _after(events: list[_StoredEvent], event_id: str, param: str) -> list[_StoredEvent]:
    for index, event in enumerate(events):
        if event.id == event_id:
            return events[index + 1 :]
    raise _StripeError(404, f"No such event: '{event_id}'", code="resource_missing", param=param)


def _int_param(query: Mapping[str, str], name: str, default: int | None) -> Any:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise _StripeError(
            400, f"Invalid integer: {name}", code="parameter_invalid_integer", param=name
        ) from exc


def _authorized(request: Request, api_key: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer":
        return hmac.compare_digest(credentials.strip().encode(), api_key.encode())
    if scheme.lower() == "basic":  # Stripe also takes the key as the basic-auth user name
        try:
            user = base64.b64decode(credentials.strip(), validate=True).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            return False
        return hmac.compare_digest(user.encode(), api_key.encode())
    return False


async def _read_topup(request: Request, max_body_bytes: int) -> _TopupRequest:
    body = await request.body()
    if len(body) > max_body_bytes:
        raise _StripeError(413, "Request body too large.")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: dict[str, Any]
    if content_type == "application/json":
        try:
            parsed = json.loads(body)
        except ValueError as exc:
            raise _StripeError(400, "Invalid JSON body.") from exc
        if not isinstance(parsed, dict):
            raise _StripeError(400, "Invalid JSON body.")
        fields = dict(parsed)
        metadata = fields.get("metadata")
        if isinstance(metadata, dict) and "wallet" not in fields and "wallet" in metadata:
            fields["wallet"] = metadata["wallet"]
    else:  # application/x-www-form-urlencoded, as Stripe's clients send
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if "wallet" not in fields and "metadata[wallet]" in fields:
            fields["wallet"] = fields["metadata[wallet]"]
    try:
        return _TopupRequest.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = ".".join(str(p) for p in error["loc"]) or None
        code = "parameter_missing" if error["type"] == "missing" else "parameter_invalid"
        raise _StripeError(400, f"{error['msg']}: {param}", code=code, param=param) from exc


# ---------------------------------------------------------------------------------------------
# Stripe Checkout: a session made by the merchant's server, paid by a person on a hosted page
# ---------------------------------------------------------------------------------------------

# Stripe's test cards: this one succeeds, the other is declined (card_declined).
TEST_CARD_SUCCEEDS = "4242424242424242"
TEST_CARD_DECLINED = "4000000000000002"
_MAX_URL = 2_000


def _checked_url(fields: Mapping[str, str], name: str, *, required: bool) -> str | None:
    value = fields.get(name)
    if value is None or value == "":
        if required:
            raise _StripeError(400, f"Missing required param: {name}.", code="parameter_missing", param=name)
        return None
    if len(value) > _MAX_URL or not value.startswith(("http://", "https://")):
        raise _StripeError(400, f"Not a valid URL: {name}", code="url_invalid", param=name)
    return value


def _line_item_amount(fields: Mapping[str, str]) -> tuple[int, str, str | None]:
    """The session's amount and currency, from its one line item (``price_data``), as the
    merchant's form-encoded call gives it; the fake sells one thing at a time."""
    prefix = "line_items[0]"
    try:
        unit = int(fields[f"{prefix}[price_data][unit_amount]"])
        quantity = int(fields.get(f"{prefix}[quantity]", "1"))
        currency = fields[f"{prefix}[price_data][currency]"]
    except KeyError as exc:
        raise _StripeError(400, f"Missing required param: {exc.args[0]}.", code="parameter_missing") from exc
    except ValueError as exc:
        raise _StripeError(400, "Invalid integer in line_items.", code="parameter_invalid_integer") from exc
    amount = unit * quantity
    if not (unit > 0 and 0 < quantity <= 1_000 and amount <= 99_999_999):
        raise _StripeError(400, "The amount must be between 1 and 99999999.", code="amount_too_large")
    if len(currency) != 3 or not currency.isalpha():
        raise _StripeError(400, "Invalid currency.", code="parameter_invalid", param="currency")
    name = fields.get(f"{prefix}[price_data][product_data][name]")
    return amount, currency.lower(), name[:200] if name else None


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)} · stripe-fake</title>
<style>
body{{font-family:system-ui,sans-serif;background:#f6f9fc;color:#1a1f36;margin:0;padding:1rem}}
main{{max-width:26rem;margin:2rem auto;background:#fff;border-radius:8px;padding:1.5rem;
box-shadow:0 2px 8px rgba(0,0,0,.08)}}
label{{display:block;margin-top:1rem;font-weight:600}}
input{{width:100%;box-sizing:border-box;padding:.6rem;font-size:1rem;border:1px solid #8792a2;
border-radius:4px}}
button{{margin-top:1.5rem;width:100%;padding:.8rem;font-size:1rem;background:#4f46e5;color:#fff;border:0;
border-radius:4px}}
.error{{color:#a4031f;font-weight:600}} .amount{{font-size:1.6rem;font-weight:700}} a{{color:#3730a3}}
</style></head>
<body><main>{body}</main></body></html>"""
    headers = {"Cache-Control": "no-store", "X-Frame-Options": "DENY"}
    return HTMLResponse(html, status_code=status, headers=headers)


class Checkout:
    """Checkout Sessions and their hosted pages, on the fake's state."""

    def __init__(self, fake: StripeFake) -> None:
        self.fake = fake
        self.settings = fake.settings

    def create(self, fields: Mapping[str, str]) -> dict[str, Any]:
        if fields.get("mode", "payment") != "payment":
            raise _StripeError(400, "Only mode=payment is supported.", code="parameter_invalid", param="mode")
        success_url = _checked_url(fields, "success_url", required=True)
        cancel_url = _checked_url(fields, "cancel_url", required=False)
        amount, currency, product = _line_item_amount(fields)
        metadata = {
            k[len("metadata[") : -1]: v[:500]
            for k, v in fields.items()
            if k.startswith("metadata[") and k.endswith("]")
        }
        reference = fields.get("client_reference_id")
        if reference is not None and len(reference) > 200:
            raise _StripeError(400, "client_reference_id is too long.", param="client_reference_id")
        if reference is not None and "wallet" not in metadata:
            metadata["wallet"] = reference
        now = int(time.time())
        session_id = random_id("cs_test_", 56)
        session: dict[str, Any] = {
            "id": session_id,
            "object": "checkout.session",
            "amount_subtotal": amount,
            "amount_total": amount,
            "cancel_url": cancel_url,
            "client_reference_id": reference,
            "created": now,
            "currency": currency,
            "customer": None,
            "expires_at": now + self.settings.checkout_lifetime_s,
            "livemode": False,
            "metadata": metadata,
            "mode": "payment",
            "payment_intent": None,
            "payment_method_types": ["card"],
            "payment_status": "unpaid",
            "status": "open",
            "success_url": success_url,
            "url": f"{self.settings.public_url.rstrip('/')}/c/pay/{session_id}",
            "_product": product,
        }
        self.fake.checkout_sessions[session_id] = session
        self.fake._bound(self.fake.checkout_sessions)
        log.info("checkout session created", session=session_id, amount=amount, currency=currency)
        return self.public(session)

    @staticmethod
    def public(session: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in session.items() if not k.startswith("_")}

    def get(self, session_id: str) -> dict[str, Any]:
        session = self.fake.checkout_sessions.get(session_id)
        if session is None:
            raise _StripeError(
                404, f"No such checkout.session: '{session_id}'", code="resource_missing", param="id"
            )
        if session["status"] == "open" and session["expires_at"] <= time.time():
            session.update(status="expired", url=None)
        return session

    def page(self, session_id: str, error: str | None = None, status: int = 200) -> HTMLResponse:
        try:
            session = self.get(session_id)
        except _StripeError:
            return _page("Not found", "<h1>This checkout does not exist</h1>", 404)
        if session["status"] != "open":
            return _page("Closed", "<h1>This checkout is no longer open</h1>", 410)
        shown = f"{session['amount_total'] / 100:,.2f} {session['currency'].upper()}"
        product = escape(session.get("_product") or "Payment")
        alert = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
        cancel = session.get("cancel_url")
        back = f'<p><a href="{escape(cancel)}">Cancel and go back</a></p>' if cancel else ""
        body = f"""<h1>Pay with card</h1>
<p>{product}</p><p class="amount">{escape(shown)}</p>{alert}
<form method="post" action="/c/pay/{escape(session_id)}">
<label for="card">Card number</label>
<input id="card" name="card_number" inputmode="numeric" autocomplete="cc-number" required>
<label for="expiry">Expiry (MM / YY)</label>
<input id="expiry" name="expiry" autocomplete="cc-exp" required>
<label for="cvc">CVC</label>
<input id="cvc" name="cvc" inputmode="numeric" autocomplete="cc-csc" required>
<button type="submit">Pay {escape(shown)}</button>
</form>{back}
<p><small>Test mode: card {TEST_CARD_SUCCEEDS[:4]} {TEST_CARD_SUCCEEDS[4:8]} … succeeds,
{TEST_CARD_DECLINED[:4]} {TEST_CARD_DECLINED[4:8]} … is declined.</small></p>"""
        return _page("Pay", body, status)

    def submit(self, session_id: str, fields: Mapping[str, str]) -> HTMLResponse | RedirectResponse:
        try:
            session = self.get(session_id)
        except _StripeError:
            return _page("Not found", "<h1>This checkout does not exist</h1>", 404)
        if session["status"] != "open":
            return _page("Closed", "<h1>This checkout is no longer open</h1>", 410)
        card = "".join(ch for ch in fields.get("card_number", "") if ch.isdigit())
        if card == TEST_CARD_DECLINED:
            log.info("checkout card declined", session=session_id)
            return self.page(session_id, "Your card was declined.", 402)
        if card != TEST_CARD_SUCCEEDS or not fields.get("expiry") or not fields.get("cvc"):
            return self.page(session_id, "Check the card number, expiry and CVC.", 400)
        self.fake.pay(
            amount=session["amount_total"],
            currency=session["currency"],
            metadata=session["metadata"],
            description=session.get("_product"),
            request_info={"id": None, "idempotency_key": None},
            session=session,
        )
        target = str(session["success_url"]).replace("{CHECKOUT_SESSION_ID}", session_id)
        return RedirectResponse(target, status_code=303)


async def _form_fields(request: Request, max_body_bytes: int) -> dict[str, str]:
    body = await request.body()
    if len(body) > max_body_bytes:
        raise _StripeError(413, "Request body too large.")
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def create_stripe_fake_app(settings: StripeFakeSettings | None = None) -> FastAPI:
    """The app; ``app.state.fake`` is its :class:`StripeFake` (tests read it)."""
    settings = settings or get_stripe_fake_settings()
    fake = StripeFake(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await fake.deliverer.start()
        log.info(
            "stripe-fake started", webhook_url=settings.webhook_url, secrets=len(settings.signing_secrets)
        )
        schedule = (
            asyncio.create_task(fake.payouts.schedule(), name="stripe-fake-payouts")
            if settings.payout_interval_s > 0
            else None
        )
        try:
            yield
        finally:
            if schedule is not None:
                schedule.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await schedule
            await fake.deliverer.close()

    app = FastAPI(title="stripe-fake", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.fake = fake
    app.include_router(control_router(lambda: fake.deliverer))

    @app.exception_handler(_StripeError)
    async def stripe_error(_: Request, exc: _StripeError) -> JSONResponse:
        return JSONResponse(exc.body, status_code=exc.status)

    def require_key(request: Request) -> None:
        if not _authorized(request, settings.api_key):
            raise _StripeError(401, "Invalid API Key provided.")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/topups")
    async def create_topup(request: Request) -> dict[str, Any]:
        require_key(request)
        topup = await _read_topup(request, settings.max_body_bytes)
        key = request.headers.get("idempotency-key")
        if key is not None and len(key) > 255:
            raise _StripeError(400, "Idempotency-Key is too long.", type_="idempotency_error")
        return fake.create_topup(topup, key)

    @app.get("/v1/payment_intents/{intent_id}")
    async def get_payment_intent(intent_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        intent = fake.payment_intents.get(intent_id)
        if intent is None:
            raise _StripeError(
                404, f"No such payment_intent: '{intent_id}'", code="resource_missing", param="id"
            )
        return intent

    checkout = Checkout(fake)

    @app.post("/v1/checkout/sessions")
    async def create_checkout_session(request: Request) -> dict[str, Any]:
        require_key(request)
        return checkout.create(await _form_fields(request, settings.max_body_bytes))

    @app.get("/v1/checkout/sessions/{session_id}")
    async def get_checkout_session(session_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        return checkout.public(checkout.get(session_id))

    # The hosted page a person pays on (no API key: the session's id is the capability).
    @app.get("/c/pay/{session_id}", response_model=None)
    async def checkout_page(session_id: str) -> HTMLResponse:
        return checkout.page(session_id)

    @app.post("/c/pay/{session_id}", response_model=None)
    async def checkout_submit(session_id: str, request: Request) -> HTMLResponse | RedirectResponse:
        return checkout.submit(session_id, await _form_fields(request, settings.max_body_bytes))

    @app.get("/v1/events")
    async def list_events(request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.list_events(request.query_params)

    @app.get("/v1/payouts")
    async def list_payouts(request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.payouts.list_payouts(request.query_params)

    @app.get("/v1/payouts/{payout_id}")
    async def get_payout(payout_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.payouts.get_payout(payout_id)

    @app.get("/v1/balance_transactions")
    async def list_balance_transactions(request: Request) -> dict[str, Any]:
        require_key(request)
        params = request.query_params
        # Stripe's clients send expand[0]=…, others expand[]=…
        expand = [v for k, v in params.multi_items() if k == "expand" or k.startswith("expand[")]
        return fake.payouts.list_transactions(params, expand)

    @app.get("/v1/balance_transactions/{txn_id}")
    async def get_balance_transaction(txn_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.payouts.get_transaction(txn_id)

    @app.get("/v1/charges/{charge_id}")
    async def get_charge(charge_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.payouts.get_charge(charge_id)

    # The fake's own (Stripe's automatic payouts follow its schedule only): pay out now what is
    # available, per currency (or ?currency=try); the payouts made.
    @app.post("/_control/payouts")
    async def pay_out_now(currency: str | None = None) -> dict[str, Any]:
        return {"object": "list", "data": await fake.payouts.pay_out_and_deposit(currency), "has_more": False}

    @app.get("/v1/events/{event_id}")
    async def get_event(event_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        event = fake.events.get(event_id)
        if event is None:
            raise _StripeError(404, f"No such event: '{event_id}'", code="resource_missing", param="id")
        return event.object()

    return app


@lru_cache(maxsize=1)
def get_stripe_fake_settings() -> StripeFakeSettings:
    return StripeFakeSettings()


def run_stripe_fake(port: int | None, host: str) -> None:
    """Serve stripe-fake (the process entry point; the caller has set up logging)."""
    settings = get_stripe_fake_settings()
    serve(create_stripe_fake_app(settings), host, port or settings.port)
