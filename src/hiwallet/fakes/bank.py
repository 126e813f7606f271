"""bank-fake: our bank in a bank API's shape (port 8094), for development and tests.

``POST /v1/topups`` books an incoming wire to our account (the sender's name and IBAN, checked
with schwifty; an optional TCKN, checked with python-stdnum; the reference the sender typed; the
amount) and answers it. Moments later the bank reports it with a Standard Webhooks notification
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64> [v1,<base64>…]``, one
signature per configured secret; the id stays the same across retries, the timestamp and
signatures are each attempt's). ``GET /v1/incoming-wires`` lists the wires, oldest first, with
a cursor.

``POST /v1/transfers`` sends money out of our account (a withdrawal): it needs an
``Idempotency-Key`` (the caller's reference for the transfer), answers 202 ``pending`` with the
bank's reference (``trf_…``), decides the outcome a moment later and reports it with a signed
callback (``transfer.succeeded`` / ``transfer.failed``) to ``transfer_callback_url``, retried
until a 2xx. ``GET /v1/transfers/{reference}`` and ``GET /v1/transfers`` show the status, which
turns final when the outcome is decided (whether or not the callback arrives). Tests bend the
outcome with rules (``/_control/transfers``) matched per destination IBAN or amount, so that
concurrent tests do not bend each other's transfers.

Refusals are ``application/problem+json`` (RFC 9457) with a machine ``code`` and the ``field``;
never the refused value.

:meth:`BankFake.notify` is the one way out for every notification type, on the same delivery
machinery (:mod:`hiwallet.fakes.delivery`). State is in memory.

Our account's book (:class:`AccountBook`): every movement the bank knows of on our account - a
wire received (credit), a transfer that succeeded (debit), a credit from another institution
(a card provider's payout: ``POST /_control/credits``, the fake's own, as the provider's deposit
would arrive), a debit by another institution (a provider collecting its invoice by direct debit:
``POST /_control/debits``) - and a daily account statement in SWIFT MT940 for it:
``GET /v1/statements/{YYYY-MM-DD}`` (``text/plain``; opening and closing balance, one ``:61:``
line and its ``:86:`` details per movement: the bank's reference, ``/EREF/`` and the customer's
reference when there is one, the details; the bank's reference after ``//`` in ``:61:``).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any, Literal, TypeVar

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict
from schwifty import IBAN
from schwifty.exceptions import SchwiftyException
from standardwebhooks import Webhook
from stdnum.exceptions import ValidationError as NumberInvalid
from stdnum.tr import tckimlik

from hiwallet.fakes.delivery import (
    Deliverer,
    DeliverySettings,
    Faults,
    Notification,
    control_router,
    iso_now,
    random_id,
)
from hiwallet.fakes.serving import serve

__all__ = [
    "BankFake",
    "BankFakeSettings",
    "TransferRule",
    "create_bank_fake_app",
    "get_bank_fake_settings",
    "run_bank_fake",
]

log = structlog.get_logger("hiwallet.fakes.bank")

INCOMING_WIRE_RECEIVED = "incoming_wire.received"
TRANSFER_SUCCEEDED = "transfer.succeeded"
TRANSFER_FAILED = "transfer.failed"
# An Idempotency-Key: 1 to 255 visible ASCII characters (as the IETF draft and Stripe allow).
_M = TypeVar("_M", bound=BaseModel)
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
PROBLEM_JSON = "application/problem+json"


class BankFakeSettings(DeliverySettings):
    """``BANK_FAKE_*``; lists as JSON (``BANK_FAKE_SIGNING_SECRETS='["whsec_…","whsec_…"]'``)."""

    model_config = SettingsConfigDict(env_prefix="BANK_FAKE_", extra="ignore")

    port: int = 8094
    webhook_url: str = "http://127.0.0.1:8020/v1/webhooks/topup/bank"
    # Standard Webhooks secrets (whsec_ + base64 of the key); every one signs every attempt.
    signing_secrets: list[str] = Field(
        default=["whsec_ZGV2LWJhbmstZmFrZS1zZWNyZXQtMDEyMzQ1Njc4OQ=="], min_length=1, max_length=5
    )
    api_key: str = "bank_dev_key"
    # Our account at the bank: where wires arrive unless the request names another.
    receiver_iban: str = "TR420006100000000012345678"
    max_body_bytes: int = 16_384
    # Outgoing transfers: where their outcome is reported (bank-webhook), and how long after
    # acceptance the outcome is decided unless a rule (/_control/transfers) says otherwise.
    transfer_callback_url: str = "http://127.0.0.1:8021/v1/webhooks/bank"
    transfer_decide_after_s: float = Field(default=0.5, ge=0, le=3600)
    # Our account's balance before the first movement the fake books (its statements' start).
    opening_balance_minor: int = Field(default=0, ge=-(10**15), le=10**15)

    @field_validator("signing_secrets")
    @classmethod
    def _valid_secrets(cls, value: list[str]) -> list[str]:
        for secret in value:
            Webhook(secret)  # raises on an empty or undecodable secret
        return value

    @field_validator("receiver_iban")
    @classmethod
    def _valid_iban(cls, value: str) -> str:
        return str(IBAN(value).compact)


class _Problem(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        title: str,
        detail: str,
        *,
        field: str | None = None,
        errors: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.body: dict[str, Any] = {
            "type": f"https://bank-fake.invalid/problems/{code.replace('_', '-')}",
            "title": title,
            "status": status,
            "detail": detail,
            "code": code,
        }
        if field is not None:
            self.body["field"] = field
        if errors is not None:
            self.body["errors"] = errors


class _WireRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    sender_name: str = Field(min_length=1, max_length=140)
    sender_iban: str = Field(min_length=1, max_length=64)
    sender_tckn: str | None = Field(default=None, max_length=20)
    # The remittance information the sender typed (SEPA allows 140 characters).
    reference: str = Field(default="", max_length=140)
    amount_minor: int = Field(gt=0, le=10**15)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")
    receiver_iban: str | None = Field(default=None, max_length=64)


class _TransferRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    amount_minor: int = Field(gt=0, le=10**15)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")
    destination_iban: str = Field(min_length=1, max_length=64)
    # The remittance information the beneficiary sees (SEPA allows 140 characters).
    description: str = Field(default="", max_length=140)


class TransferRule(BaseModel):
    """How the next matching transfers behave (``POST /_control/transfers``).

    Matching: ``destination_iban`` and/or ``amount_minor`` (unset = any); of the rules that
    match a new transfer the most specific wins (both fields set, then one, then none), the
    newest among equals. ``times``: how many transfers it applies to (unset: until deleted).
    The transfer keeps the behaviour it was given when it was accepted.

    - ``outcome``: ``accept`` (succeeded), ``reject`` (failed with ``failure_reason``), or
      ``hold`` (stays pending until ``POST /_control/transfers/{reference}/decide``);
    - ``delay_s``: accepted → decided (default: the ``transfer_decide_after_s`` setting);
    - ``callback_delay_s``: decided → the callback's first attempt (the status is final before);
    - ``lose_callback``: decided but never reported (recorded as ``dropped``; redeliverable);
    - ``duplicate_callback``: the callback sent this many times in all (0 or 1: once), with the
      same ``webhook-id`` (a retry the receiver must recognise) or, ``duplicate_distinct_ids``,
      each with its own id; ``duplicate_gap_s`` apart (0: all at once, a race for the receiver).
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    destination_iban: str | None = Field(default=None, max_length=64)
    amount_minor: int | None = Field(default=None, gt=0)
    times: int | None = Field(default=None, ge=1, le=1_000_000)
    outcome: Literal["accept", "reject", "hold"] = "accept"
    failure_reason: str = Field(default="account_closed", min_length=1, max_length=140)
    delay_s: float | None = Field(default=None, ge=0, le=3600)
    callback_delay_s: float = Field(default=0.0, ge=0, le=600)
    lose_callback: bool = False
    duplicate_callback: int = Field(default=0, ge=0, le=10)
    duplicate_distinct_ids: bool = False
    duplicate_gap_s: float = Field(default=0.0, ge=0, le=600)

    def specificity(self) -> int:
        return (self.destination_iban is not None) + (self.amount_minor is not None)

    def matches(self, transfer: Mapping[str, Any]) -> bool:
        return (self.destination_iban is None or self.destination_iban == transfer["destination_iban"]) and (
            self.amount_minor is None or self.amount_minor == transfer["amount_minor"]
        )


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    outcome: Literal["accept", "reject"]
    failure_reason: str = Field(default="account_closed", min_length=1, max_length=140)


