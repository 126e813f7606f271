"""Posting rules: one pure function per transaction type of the legs table (docs/ledger.md,
"Transaction types and their legs"). Each validates its input and returns a :class:`Posting`;
none touches the database.

Sign convention: credit +, debit −. Every rule's legs sum to zero per currency (asserted here,
and enforced again by the database at commit).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hiwallet.core.ids import derived_id
from hiwallet.core.text import has_control_characters
from hiwallet.ledger.accounts import (
    BUCKETS,
    CENTRAL_BUCKET,
    Role,
    bucket_of,
    cash_account,
    check_currency,
    promo_account,
    system_account,
)
from hiwallet.ledger.errors import InvalidPosting, LedgerInternalError, NotRefundable
from hiwallet.ledger.model import REFUNDABLE, Leg, Posting, TransactionView, TxType

# Larger than any sane amount and far below bigint's limit, so sums of many legs cannot overflow.
MAX_AMOUNT_MINOR = 10**15
MAX_TEXT = 200
MAX_KEY = 90
_KEY = re.compile(r"^[A-Za-z0-9:_.\-]+$")
_PERIOD = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")  # a billing month, YYYY-MM


@dataclass(frozen=True, slots=True)
class FeePolicy:
    """A fee: ``bps`` of the amount (rounded half up), at least ``min_minor``, plus ``fixed_minor``."""

    bps: int = 0
    min_minor: int = 0
    fixed_minor: int = 0

    def fee(self, amount: int) -> int:
        proportional = (amount * self.bps + 5_000) // 10_000
        return max(proportional, self.min_minor) + self.fixed_minor


# ---------------------------------------------------------------------------------------------
# Validation: every rule checks what it is given before anything is built.
# ---------------------------------------------------------------------------------------------


def check_amount(amount: object, field: str = "amount") -> int:
    # bool is an int in Python; True is not one kuruş.
    if not isinstance(amount, int) or isinstance(amount, bool):
        raise InvalidPosting(f"{field} must be an integer number of minor units", field=field)
    if amount <= 0:
        raise InvalidPosting(f"{field} must be positive", field=field, value=amount)
    if amount > MAX_AMOUNT_MINOR:
        raise InvalidPosting(f"{field} is too large", field=field, value=amount)
    return amount


def check_text(value: object, field: str, max_length: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidPosting(f"{field} must be a non-empty string", field=field)
    if len(value) > max_length:
        raise InvalidPosting(f"{field} is longer than {max_length}", field=field, max_length=max_length)
    if has_control_characters(value):
        # NUL cannot be stored (PostgreSQL's text refuses it) and the others should not be.
        raise InvalidPosting(f"{field} must not hold control characters", field=field)
    return value


def check_key(key: object) -> str:
    key = check_text(key, "key", MAX_KEY)
    if not _KEY.match(key):
        raise InvalidPosting("key may hold letters, digits and : _ . - only", field="key")
    return key


def transaction_id(home_bucket: int, key: str) -> str:
    """A transaction's id: the client's key, scoped to the home bucket it posts in."""
    return f"{home_bucket:04d}:{check_key(key)}"


def _posting(
    key: str,
    home: int,
    type_: TxType,
    actor: str,
    ref: str,
    legs: Sequence[Leg],
    **extra: Any,
) -> Posting:
    posting = Posting(
        id=transaction_id(home, key),
        type=type_,
        actor=check_text(actor, "actor"),
        ref=check_text(ref, "ref"),
        legs=tuple(legs),
        **extra,
    )
    assert_balanced(posting.legs)
    return posting


def assert_balanced(legs: Iterable[Leg]) -> None:
    """The Python half of the balanced-transaction rule (the database holds the other half)."""
    totals: dict[str, int] = defaultdict(int)
    for leg in legs:
        totals[leg.currency] += leg.amount
    unbalanced = {c: t for c, t in totals.items() if t != 0}
    # Placeholder legs (0) are filled under the locks; rules build them so totals still hold.
    if unbalanced:  # a defect of a rule, never of the request: not a refusal (a 500)
        raise LedgerInternalError(f"posting rule built unbalanced legs: {unbalanced}")


def _distinct_wallets(a: str, b: str) -> None:
    if a == b:
        raise InvalidPosting("a wallet cannot send to itself", field="to")


# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------


def topup(
    key: str, wallet: str, amount: int, currency: str, *, provider: str, actor: str, ref: str
) -> Posting:
    """wallet +100, clearing −100: the provider owes us what it took from the customer."""
    amount, currency, b = check_amount(amount), check_currency(currency), bucket_of(wallet)
    clearing = system_account(Role.CLEARING, currency, bucket=b, provider=provider)
    legs = [Leg(cash_account(wallet), amount, currency), Leg(clearing, -amount, currency)]
    return _posting(key, b, TxType.TOPUP, actor, ref, legs, metadata={"provider": provider})


def transfer(
    key: str,
    sender: str,
    receiver: str,
    amount: int,
    currency: str,
    *,
    actor: str,
    ref: str,
    type_: TxType = TxType.P2P,
) -> Posting:
    """p2p (and B2P, B2B): sender −100, receiver +100, cash to cash."""
    if type_ not in (TxType.P2P, TxType.B2P, TxType.B2B):
        raise InvalidPosting(f"{type_} is not a transfer type", field="type")
    amount, currency = check_amount(amount), check_currency(currency)
    _distinct_wallets(sender, receiver)
    home = bucket_of(sender)
    bucket_of(receiver)
    legs = [
        Leg(cash_account(sender), -amount, currency),
        Leg(cash_account(receiver), amount, currency),
    ]
    return _posting(key, home, type_, actor, ref, legs)


def payment(
    key: str,
    payer: str,
    merchant: str,
    amount: int,
    currency: str,
    *,
    fee: FeePolicy,
    actor: str,
    ref: str,
) -> Posting:
    """payer −102, merchant +100, revenue +2; promo is spent before cash.

    The split between the payer's promo and cash is decided by the posting function under the
    payer's lock (earliest-expiring batch first): promo −40, cash −62 when 40 of promo is live.
    """
    amount, currency = check_amount(amount), check_currency(currency)
    _distinct_wallets(payer, merchant)
    home = bucket_of(payer)
    bucket_of(merchant)
    fee_minor = fee.fee(amount)
    total = amount + fee_minor
    legs = [
        Leg(promo_account(payer), 0, currency),  # filled under the lock
        Leg(cash_account(payer), -total, currency),  # less what promo covers
        Leg(cash_account(merchant), amount, currency),
    ]
    if fee_minor:
        legs.append(Leg(system_account(Role.REVENUE, currency, bucket=home), fee_minor, currency))
    return _posting(
        key,
        home,
        TxType.PAYMENT,
        actor,
        ref,
        legs,
        # 1-based leg positions: the posting function is PL/pgSQL
        options={"spend_promo": {"promo_leg": 1, "cash_leg": 2, "total": total}},
        metadata={"fee": fee_minor},
    )


def wallet_transfer(
    key: str,
    sender: str,
    receiver: str,
    amount: int,
    currency: str,
    *,
    type_: TxType,
    fee: FeePolicy,
    actor: str,
    ref: str,
) -> Posting:
    """A wallet-to-wallet movement by its type: a payment (with ``fee``, promo before cash), or
    a p2p, B2P or B2B transfer (cash to cash, no fee)."""
    if type_ is TxType.PAYMENT:
        return payment(key, sender, receiver, amount, currency, fee=fee, actor=actor, ref=ref)
    return transfer(key, sender, receiver, amount, currency, actor=actor, ref=ref, type_=type_)


def promo_grant(
    key: str,
    customer: str,
    amount: int,
    currency: str,
    *,
    expires_at: datetime,
    actor: str,
    ref: str,
    business: str | None = None,
) -> Posting:
    """Business-funded: business cash −40, customer promo +40 (what is left at expiry returns
    to the business). Campaign: promo_expense −10, customer promo +10 (left goes to breakage)."""
    amount, currency = check_amount(amount), check_currency(currency)
    if expires_at.tzinfo is None:
        raise InvalidPosting("expires_at must carry a time zone", field="expires_at")
    home = bucket_of(customer)
    if business is not None:
        _distinct_wallets(business, customer)
        funder, funded_by = cash_account(business), "business"
        expire_to = funder
    else:
        funder = system_account(Role.PROMO_EXPENSE, currency, bucket=home)
        funded_by = "platform"
        expire_to = system_account(Role.PROMO_BREAKAGE, currency, bucket=home)
    tx_id = transaction_id(home, key)
    legs = [Leg(promo_account(customer), amount, currency), Leg(funder, -amount, currency)]
    return _posting(
        key,
        home,
        TxType.PROMO_GRANT,
        actor,
        ref,
        legs,
        options={
            "grant_promo": {
                "batch_id": tx_id,
                "promo_leg": 1,
                "funder_leg": 2,
                "funded_by": funded_by,
                "expire_to": expire_to,
                "expire_to_bucket": bucket_of(expire_to),
                "expires_at": expires_at.isoformat(),
            }
        },
        # also in the transaction's metadata, so that reading the transaction shows it
        metadata={"expires_at": expires_at.isoformat()},
    )


def goodwill(key: str, wallet: str, amount: int, currency: str, *, actor: str, ref: str) -> Posting:
    """goodwill_expense −amount, customer cash +amount: the platform credits a customer from
    its own expense (000_…: the credit of type goodwill, granted by staff). Never refundable: a
    correction is another movement."""
    amount, currency, b = check_amount(amount), check_currency(currency), bucket_of(wallet)
    legs = [
        Leg(cash_account(wallet), amount, currency),
        Leg(system_account(Role.GOODWILL_EXPENSE, currency), -amount, currency),
    ]
    return _posting(key, b, TxType.GOODWILL, actor, ref, legs)


def promo_expiry(
    batch_id: str,
    customer_promo_account: str,
    expire_to: str,
    currency: str,
    *,
    actor: str,
    round_: int = 0,
) -> Posting:
    """customer promo −remaining, funder (business cash or promo_breakage) +remaining.

    The amount is what the batch holds when the posting function locks it. ``round_``: the
    batch's n-th expiry (0: the first). A batch expires again only when a refund gave money
    back to it after its expiry (the refund restores the batches a payment spent, expired or
    not); that expiry needs a key of its own, the first one's being a replay by then."""
    home = bucket_of(customer_promo_account)
    legs = [Leg(customer_promo_account, 0, currency), Leg(expire_to, 0, currency)]
    key = (
        derived_id("promo-expiry", batch_id)
        if round_ == 0
        else derived_id("promo-expiry", batch_id, str(round_))
    )
    return _posting(
        f"expiry:{key}",
        home,
        TxType.PROMO_EXPIRY,
        actor,
        f"promo-batch:{batch_id}",
        legs,
        options={"expire_promo": {"batch_id": batch_id, "promo_leg": 1, "funder_leg": 2}},
    )


