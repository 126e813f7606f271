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
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import orjson
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, StrictStr

from hiwallet.contracts.events import EVENTS_EXCHANGE, SETTLEMENT_REPORTED
from hiwallet.core.broker import OutgoingMessage
from hiwallet.core.ids import derived_id

__all__ = [
    "MAX_LINES",
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
    )
    return OutgoingMessage(
        message_id=body.settlement_id,
        exchange=exchange,
        routing_key=SETTLEMENT_REPORTED,
        type=SettlementReported.__name__,
        body=orjson.dumps(body.model_dump(mode="json")),
    )