def _iban(value: str, field: str, status: int = 400) -> str:
    try:
        return str(IBAN(value).compact)
    except SchwiftyException as exc:
        raise _Problem(status, "invalid_iban", "Invalid IBAN", f"{field}: {exc}", field=field) from exc


def _tckn(value: str) -> str:
    try:
        return str(tckimlik.validate(value))
    except NumberInvalid as exc:
        raise _Problem(
            400, "invalid_tckn", "Invalid TCKN", f"sender_tckn: {exc}", field="sender_tckn"
        ) from exc


def _encode_cursor(seq: int, kind: str = "w") -> str:
    return base64.urlsafe_b64encode(f"{kind}:{seq}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, kind: str = "w") -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        found, _, seq = text.partition(":")
        if found != kind:
            raise ValueError(cursor)
        return int(seq)
    except ValueError as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise _Problem(
            400, "invalid_cursor", "Invalid cursor", "cursor: not one this API gave", field="cursor"
        ) from exc


def _parse_since(value: str) -> datetime:
    try:
        since = datetime.fromisoformat(value)
    except ValueError as exc:
        raise _Problem(
            400, "invalid_parameter", "Invalid parameter", "since: not an ISO 8601 time", field="since"
        ) from exc
    return since if since.tzinfo is not None else since.replace(tzinfo=UTC)


def _limit(query: Mapping[str, str]) -> int:
    try:
        limit = int(query.get("limit", "100"))
    except ValueError as exc:
        raise _Problem(
            400, "invalid_parameter", "Invalid parameter", "limit: not an integer", field="limit"
        ) from exc
    if not 1 <= limit <= 500:
        raise _Problem(400, "invalid_parameter", "Invalid parameter", "limit: 1 to 500", field="limit")
    return limit


def _validated(model: type[_M], body: bytes, max_bytes: int, status: int) -> _M:
    """The request's fields, or the problem (``status`` for fields that are not valid)."""
    if len(body) > max_bytes:
        raise _Problem(413, "too_large", "Request too large", f"at most {max_bytes} bytes")
    try:
        fields = json.loads(body)
    except ValueError as exc:
        raise _Problem(400, "invalid_json", "Invalid JSON", "the body is not JSON") from exc
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        errors = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()]
        raise _Problem(
            status, "invalid_request", "Invalid request", "the request has invalid fields", errors=errors
        ) from exc


