"""business-api's own answer shapes (payments received); the others, its promo programmes and
grants and refunds included, are contracts.public's (wallet-api's own)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from hiwallet.contracts.public import MovementOut

__all__ = ["PaymentsOut"]


class PaymentsOut(BaseModel):
    wallet_id: str
    kind: Literal["payment", "refund", "all"]
    lines: list[MovementOut] = Field(
        description="The wallet's movements of this kind from one page of its statement: a page may "
        "hold fewer than ``limit`` (or none) while ``next_cursor`` is set."
    )
    next_cursor: str | None
