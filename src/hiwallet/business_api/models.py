"""business-api's own request and answer shapes (promo programmes and grants, refunds, payments
received), as wallet-api takes and answers them; the common ones are contracts.public's."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictStr

from hiwallet.contracts.currency import Currency
from hiwallet.contracts.public import Amount, MovementOut, Reference, WalletId, WalletNumber
from hiwallet.core.text import PrintableText

__all__ = [
    "PROGRAMME_ID_PATTERN",
    "DailySummaryOut",
    "PaymentsOut",
    "ProgrammeIn",
    "ProgrammeOut",
    "ProgrammesOut",
    "PromoIn",
    "RefundIn",
]

PROGRAMME_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
ProgrammeId = Annotated[
    StrictStr,
    Field(pattern=PROGRAMME_ID_PATTERN, description="An accepted promo programme of the granting business."),
]
Name = Annotated[PrintableText, Field(min_length=1, max_length=140)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromoIn(_In):
    from_wallet: WalletId
    to_wallet_number: WalletNumber
    amount: Amount
    currency: Currency = "TRY"
    programme: ProgrammeId
    expires_at: AwareDatetime | None = Field(
        default=None, description="At most the programme's expiry, which it is when left out."
    )
    reference: Reference | None = None


class ProgrammeIn(_In):
    from_wallet: WalletId = Field(description="The business's wallet that funds the grants.")
    name: Name
    amount_per_customer: Amount
    budget_minor: Amount
    expires_at: AwareDatetime = Field(description="No grant after it, and no grant's promo outlives it.")


class RefundIn(_In):
    reference: Reference | None = None


class ProgrammeOut(BaseModel):
    id: str
    account_id: str
    wallet_id: str
    name: str
    currency: str
    amount_per_customer: int
    budget_minor: int
    remaining_minor: int
    expires_at: datetime
    status: Literal["proposed", "accepted", "refused"]
    proposed_by: str
    proposed_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    decision_reason: str | None


class ProgrammesOut(BaseModel):
    programmes: list[ProgrammeOut]
    next_cursor: str | None = None


class PaymentsOut(BaseModel):
    wallet_id: str
    kind: Literal["payment", "refund", "all"]
    lines: list[MovementOut] = Field(
        description="The wallet's movements of this kind from one page of its statement: a page may "
        "hold fewer than ``limit`` (or none) while ``next_cursor`` is set."
    )
    next_cursor: str | None


class DaySummaryOut(BaseModel):
    day: date = Field(description="The UTC day")
    currency: Currency
    account_id: str | None
    transactions: int = Field(description="Transactions that moved the account's wallets that day")
    volume_in_minor: int = Field(description="What came into its wallets")
    volume_out_minor: int = Field(description="What went out of them")
    fees_minor: int = Field(description="The fees taken in those transactions")
    computed_at: datetime


class DailySummaryOut(BaseModel):
    days: list[DaySummaryOut]