def withdrawal(
    key: str,
    wallet: str,
    amount: int,
    currency: str,
    *,
    fee: FeePolicy,
    actor: str,
    ref: str,
    provider: str = "bank",
) -> Posting:
    """wallet −102, clearing +100, revenue +2: we owe the bank's transfer until it settles."""
    amount, currency, b = check_amount(amount), check_currency(currency), bucket_of(wallet)
    fee_minor = fee.fee(amount)
    legs = [
        Leg(cash_account(wallet), -(amount + fee_minor), currency),
        Leg(system_account(Role.CLEARING, currency, bucket=b, provider=provider), amount, currency),
    ]
    if fee_minor:
        legs.append(Leg(system_account(Role.REVENUE, currency, bucket=b), fee_minor, currency))
    return _posting(key, b, TxType.WITHDRAWAL, actor, ref, legs, metadata={"fee": fee_minor})


def refund(original: TransactionView, *, actor: str, ref: str | None = None) -> Posting:
    """The original's legs negated, all of them (fee and transit included), at most once: the
    refund's id is derived from the original's, so asking twice is a replay."""
    if original.type not in REFUNDABLE:
        raise NotRefundable(
            f"a {original.type} cannot be refunded", transaction_id=original.id, type=original.type
        )
    home = bucket_of(original.id)
    legs = [Leg(line.account, -line.amount, line.currency) for line in original.legs]
    return _posting(
        f"refund:{derived_id('refund', original.id)}",
        home,
        TxType.REFUND,
        actor,
        ref or f"refund:{original.id}"[:MAX_TEXT],
        legs,
        refund_of=original.id,
        # Any two asks to refund the same original are the same request.
        fingerprint=("refund", original.id),
    )