# SWIFT's character set (X): what an MT940 field may hold; anything else is transliterated or
# replaced, as a bank's statement does (Turkish letters become their Latin base letters). This
# bank also writes the underscore, so that its ids (wire_…, trf_…) stay whole in the details.
_SWIFT_OK = re.compile(r"[^A-Za-z0-9/\-?:().,'+ _]")
_TRANSLITERATE = str.maketrans("çğıöşüÇĞİÖŞÜ", "cgiosuCGIOSU")


def _swift(text: str, width: int) -> str:
    return _SWIFT_OK.sub(".", text.translate(_TRANSLITERATE))[:width]


def _mt940_amount(minor: int) -> str:
    """Minor units as MT940 writes an amount: no sign, a decimal comma (two decimals)."""
    return f"{abs(minor) // 100},{abs(minor) % 100:02d}"


def _mt940_balance(tag: str, minor: int, day: date, currency: str) -> str:
    return f":{tag}:{'C' if minor >= 0 else 'D'}{day:%y%m%d}{currency}{_mt940_amount(minor)}"


class AccountBook:
    """Our account at the bank, movement by movement (credits +, debits −), and its statements."""

    def __init__(self, iban: str, currency: str, opening_balance_minor: int, max_kept: int) -> None:
        self.iban = iban
        self.currency = currency
        self.opening_balance_minor = opening_balance_minor
        self.max_kept = max_kept
        self.entries: list[dict[str, Any]] = []

    def book(
        self,
        amount_minor: int,
        *,
        bank_reference: str,
        customer_reference: str | None,
        counterparty: str,
        details: str,
        type_code: str = "NTRF",
    ) -> dict[str, Any]:
        entry = {
            "id": bank_reference,
            "booked_at": datetime.now(UTC),
            "amount_minor": amount_minor,
            "currency": self.currency,
            "customer_reference": customer_reference,
            "counterparty": counterparty,
            "details": details,
            "type_code": type_code,
        }
        self.entries.append(entry)
        if len(self.entries) > self.max_kept:  # the oldest leave the book; the balance keeps them
            gone = self.entries.pop(0)
            self.opening_balance_minor += gone["amount_minor"]
        return entry

    def statement(self, day: date) -> str:
        """The MT940 statement of ``day`` (UTC): its opening balance (what every earlier movement
        left), each movement of the day, its closing balance."""
        opening = self.opening_balance_minor + sum(
            e["amount_minor"] for e in self.entries if e["booked_at"].date() < day
        )
        todays = [e for e in self.entries if e["booked_at"].date() == day]
        closing = opening + sum(e["amount_minor"] for e in todays)
        lines = [
            f":20:STMT{day:%Y%m%d}",
            f":25:{self.iban}",
            f":28C:{day.timetuple().tm_yday:05d}/1",
            _mt940_balance("60F", opening, day - timedelta(days=1), self.currency),
        ]
        for e in todays:
            mark = "C" if e["amount_minor"] >= 0 else "D"
            reference = _swift(e["customer_reference"] or "NONREF", 16) or "NONREF"
            lines.append(
                f":61:{day:%y%m%d}{day:%m%d}{mark}{_mt940_amount(e['amount_minor'])}"
                f"{e['type_code']}{reference}//{_swift(e['id'], 16)}"
            )
            lines.append(_swift(e["counterparty"], 34))
            # the bank's reference whole (the :61: field holds 16 characters), then the
            # customer's reference whole as /EREF/… (a payout's or an invoice's id is longer
            # than :61:'s 16), then the details
            eref = f" /EREF/{e['customer_reference']}" if e["customer_reference"] else ""
            lines.append(f":86:{_swift(e['id'] + eref + ' ' + e['details'], 6 * 65)}")
        lines.append(_mt940_balance("62F", closing, day, self.currency))
        lines.append(_mt940_balance("64", closing, day, self.currency))
        return "\r\n".join(lines) + "\r\n"


