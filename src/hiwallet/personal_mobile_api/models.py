"""personal-mobile-api's own answer shapes (its limits); the registration and verification ones
are contracts.onboarding_api's (onboarding's own), the money ones contracts.public's."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["LimitOut", "LimitsOut"]


class LimitOut(BaseModel):
    kind: Literal["transfer", "payment"]
    currency: str
    limit_minor: int = Field(description="What the tier allows this calendar month (UTC); 0: not allowed.")
    used_minor: int
    remaining_minor: int


class LimitsOut(BaseModel):
    account_id: str
    tier: str | None
    month: str = Field(description="YYYY-MM (UTC)")
    limits: list[LimitOut]