def settlement_topup(
    key: str,
    provider: str,
    currency: str,
    *,
    gross: int,
    fee: int = 0,
    model: str = "gross",
    actor: str,
    ref: str,
) -> Posting:
    """The provider pays out what it collected. Gross: clearing +gross, nostro −gross (its fee
    comes later as an invoice). Net: clearing +gross, nostro −net, provider_expense −fee."""
    gross, currency = check_amount(gross, "gross"), check_currency(currency)
    clearing = system_account(Role.CLEARING, currency, provider=provider)
    nostro = system_account(Role.NOSTRO, currency)
    if model == "gross":
        if fee:
            raise InvalidPosting("the gross model carries no fee; invoice it", field="fee")
        legs = [Leg(clearing, gross, currency), Leg(nostro, -gross, currency)]
    elif model == "net":
        fee = check_amount(fee, "fee")
        if fee >= gross:
            raise InvalidPosting("the fee must be less than the gross amount", field="fee")
        legs = [
            Leg(clearing, gross, currency),
            Leg(nostro, -(gross - fee), currency),
            Leg(system_account(Role.PROVIDER_EXPENSE, currency), -fee, currency),
        ]
    else:
        raise InvalidPosting(f"unknown settlement model {model!r}", field="model")
    return _posting(
        key,
        CENTRAL_BUCKET,
        TxType.SETTLEMENT_TOPUP,
        actor,
        ref,
        legs,
        metadata={"provider": provider, "model": model},
    )


