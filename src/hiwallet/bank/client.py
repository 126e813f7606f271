"""The bank's transfer API, as CONTRACT-11 (Part D) describes bank-fake's:

- ``POST /v1/transfers`` {amount_minor, currency, destination_iban, description} with
  ``Idempotency-Key`` (our command id): 202 {reference, status "pending", client_reference, …};
  the same key and body again → the same answer (a command redelivered after a crash between
  the bank's answer and our commit gets the same reference). 422 (an IBAN the bank refuses):
  the transfer will not happen.
- ``GET /v1/transfers/{reference}`` → {reference, client_reference, status pending | succeeded
  | failed, failure_reason}.

Every answer is translated here: :class:`Accepted`, :class:`Refused`, :class:`TransferStatus`;
:class:`BankUnavailable` for what a later attempt can cure (the bank away, 5xx, 429, 409 in
flight, a key it refuses: configuration), :class:`BankProtocolError` for what no retry cures
(our request malformed, an idempotency key reused with another body, an answer that is not the
contract's). Nothing of a body is logged or put into an error but the bank's problem ``code``.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

import httpx
import structlog

from hiwallet.bank.settings import BankSettings
from hiwallet.contracts.withdrawals import StartBankTransfer
from hiwallet.core.http.client import AiohttpTransport

log = structlog.get_logger(__name__)

_CODE = re.compile(r"[a-z0-9_\-]{1,64}")
_REFERENCE = re.compile(r"[A-Za-z0-9:_.\-|]{1,200}")
# The bank's problem codes that say the request itself will never be accepted: the transfer is
# refused (a 400 for them too: bank-fake's incoming wires answer a bad IBAN 400).
REFUSAL_CODES = frozenset({"invalid_iban", "invalid_destination", "invalid_currency", "invalid_amount"})
FINAL_STATUSES = frozenset({"succeeded", "failed"})


class BankUnavailable(Exception):
    """Not answered, or answered something a later attempt can cure: the consumer pauses (the
    command is not dead-lettered), the reconciliation leaves the transfer for the next round."""


class BankProtocolError(Exception):
    """An answer no retry changes and that says nothing about the transfer: a defect on one
    side (the command is dead-lettered after its attempts, for an operator)."""


@dataclass(frozen=True)
class Accepted:
    reference: str


@dataclass(frozen=True)
class Refused:
    """The bank will not make this transfer (``reason``: its problem code)."""

    reason: str


@dataclass(frozen=True)
class TransferStatus:
    reference: str
    status: str  # pending | succeeded | failed
    failure_reason: str | None


def _code(response: httpx.Response) -> str:
    """The problem's machine code (bounded, checked), else the status."""
    try:
        body = response.json()
    except ValueError:
        body = None
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) and _CODE.fullmatch(code) else f"http_{response.status_code}"


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise BankProtocolError(f"{what}: the answer is not JSON") from exc
    if not isinstance(body, dict):
        raise BankProtocolError(f"{what}: the answer is not a JSON object")
    return body


class BankClient:
    def __init__(self, client: httpx.AsyncClient, *, attempts: int = 3, backoff_s: float = 0.2) -> None:
        self.client = client
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s

    @classmethod
    def from_settings(
        cls, settings: BankSettings, transport: httpx.AsyncBaseTransport | None = None
    ) -> BankClient:
        client = httpx.AsyncClient(
            base_url=settings.bank_url,
            headers={"authorization": f"Bearer {settings.bank_api_key.get_secret_value()}"},
            timeout=httpx.Timeout(settings.bank_timeout_s),
            # aiohttp's pool under httpx's API: a call in every withdrawal, at a fraction of
            # httpx's own pool's CPU (core/http/client.py says how much)
            transport=transport or AiohttpTransport(max_connections=settings.bank_max_connections),
        )
        return cls(client, attempts=settings.bank_attempts, backoff_s=settings.bank_retry_backoff_s)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def start_transfer(self, command: StartBankTransfer) -> Accepted | Refused:
        """Ask for the transfer (``command_id`` as the Idempotency-Key), ``attempts`` times at
        most while the bank is unavailable; then :class:`BankUnavailable`."""
        body = {
            "amount_minor": command.amount_minor,
            "currency": command.currency,
            "destination_iban": command.destination_iban,
            "description": f"HiWallet withdrawal {command.saga_id}",
        }
        headers = {"idempotency-key": command.command_id}
        for attempt in range(1, self.attempts + 1):
            try:
                return await self._start(body, headers)
            except BankUnavailable as exc:
                log.warning(
                    "bank did not take the transfer",
                    command_id=command.command_id,
                    attempt=attempt,
                    error=str(exc),
                )
                if attempt == self.attempts:
                    raise
            await asyncio.sleep(self.backoff_s * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _start(self, body: dict[str, Any], headers: dict[str, str]) -> Accepted | Refused:
        try:
            response = await self.client.post("/v1/transfers", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise BankUnavailable(f"POST /v1/transfers: {type(exc).__name__}") from exc
        status = response.status_code
        if 200 <= status < 300:
            answer = _json_object(response, "POST /v1/transfers")
            reference = answer.get("reference")
            if not isinstance(reference, str) or not _REFERENCE.fullmatch(reference):
                raise BankProtocolError("POST /v1/transfers: no usable reference in the answer")
            return Accepted(reference)
        code = _code(response)
        if "idempotency" in code:
            # Our key with another body: the first request may be a transfer under way. Never
            # "refused" (that would refund money the bank may send): an operator looks.
            raise BankProtocolError(f"POST /v1/transfers: {status} {code}")
        if status == 422 or (status == 400 and code in REFUSAL_CODES):
            return Refused(code)
        if status in (408, 409, 425, 429) or status >= 500 or status in (401, 403, 404):
            # the bank busy, or in flight with this key; or our key or URL misconfigured, which
            # an operator fixes without losing the command
            raise BankUnavailable(f"POST /v1/transfers: {status} {code}")
        raise BankProtocolError(f"POST /v1/transfers: {status} {code}")

    async def transfer_status(self, reference: str) -> TransferStatus | None:
        """What the bank says of a transfer now; None when it knows no such reference."""
        try:
            response = await self.client.get(f"/v1/transfers/{reference}")
        except httpx.HTTPError as exc:
            raise BankUnavailable(f"GET /v1/transfers: {type(exc).__name__}") from exc
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise BankUnavailable(f"GET /v1/transfers: {response.status_code} {_code(response)}")
        answer = _json_object(response, "GET /v1/transfers")
        status = answer.get("status")
        reason = answer.get("failure_reason")
        if status not in ("pending", *FINAL_STATUSES):
            raise BankProtocolError("GET /v1/transfers: no known status in the answer")
        return TransferStatus(
            reference, str(status), reason[:500] if isinstance(reason, str) and reason else None
        )
