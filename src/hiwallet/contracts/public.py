"""What the front APIs show their clients: the public shapes of wallet-api's and the
withdrawal orchestrator's answers and requests, as personal-mobile-api and business-api
document them (services do not import each other; the two front APIs share these).

They say what the internal services accept and answer, field for field, minus what a client
must not see (a transfer's legs name ledger accounts: dropped, :func:`public_transfer`). The
requests (and the answers without anything internal) are the internal services' own: wallet-api
and the withdrawal orchestrator validate with these very models, so a request the front API
documents as valid is one the internal service takes, and one it documents as invalid is
refused there with the same 422.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr

from hiwallet.contracts.currency import Currency
from hiwallet.core.http.idempotency import IDEMPOTENCY_KEY_PATTERN
from hiwallet.core.text import PrintableText

__all__ = [
    "ACCOUNT_ID_PATTERN",
    "IDEMPOTENCY_KEY_PATTERN",
    "MAX_AMOUNT_MINOR",
    "MAX_STATEMENT_PAGE",
    "PROGRAMME_ID_PATTERN",
    "TRANSFER_ID_PATTERN",
    "WALLET_ID_PATTERN",
    "WALLET_NUMBER_PATTERN",
    "WITHDRAWAL_ID_PATTERN",
    "WITHDRAWAL_WALLET_PATTERN",
    "AccountOut",
    "AccountsOut",
    "Amount",
    "BalanceDayOut",
    "BalanceHistoryOut",
    "CounterpartyOut",
    "LimitOut",
    "LimitsOut",
    "LineOut",
    "MovementOut",
    "MovementsOut",
    "Name",
    "PostedTransfer",
    "Problem",
    "ProgrammeIn",
    "ProgrammeOut",
    "ProgrammesOut",
    "PromoBatchOut",
    "PromoBatchesOut",
    "PromoIn",
    "Reference",
    "RefundIn",
    "TransferIn",
    "TransferOut",
    "WalletId",
    "WalletNumber",
    "WalletOut",
    "WalletOverviewOut",
    "WalletRefOut",
    "WithdrawalIn",
    "WithdrawalOut",
    "WithdrawalsOut",
    "public_transfer",
    "whole_number",
]

ACCOUNT_ID_PATTERN = r"^[0-9]{4}:a:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
WALLET_ID_PATTERN = r"^[0-9]{4}:w:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
TRANSFER_ID_PATTERN = r"^[0-9]{4}:[A-Za-z0-9:_.\-]{1,95}$"
WALLET_NUMBER_PATTERN = r"^[0-9]{16}$"
WITHDRAWAL_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
WITHDRAWAL_WALLET_PATTERN = r"^[A-Za-z0-9:_.\-|]{1,200}$"
MAX_AMOUNT_MINOR = 10**15
MAX_STATEMENT_PAGE = 500
PROGRAMME_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def whole_number(value: object) -> object:
    """An integral float as the integer (a ``BeforeValidator`` of a ``StrictInt``)."""
    # JSON has one number type: 18259.0 is the integer 18259, and JSON Schema's "integer" admits
    # it, so the services do too. 18259.5, a string or a boolean is still refused (StrictInt).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Amount = Annotated[
    StrictInt,
    Field(gt=0, le=MAX_AMOUNT_MINOR, description="Minor units (kuruş, cents); 1250.0 is read as 1250."),
    BeforeValidator(whole_number),
]
Reference = Annotated[PrintableText, Field(min_length=1, max_length=140)]
Name = Annotated[PrintableText, Field(min_length=1, max_length=140)]
WalletId = Annotated[StrictStr, Field(pattern=WALLET_ID_PATTERN)]
WalletNumber = Annotated[
    StrictStr, Field(pattern=WALLET_NUMBER_PATTERN, description="16 digits, the last a Luhn check digit.")
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TransferIn(_In):
    from_wallet: WalletId
    to_wallet_number: WalletNumber
    amount: Amount
    currency: Currency = "TRY"
    reference: Reference | None = None


class WithdrawalIn(_In):
    wallet: Annotated[StrictStr, Field(pattern=WITHDRAWAL_WALLET_PATTERN)]
    amount_minor: Amount
    # The document's enum is the service's setting (``declare_currencies``): a code of the right
    # shape that is not one of them is 422 unsupported-currency, which the document would not say.
    currency: Currency
    destination_iban: Annotated[
        StrictStr, Field(min_length=15, max_length=50, description="The IBAN, with or without spaces.")
    ]


ProgrammeId = Annotated[
    StrictStr,
    Field(pattern=PROGRAMME_ID_PATTERN, description="An accepted promo programme of the granting business."),
]


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


class WalletRefOut(BaseModel):
    id: str
    number: str
    currency: str


class AccountOut(BaseModel):
    id: str
    kind: Literal["personal", "business"]
    tier: Literal["unknown", "unverified", "verified", "contracted"] | None
    name: str | None
    created_at: datetime
    wallets: list[WalletRefOut]


class AccountsOut(BaseModel):
    accounts: list[AccountOut]


class WalletOut(WalletRefOut):
    account_id: str
    cash: int
    promo: int
    held: int
    available: int


class CounterpartyOut(BaseModel):
    """The other wallet of a movement: its number, and a business's name (a person's is not
    shown)."""

    wallet_number: str
    kind: Literal["personal", "business"]
    name: str | None


class LineOut(BaseModel):
    transaction_id: str
    type: str
    reference: str
    amount: int
    currency: str
    balance_after: int
    version: int
    posted_at: datetime
    counterparty: CounterpartyOut | None = Field(
        description="The other wallet of a transfer, a payment or a refund; null for a top-up, "
        "a withdrawal, a promo grant."
    )


class MovementOut(LineOut):
    # A statement's line as a client sees it: the same, the transaction described (the field
    # keeps its place).
    transaction_id: str = Field(description="The transfer: GET /v1/transfers/{transaction_id}.")


class MovementsOut(BaseModel):
    wallet_id: str
    purse: Literal["cash", "promo"]
    lines: list[MovementOut]
    next_cursor: str | None


class BalanceDayOut(BaseModel):
    day: date
    balance: int = Field(description="The cash at the end of the day (UTC), in minor units.")


class BalanceHistoryOut(BaseModel):
    wallet_id: str
    currency: str
    days: list[BalanceDayOut]


class PromoBatchOut(BaseModel):
    id: str
    funded_by: str
    amount: int
    remaining: int
    expires_at: datetime
    grant_transaction_id: str


class PromoBatchesOut(BaseModel):
    wallet_id: str
    batches: list[PromoBatchOut]


class WalletOverviewOut(WalletOut):
    """A wallet's balances, live promo batches and daily cash in one answer: what a home page
    shows of it (the three reads of GET /v1/wallets/{id}, /promos and /balances, once)."""

    batches: list[PromoBatchOut]
    days: list[BalanceDayOut]


class PostedTransfer(BaseModel):
    """What every view of a posted transfer holds (wallet-api's own adds its ledger legs)."""

    id: str
    type: str
    status: Literal["posted"]
    from_wallet: str | None
    to_wallet: str | None
    amount: int
    currency: str
    fee: int
    promo_used: int
    reference: str
    refund_of: str | None
    posted_at: datetime


class TransferOut(PostedTransfer):
    """A transfer as a client sees it: who paid whom, how much, the fee; not its ledger legs."""

    expires_at: datetime | None = None


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


class WithdrawalOut(BaseModel):
    id: str
    state: str
    wallet: str
    amount_minor: int
    fee_minor: int | None
    currency: str
    destination_iban: str = Field(description="Masked: the country and the last four characters.")
    reason: str | None
    created_at: str
    state_changed_at: str


class WithdrawalsOut(BaseModel):
    wallet: str
    withdrawals: list[WithdrawalOut]
    next_cursor: str | None


class Problem(BaseModel):
    """RFC 9457 problem details; extra members carry what a client needs (e.g. ``balance``)."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


def public_transfer(body: Any) -> Any:
    """wallet-api's transfer without its legs (they name the ledger's accounts)."""
    if isinstance(body, dict):
        body.pop("legs", None)
    return body