def settlement_withdrawal(
    key: str,
    provider: str,
    currency: str,
    *,
    owed: int,
    actor: str,
    ref: str,
    bucket: int = CENTRAL_BUCKET,
) -> Posting:
    """The bank's transfers left our account: clearing −owed, nostro +owed.

    ``bucket``: whose clearing sub-account. The central one (after the sweep) for a settlement
    of many; a withdrawal's own bucket for one withdrawal settled as its transfer succeeds (the
    saga), which takes back what its debit put into that bucket's clearing, without waiting for
    a sweep. Its home is that bucket."""
    owed, currency = check_amount(owed, "owed"), check_currency(currency)
    if not isinstance(bucket, int) or isinstance(bucket, bool) or not 0 <= bucket < BUCKETS:
        raise InvalidPosting(f"bucket {bucket!r} does not exist", field="bucket")
    legs = [
        Leg(system_account(Role.CLEARING, currency, bucket=bucket, provider=provider), -owed, currency),
        Leg(system_account(Role.NOSTRO, currency), owed, currency),
    ]
    return _posting(
        key,
        bucket,
        TxType.SETTLEMENT_WITHDRAWAL,
        actor,
        ref,
        legs,
        metadata={"provider": provider},
    )


def provider_invoice(
    key: str, provider: str, currency: str, *, amount: int, actor: str, ref: str, period: str | None = None
) -> Posting:
    """We pay the provider's invoice: provider_expense −amount, nostro +amount. ``period``: the
    month it bills (``YYYY-MM``), kept in the metadata so that reconciliation knows which
    gross-model months are invoiced (hiwallet.ledger.late_invoices)."""
    amount, currency = check_amount(amount), check_currency(currency)
    if period is not None and not _PERIOD.fullmatch(period):
        raise InvalidPosting(f"the period {period!r} is not a month (YYYY-MM)", field="period")
    legs = [
        Leg(system_account(Role.PROVIDER_EXPENSE, currency), -amount, currency),
        Leg(system_account(Role.NOSTRO, currency), amount, currency),
    ]
    return _posting(
        key,
        CENTRAL_BUCKET,
        TxType.PROVIDER_INVOICE,
        actor,
        ref,
        legs,
        metadata={"provider": provider} if period is None else {"provider": provider, "period": period},
    )


