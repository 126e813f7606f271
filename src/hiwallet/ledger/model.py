"""What the ledger takes and gives: legs, postings, results and read models."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class TxType(StrEnum):
    TOPUP = "topup"
    P2P = "p2p"
    PAYMENT = "payment"
    B2P = "b2p"
    B2B = "b2b"
    PROMO_GRANT = "promo_grant"
    PROMO_EXPIRY = "promo_expiry"
    WITHDRAWAL = "withdrawal"
    REFUND = "refund"
    SETTLEMENT_TOPUP = "settlement_topup"
    SETTLEMENT_WITHDRAWAL = "settlement_withdrawal"
    PROVIDER_INVOICE = "provider_invoice"
    HOLD_CAPTURE = "hold_capture"
    DEBIT = "debit"
    SWEEP = "sweep"
    GOODWILL = "goodwill"


# What a refund may reverse. Promo movements, settlements and refunds themselves have their own
# corrections (expiry, another settlement), so refunding them would double-count.
REFUNDABLE = frozenset(
    {
        TxType.TOPUP,
        TxType.P2P,
        TxType.PAYMENT,
        TxType.B2P,
        TxType.B2B,
        TxType.WITHDRAWAL,
        TxType.HOLD_CAPTURE,
        TxType.DEBIT,
    }
)


@dataclass(frozen=True, slots=True)
class Leg:
    """One line to be: ``amount`` in minor units, credit +, debit − (never reversed)."""

    account: str
    amount: int
    currency: str


# The request hash's JSON, byte for byte what json.dumps(content, sort_keys=True,
# separators=(",", ":"), default=str) writes: one encoder made once (json.dumps with any of
# these arguments builds a new JSONEncoder a call, 5 of a posting's ~12 µs of hashing).
_REQUEST_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Posting:
    """One ledger transaction, ready for :meth:`LedgerStore.post`.

    ``id`` starts with the home bucket (``NNNN:``). ``options`` carry what the posting function
    decides under its locks (promo split, batch expiry, hold capture); the legs they refer to
    are given by index and may carry a placeholder amount of 0.
    """

    id: str
    type: TxType
    actor: str
    ref: str
    legs: tuple[Leg, ...]
    refund_of: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    # What makes two requests "the same" for idempotency; by default everything asked for.
    fingerprint: tuple[Any, ...] | None = None

    @property
    def home_bucket(self) -> int:
        return int(self.id[:4])

    def request_hash(self) -> bytes:
        content: Any = self.fingerprint
        if content is None:
            content = [
                self.type.value,
                self.actor,
                self.ref,
                self.refund_of,
                [[leg.account, leg.amount, leg.currency] for leg in self.legs],
                self.options,
                self.metadata,
            ]
        return hashlib.sha256(_REQUEST_JSON.encode(content).encode()).digest()


@dataclass(frozen=True, slots=True)
class LineResult:
    account: str
    version: int
    amount: int
    balance_after: int


@dataclass(frozen=True, slots=True)
class PostResult:
    id: str
    replayed: bool
    posted_at: datetime
    lines: tuple[LineResult, ...]

    def line_of(self, account: str) -> LineResult | None:
        return next((line for line in self.lines if line.account == account), None)


@dataclass(frozen=True, slots=True)
class AccountState:
    id: str
    bucket: int
    role: str
    purse: str | None
    currency: str
    owner: str | None
    balance: int
    held: int
    version: int

    @property
    def available(self) -> int:
        return self.balance - self.held


@dataclass(frozen=True, slots=True)
class WalletBalance:
    wallet_id: str
    currency: str
    cash: int
    promo: int  # the promo account's balance (the book): expired batches not yet returned too
    held: int
    # What batches past their expiry still hold: the expiry job returns it to their funders;
    # until then it is in ``promo`` but never spent (the payment path takes live batches only).
    promo_expired: int = 0

    @property
    def promo_live(self) -> int:
        """The promo the wallet can spend now: what is shown to its customer as promo."""
        return self.promo - self.promo_expired

    @property
    def available(self) -> int:
        """What the wallet can spend now: cash not held, plus live promo (never expired promo,
        even before the expiry job has returned it)."""
        return self.cash - self.held + self.promo_live


@dataclass(frozen=True, slots=True)
class StatementLine:
    account: str
    version: int
    transaction_id: str
    type: str
    ref: str
    amount: int
    currency: str
    balance_after: int
    posted_at: datetime


@dataclass(frozen=True, slots=True)
class Statement:
    lines: tuple[StatementLine, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class TransactionView:
    id: str
    type: str
    actor: str
    ref: str
    refund_of: str | None
    posted_at: datetime
    metadata: dict[str, Any]
    legs: tuple[StatementLine, ...]


@dataclass(frozen=True, slots=True)
class HoldResult:
    account: str
    key: str
    status: str
    amount: int
    held: int
    balance: int
    replayed: bool


@dataclass(frozen=True, slots=True)
class PromoBatch:
    id: str
    account: str
    funder_account: str
    funded_by: str
    amount: int
    remaining: int
    expires_at: datetime
    grant_transaction_id: str