class _CreditRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    amount_minor: int = Field(gt=0, le=10**13)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")
    counterparty: str = Field(min_length=1, max_length=140)
    reference: str = Field(min_length=1, max_length=140)
    description: str = Field(default="", max_length=390)


class BankFake:
    """The fake's state: incoming wires in arrival order (each with its sequence number), bounded."""

    def __init__(self, settings: BankFakeSettings) -> None:
        self.settings = settings
        self._signers = [Webhook(secret) for secret in settings.signing_secrets]
        self.deliverer = Deliverer(
            name="bank-fake", signer=self._sign, settings=settings, user_agent="bank-fake-webhooks/1.0"
        )
        self.wires: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._seq: dict[str, int] = {}
        self._next_seq = 1
        self._idempotent: OrderedDict[str, tuple[str, str]] = OrderedDict()
        # Outgoing transfers, in acceptance order (each with its sequence number, for cursors).
        self.transfers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._transfer_seq: dict[str, int] = {}
        # Idempotency-Key -> (the request's fingerprint, the first answer's body).
        self._transfer_keys: OrderedDict[str, tuple[str, dict[str, Any]]] = OrderedDict()
        # The behaviour each pending transfer was given, and its scheduled decision.
        self._plans: dict[str, TransferRule] = {}
        self._decisions: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.rules: OrderedDict[str, tuple[TransferRule, dict[str, int]]] = OrderedDict()
        self.book = AccountBook(
            settings.receiver_iban, "TRY", settings.opening_balance_minor, settings.max_kept
        )

    def _sign(self, notification: Notification, timestamp: int) -> Mapping[str, str]:
        at = datetime.fromtimestamp(timestamp, tz=UTC)
        body = notification.body.decode()
        signatures = " ".join(s.sign(notification.event_id, at, body) for s in self._signers)
        return {
            "webhook-id": notification.event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures,
        }

    def notify(
        self,
        event_type: str,
        data: Mapping[str, Any],
        *,
        url: str | None = None,
        faults: Faults | None = None,
    ) -> str:
        """Send one Standard Webhooks notification ``{"type", "timestamp", "data"}`` (to ``url``,
        else the configured webhook URL); its ``msg_…`` id, which every retry keeps. ``faults``:
        this notification's own (else the current ``/_control/faults``)."""
        message_id = random_id("msg_")
        body = json.dumps({"type": event_type, "timestamp": iso_now(), "data": dict(data)}).encode()
        self.deliverer.submit(
            [Notification(message_id, event_type, url or self.settings.webhook_url, body)], faults
        )
        return message_id

    async def close(self) -> None:
        """Cancel the scheduled decisions and extra callbacks (the app's shutdown)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- outgoing transfers ------------------------------------------------------------------

    def add_rule(self, rule: TransferRule) -> dict[str, Any]:
        if rule.destination_iban is not None:
            rule = rule.model_copy(
                update={"destination_iban": _iban(rule.destination_iban, "destination_iban", 422)}
            )
        rule_id = random_id("rule_", 16)
        self.rules[rule_id] = (rule, {"matched": 0})
        while len(self.rules) > self.settings.max_kept:
            self.rules.popitem(last=False)
        log.info("transfer rule set", rule=rule_id, outcome=rule.outcome, times=rule.times)
        return self.rule_view(rule_id)

    def rule_view(self, rule_id: str) -> dict[str, Any]:
        rule, counts = self.rules[rule_id]
        return {"id": rule_id, **rule.model_dump(), "matched": counts["matched"]}

    def _plan_for(self, transfer: Mapping[str, Any]) -> TransferRule:
        """The rule that decides a new transfer (counted, and gone after its ``times``)."""
        best: tuple[int, int, str] | None = None
        for position, (rule_id, (rule, _)) in enumerate(self.rules.items()):
            if rule.matches(transfer):
                candidate = (rule.specificity(), position, rule_id)
                if best is None or candidate > best:
                    best = candidate
        if best is None:
            return TransferRule()
        rule_id = best[2]
        rule, counts = self.rules[rule_id]
        counts["matched"] += 1
        if rule.times is not None and counts["matched"] >= rule.times:
            del self.rules[rule_id]
        return rule

    def start_transfer(self, request: _TransferRequest, idempotency_key: str) -> tuple[dict[str, Any], bool]:
        """The answer to ``POST /v1/transfers`` and whether it is a replay of an earlier one."""
        destination = _iban(request.destination_iban, "destination_iban", 422)
        fingerprint = json.dumps(
            [request.amount_minor, request.currency.upper(), destination, request.description]
        )
        seen = self._transfer_keys.get(idempotency_key)
        if seen is not None:
            if seen[0] != fingerprint:
                raise _Problem(
                    422,
                    "idempotency_conflict",
                    "Idempotency key reused",
                    "Idempotency-Key: used before with another request",
                    field="Idempotency-Key",
                )
            return dict(seen[1]), True
        reference = random_id("trf_")
        transfer: dict[str, Any] = {
            "reference": reference,
            "client_reference": idempotency_key,
            "status": "pending",
            "amount_minor": request.amount_minor,
            "currency": request.currency.upper(),
            "destination_iban": destination,
            "description": request.description,
            "failure_reason": None,
            "created_at": iso_now(),
            "decided_at": None,
        }
        plan = self._plan_for(transfer)
        self.transfers[reference] = transfer
        self._transfer_seq[reference] = self._next_seq
        self._next_seq += 1
        while len(self.transfers) > self.settings.max_kept:
            old, _ = self.transfers.popitem(last=False)
            del self._transfer_seq[old]
            self._plans.pop(old, None)
            task = self._decisions.pop(old, None)
            if task is not None:
                task.cancel()
        self._transfer_keys[idempotency_key] = (fingerprint, dict(transfer))
        while len(self._transfer_keys) > self.settings.max_kept:
            self._transfer_keys.popitem(last=False)
        self._plans[reference] = plan
        if plan.outcome != "hold":
            delay_s = plan.delay_s if plan.delay_s is not None else self.settings.transfer_decide_after_s
            self._decisions[reference] = self._spawn(self._decide_later(reference, delay_s))
        log.info(
            "transfer accepted",
            transfer=reference,
            amount_minor=transfer["amount_minor"],
            currency=transfer["currency"],
            outcome=plan.outcome,
        )
        return dict(transfer), False

    async def _decide_later(self, reference: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        self._decisions.pop(reference, None)
        plan = self._plans.get(reference)
        if plan is not None and plan.outcome != "hold":
            self.decide(reference, plan.outcome, plan.failure_reason)

    def decide(
        self, reference: str, outcome: Literal["accept", "reject"], failure_reason: str
    ) -> dict[str, Any]:
        """Settle a pending transfer now: its status turns final, then its callback goes out
        (as its plan says: delayed, lost, duplicated)."""
        transfer = self.transfers.get(reference)
        if transfer is None:
            raise _Problem(404, "not_found", "Not found", f"no transfer {reference}")
        if transfer["status"] != "pending":
            raise _Problem(
                409, "already_decided", "Already decided", f"transfer {reference} is {transfer['status']}"
            )
        plan = self._plans.pop(reference, TransferRule())
        scheduled = self._decisions.pop(reference, None)
        if scheduled is not None and scheduled is not asyncio.current_task():
            scheduled.cancel()
        transfer["status"] = "succeeded" if outcome == "accept" else "failed"
        transfer["failure_reason"] = failure_reason if outcome == "reject" else None
        transfer["decided_at"] = iso_now()
        if transfer["status"] == "succeeded" and transfer["currency"] == self.book.currency:
            self.book.book(
                -transfer["amount_minor"],
                bank_reference=reference,
                customer_reference=transfer["client_reference"],
                counterparty=transfer["destination_iban"],
                details=transfer["description"] or "transfer",
            )
        self._report(transfer, plan)
        log.info("transfer decided", transfer=reference, status=transfer["status"])
        return dict(transfer)

    def _report(self, transfer: Mapping[str, Any], plan: TransferRule) -> None:
        event_type = TRANSFER_SUCCEEDED if transfer["status"] == "succeeded" else TRANSFER_FAILED
        url = self.settings.transfer_callback_url
        copies = max(1, plan.duplicate_callback)
        delay_s = plan.callback_delay_s
        if plan.lose_callback:
            self.notify(event_type, transfer, url=url, faults=Faults(drop=True))
        elif plan.duplicate_distinct_ids:
            # Each copy its own message (its own webhook-id): the receiver must see that they
            # are about the same transfer (its reference), not the same message.
            for copy in range(copies):
                faults = Faults(delay_s=delay_s + copy * plan.duplicate_gap_s)
                self.notify(event_type, transfer, url=url, faults=faults)
        elif plan.duplicate_gap_s > 0 and copies > 1:
            message_id = self.notify(event_type, transfer, url=url, faults=Faults(delay_s=delay_s))
            for copy in range(1, copies):
                wait_s = self.settings.notify_after_s + delay_s + copy * plan.duplicate_gap_s
                self._spawn(self._redeliver_later(message_id, wait_s))
        else:
            self.notify(event_type, transfer, url=url, faults=Faults(delay_s=delay_s, duplicate=copies))

    async def _redeliver_later(self, message_id: str, wait_s: float) -> None:
        await asyncio.sleep(wait_s)
        self.deliverer.redeliver(message_id)

    def list_transfers(self, query: Mapping[str, str]) -> dict[str, Any]:
        status = query.get("status")
        if status is not None and status not in ("pending", "succeeded", "failed"):
            raise _Problem(
                400,
                "invalid_parameter",
                "Invalid parameter",
                "status: pending, succeeded or failed",
                field="status",
            )
        client_reference = query.get("client_reference")
        return self._page(
            self.transfers,
            self._transfer_seq,
            query,
            kind="t",
            time_field="created_at",
            keep=lambda t: (
                (status is None or t["status"] == status)
                and (client_reference is None or t["client_reference"] == client_reference)
            ),
        )

    def receive_wire(self, request: _WireRequest, idempotency_key: str | None) -> dict[str, Any]:
        fingerprint = request.model_dump_json()
        if idempotency_key is not None and idempotency_key in self._idempotent:
            seen, wire_id = self._idempotent[idempotency_key]
            if seen != fingerprint:
                raise _Problem(
                    409,
                    "idempotency_conflict",
                    "Idempotency key reused",
                    "Idempotency-Key: used before with other parameters",
                )
            if wire_id in self.wires:
                return self.wires[wire_id]
        sender_iban = _iban(request.sender_iban, "sender_iban")
        receiver_iban = (
            _iban(request.receiver_iban, "receiver_iban")
            if request.receiver_iban
            else self.settings.receiver_iban
        )
        tckn = _tckn(request.sender_tckn) if request.sender_tckn else None
        wire: dict[str, Any] = {
            "id": random_id("wire_"),
            "status": "received",
            "amount_minor": request.amount_minor,
            "currency": request.currency.upper(),
            "sender_name": request.sender_name,
            "sender_iban": sender_iban,
            "sender_tckn": tckn,
            "reference": request.reference,
            "receiver_iban": receiver_iban,
            "received_at": iso_now(),
        }
        self.wires[wire["id"]] = wire
        self._seq[wire["id"]] = self._next_seq
        self._next_seq += 1
        while len(self.wires) > self.settings.max_kept:
            old, _ = self.wires.popitem(last=False)
            del self._seq[old]
        if idempotency_key is not None:
            self._idempotent[idempotency_key] = (fingerprint, wire["id"])
            while len(self._idempotent) > self.settings.max_kept:
                self._idempotent.popitem(last=False)
        if wire["receiver_iban"] == self.book.iban and wire["currency"] == self.book.currency:
            self.book.book(
                wire["amount_minor"],
                bank_reference=wire["id"],
                customer_reference=None,
                counterparty=wire["sender_name"],
                details=f"{wire['reference'] or ''} {wire['sender_iban']}".strip(),
            )
        message_id = self.notify(INCOMING_WIRE_RECEIVED, wire)
        log.info(
            "incoming wire",
            wire=wire["id"],
            amount_minor=wire["amount_minor"],
            currency=wire["currency"],
            message_id=message_id,
        )
        return wire

    def list_wires(self, query: Mapping[str, str]) -> dict[str, Any]:
        return self._page(self.wires, self._seq, query, kind="w", time_field="received_at")

    @staticmethod
    def _page(
        items: Mapping[str, dict[str, Any]],
        seq: Mapping[str, int],
        query: Mapping[str, str],
        *,
        kind: str,
        time_field: str,
        keep: Callable[[Mapping[str, Any]], bool] = lambda _: True,
    ) -> dict[str, Any]:
        """One page, oldest first: ``since`` (inclusive), ``limit``, ``cursor`` (after the last
        item of the previous page, by sequence number: stable while items are added)."""
        limit = _limit(query)
        since = _parse_since(query["since"]) if "since" in query else None
        after = _decode_cursor(query["cursor"], kind) if "cursor" in query else 0
        page: list[dict[str, Any]] = []
        last = 0
        has_more = False
        for item_id, item in items.items():
            if seq[item_id] <= after or not keep(item):
                continue
            if since is not None and datetime.fromisoformat(item[time_field]) < since:
                continue
            if len(page) == limit:
                has_more = True
                break
            page.append(item)
            last = seq[item_id]
        return {"data": page, "next_cursor": _encode_cursor(last, kind) if has_more else None}


def create_bank_fake_app(settings: BankFakeSettings | None = None) -> FastAPI:
    """The app; ``app.state.fake`` is its :class:`BankFake` (tests read it)."""
    settings = settings or get_bank_fake_settings()
    fake = BankFake(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await fake.deliverer.start()
        log.info("bank-fake started", webhook_url=settings.webhook_url, secrets=len(settings.signing_secrets))
        try:
            yield
        finally:
            await fake.close()
            await fake.deliverer.close()

    app = FastAPI(title="bank-fake", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.fake = fake
    app.include_router(control_router(lambda: fake.deliverer))

    @app.exception_handler(_Problem)
    async def problem(_: Request, exc: _Problem) -> JSONResponse:
        return JSONResponse(exc.body, status_code=exc.status, media_type=PROBLEM_JSON)

    def require_key(request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), settings.api_key.encode()
        ):
            raise _Problem(401, "unauthorized", "Unauthorized", "a valid bearer API key is required")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/topups")
    async def receive_wire(request: Request) -> dict[str, Any]:
        require_key(request)
        wire = _validated(_WireRequest, await request.body(), settings.max_body_bytes, 400)
        key = request.headers.get("idempotency-key")
        if key is not None and len(key) > 255:
            raise _Problem(400, "invalid_parameter", "Invalid parameter", "Idempotency-Key: too long")
        return fake.receive_wire(wire, key)

    @app.get("/v1/statements/{day}", response_class=PlainTextResponse)
    async def statement(day: date, request: Request) -> PlainTextResponse:
        """Our account's statement of ``day`` (UTC) in MT940."""
        require_key(request)
        return PlainTextResponse(fake.book.statement(day))

    # The fake's own: a credit to our account from another institution (a card provider's
    # payout, with its reference), as it would arrive.
    @app.post("/_control/credits", status_code=201)
    async def credit(request: Request) -> dict[str, Any]:
        body = _validated(_CreditRequest, await request.body(), settings.max_body_bytes, 400)
        if body.currency.upper() != fake.book.currency:
            raise _Problem(400, "invalid_parameter", "Invalid parameter", "currency: not this account's")
        entry = fake.book.book(
            body.amount_minor,
            bank_reference=random_id("crd_", 12),
            customer_reference=body.reference,
            counterparty=body.counterparty,
            details=body.description or body.reference,
        )
        return {**entry, "booked_at": entry["booked_at"].isoformat()}

    # The fake's own: a debit of our account by another institution (a provider collecting its
    # invoice by direct debit, with the invoice's number as the reference), as it would leave.
    @app.post("/_control/debits", status_code=201)
    async def debit(request: Request) -> dict[str, Any]:
        body = _validated(_CreditRequest, await request.body(), settings.max_body_bytes, 400)
        if body.currency.upper() != fake.book.currency:
            raise _Problem(400, "invalid_parameter", "Invalid parameter", "currency: not this account's")
        entry = fake.book.book(
            -body.amount_minor,
            bank_reference=random_id("dbt_", 12),
            customer_reference=body.reference,
            counterparty=body.counterparty,
            details=body.description or body.reference,
            type_code="NDDT",
        )
        return {**entry, "booked_at": entry["booked_at"].isoformat()}

    @app.get("/v1/incoming-wires")
    async def list_wires(request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.list_wires(request.query_params)

    @app.get("/v1/incoming-wires/{wire_id}")
    async def get_wire(wire_id: str, request: Request) -> dict[str, Any]:
        require_key(request)
        wire = fake.wires.get(wire_id)
        if wire is None:
            raise _Problem(404, "not_found", "Not found", f"no incoming wire {wire_id}")
        return wire

    @app.post("/v1/transfers", status_code=202)
    async def start_transfer(request: Request, response: Response) -> dict[str, Any]:
        require_key(request)
        key = request.headers.get("idempotency-key")
        if key is None:
            raise _Problem(
                400,
                "idempotency_key_missing",
                "Idempotency-Key required",
                "a transfer needs an Idempotency-Key header (your reference for it)",
                field="Idempotency-Key",
            )
        if not _IDEMPOTENCY_KEY.fullmatch(key):
            raise _Problem(
                400,
                "invalid_parameter",
                "Invalid parameter",
                "Idempotency-Key: 1 to 255 visible ASCII characters",
                field="Idempotency-Key",
            )
        # Field refusals are 422 here (the request is well-formed but cannot be carried out).
        transfer_request = _validated(_TransferRequest, await request.body(), settings.max_body_bytes, 422)
        transfer, replayed = fake.start_transfer(transfer_request, key)
        response.headers["Location"] = f"/v1/transfers/{transfer['reference']}"
        if replayed:
            response.headers["Idempotent-Replayed"] = "true"
        return transfer

    @app.get("/v1/transfers")
    async def list_transfers(request: Request) -> dict[str, Any]:
        require_key(request)
        return fake.list_transfers(request.query_params)

    @app.get("/v1/transfers/{reference}")
    async def get_transfer(reference: str, request: Request) -> dict[str, Any]:
        require_key(request)
        transfer = fake.transfers.get(reference)
        if transfer is None:
            raise _Problem(404, "not_found", "Not found", f"no transfer {reference}")
        return transfer

    # -- control: how transfers behave (tests; no key, as /_control/faults) ------------------

    @app.post("/_control/transfers", status_code=201)
    async def add_rule(rule: TransferRule) -> dict[str, Any]:
        return fake.add_rule(rule)

    @app.get("/_control/transfers")
    async def list_rules() -> dict[str, Any]:
        return {"data": [fake.rule_view(rule_id) for rule_id in fake.rules]}

    @app.delete("/_control/transfers", status_code=204)
    async def clear_rules() -> None:
        fake.rules.clear()

    @app.delete("/_control/transfers/{rule_id}", status_code=204)
    async def delete_rule(rule_id: str) -> None:
        if fake.rules.pop(rule_id, None) is None:
            raise _Problem(404, "not_found", "Not found", f"no rule {rule_id}")

    @app.post("/_control/transfers/{reference}/decide")
    async def decide(reference: str, decision: _Decision) -> dict[str, Any]:
        return fake.decide(reference, decision.outcome, decision.failure_reason)

    return app


@lru_cache(maxsize=1)
def get_bank_fake_settings() -> BankFakeSettings:
    return BankFakeSettings()


def run_bank_fake(port: int | None, host: str) -> None:
    """Serve bank-fake (the process entry point; the caller has set up logging)."""
    settings = get_bank_fake_settings()
    serve(create_bank_fake_app(settings), host, port or settings.port)