def capture_hold(
    wallet: str,
    hold_key: str,
    amount: int,
    currency: str,
    destination: str,
    *,
    actor: str,
    ref: str,
) -> Posting:
    """Take held money: wallet −amount, destination +amount, and the hold closes. Keyed by the
    hold, so a second capture is a replay of the first."""
    amount, currency = check_amount(amount), check_currency(currency)
    hold_key = check_text(hold_key, "hold_key")
    b = bucket_of(wallet)
    bucket_of(destination)
    if destination == cash_account(wallet):
        raise InvalidPosting("a wallet cannot capture into itself", field="destination")
    legs = [Leg(cash_account(wallet), -amount, currency), Leg(destination, amount, currency)]
    return _posting(
        f"capture:{derived_id('capture', wallet, hold_key)}",
        b,
        TxType.HOLD_CAPTURE,
        actor,
        ref,
        legs,
        options={"capture_hold": {"leg": 1, "key": hold_key}},
        fingerprint=("capture", wallet, hold_key),
    )


def debit(wallet: str, amount: int, currency: str, destination: str, *, actor: str, ref: str) -> Posting:
    """A debit keyed by what it pays for: however often it is asked for ``ref``, it is taken
    once, and every later ask is answered with the first (000_…: "One debit per ref")."""
    amount, currency, ref = check_amount(amount), check_currency(currency), check_text(ref, "ref")
    b = bucket_of(wallet)
    bucket_of(destination)
    if destination == cash_account(wallet):
        raise InvalidPosting("a wallet cannot debit into itself", field="destination")
    legs = [Leg(cash_account(wallet), -amount, currency), Leg(destination, amount, currency)]
    return _posting(
        f"debit:{derived_id('debit', wallet, ref)}",
        b,
        TxType.DEBIT,
        actor,
        ref,
        legs,
        fingerprint=("debit", wallet, ref),
    )


def sweep(
    role: Role,
    currency: str,
    bucket: int,
    amount: int,
    *,
    actor: str,
    provider: str | None = None,
    key: str,
) -> Posting:
    """Move a per-bucket sub-account's balance into the central account (``amount`` signed:
    what the sub-account holds). Settlement then reads one central account."""
    if role not in (Role.CLEARING, Role.REVENUE, Role.PROMO_EXPENSE, Role.PROMO_BREAKAGE):
        raise InvalidPosting(f"{role} is not swept", field="role")
    if amount == 0 or bucket == CENTRAL_BUCKET:
        raise InvalidPosting("nothing to sweep", field="amount")
    sub = system_account(role, currency, bucket=bucket, provider=provider)
    central = system_account(role, currency, provider=provider)
    legs = [Leg(sub, -amount, currency), Leg(central, amount, currency)]
    return _posting(key, bucket, TxType.SWEEP, actor, f"sweep:{sub}", legs)
