"""business-api's own answer shapes (payments received, the daily summary); the others, its
promo programmes and grants and refunds included, are contracts.public's (wallet-api's own)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

from hiwallet.contracts.currency import Currency
from hiwallet.contracts.public import MovementOut

__all__ = ["DailySummaryOut", "PaymentsOut"]


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
