"""A provider's payout as a message: ``SettlementReported`` (routing key ``settlement.reported``
on ``hiwallet.events``, queue ``hiwallet.wallet.settlements``), published through its outbox by
the service that owns the provider's connection (topup-webhook for Stripe), once per payout,
and posted by wallet-consumer: clearing +gross, nostro −net, and in the net model
provider_expense −fee (the ledger's ``settlement_topup``).

Each line is one balance transaction of the payout as the provider reported it: ``gross_minor``,
``fee_minor``, ``net_minor`` and, for a card payment, the payment's id at the provider and the
top-up's id as topup-webhook derived it (``payment_id``). A line the importer could not tie to
a payment carries neither: wallet-consumer records it as a finding, it posts nothing. The
message id is derived from (provider, payout id): however often the payout is read, one
message, and a consumer deduplicates by it.

The bank's day (provider ``bank``, payout ``statement-YYYYMMDD``) carries the whole statement
besides its wire lines (``statement``): every movement of our account that day, credits and
debits, signed as the bank sees them (+ in, − out), with the day's opening and closing balance.
wallet-consumer keeps it in the same transaction as the wires' settlement, and reconciliation
matches it against the nostro (docs/operations.md, "The nostro against the bank's statement").
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal

import orjson
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, StrictStr

from hiwallet.contracts.events import EVENTS_EXCHANGE, SETTLEMENT_REPORTED
from hiwallet.core.broker import OutgoingMessage
from hiwallet.core.ids import derived_id

__all__ = [
    "MAX_LINES",
    "BankStatement",
    "BankStatementLine",
    "SettlementLine",
    "SettlementReported",
    "settlement_id",
    "settlement_reported",
]

# A payout's lines in one message (a bigger payout is a defect to look at, not to post).
MAX_LINES = 5_000
_ID = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9:_.\-]+$")]
_AMOUNT = Annotated[StrictInt, Field(ge=-(10**15), le=10**15)]


class SettlementLine(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    line_id: _ID  # the provider's balance transaction id
    type: Annotated[StrictStr, Field(min_length=1, max_length=50)]  # charge, refund, adjustment …
    provider_payment_id: _ID | None = None
    payment_id: _ID | None = None
    gross_minor: _AMOUNT
    fee_minor: _AMOUNT
    net_minor: _AMOUNT


class BankStatementLine(BaseModel):
    """One movement of our account on the bank's statement. No counterparty (a person's name
    and IBAN stay at the bank and in bank-adapter's copy of the statement)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    bank_reference: _ID  # wire_…, trf_…, crd_…, dbt_…: the bank's own
    # the reference the other side gave it (a payout's id, an invoice's number, our transfer's
    # Idempotency-Key), as the statement writes it (SWIFT characters)
    customer_reference: Annotated[StrictStr, Field(min_length=1, max_length=140)] | None = None
    amount_minor: _AMOUNT  # + credited, − debited
    booked_on: date
    # a transfer out: the withdrawal saga whose transfer it is (bank-adapter's bank.transfers)
    saga_id: _ID | None = None


class BankStatement(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    day: date
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    opening_minor: _AMOUNT
    closing_minor: _AMOUNT
    lines: Annotated[list[BankStatementLine], Field(max_length=MAX_LINES)]


class SettlementReported(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    settlement_id: _ID
    provider: Annotated[StrictStr, Field(pattern=r"^[a-z][a-z0-9_\-]{0,30}$")]
    payout_id: _ID
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    # gross: the provider pays out whole and invoices its fee; net: it keeps the fee
    model: Literal["gross", "net"]
    amount_minor: Annotated[StrictInt, Field(ge=0, le=10**15)]  # what reached the bank
    paid_at: AwareDatetime
    lines: Annotated[list[SettlementLine], Field(max_length=MAX_LINES)]
    # the bank's day only: the whole statement (reconciliation's); None for a card provider
    statement: BankStatement | None = None


def settlement_id(provider: str, payout_id: str) -> str:
    """The message's id for a payout: the same every time (one payout, one message)."""
    return derived_id("settlement", provider, payout_id)


def settlement_reported(
    *,
    provider: str,
    payout_id: str,
    currency: str,
    model: Literal["gross", "net"],
    amount_minor: int,
    paid_at: datetime,
    lines: list[SettlementLine],
    exchange: str = EVENTS_EXCHANGE,
    statement: BankStatement | None = None,
) -> OutgoingMessage:
    """The ``SettlementReported`` message for the outbox."""
    body = SettlementReported(
        settlement_id=settlement_id(provider, payout_id),
        provider=provider,
        payout_id=payout_id,
        currency=currency,
        model=model,
        amount_minor=amount_minor,
        paid_at=paid_at,
        lines=lines,
        statement=statement,
    )
    return OutgoingMessage(
        message_id=body.settlement_id,
        exchange=exchange,
        routing_key=SETTLEMENT_REPORTED,
        type=SettlementReported.__name__,
        body=orjson.dumps(body.model_dump(mode="json")),
    )
