"""Account ids, roles and buckets.

Every account id starts with its bucket, ``NNNN:``, so any statement can be routed to its shard
without a lookup (docs/ledger-citus.md). Bucket 0 holds the central system accounts; customers
get a bucket in 1..1023 when they open, and all their wallets share it.

- a wallet ``0421:w:<uuid7>`` is two accounts: ``0421:w:<uuid7>:cash`` and ``...:promo``;
- a system sub-account ``0421:sys:clearing:stripe:TRY``; the central one ``0000:sys:...``.
"""

from __future__ import annotations

import re
import secrets
from enum import StrEnum

from hiwallet.core.ids import new_id
from hiwallet.ledger.errors import InvalidPosting

BUCKETS = 1024  # fixed from day one: changing it means moving rows
CENTRAL_BUCKET = 0


class Role(StrEnum):
    USER_WALLET = "user_wallet"
    CLEARING = "clearing"
    NOSTRO = "nostro"
    REVENUE = "revenue"
    PROVIDER_EXPENSE = "provider_expense"
    PROMO_EXPENSE = "promo_expense"
    PROMO_BREAKAGE = "promo_breakage"
    TRANSIT = "transit"
    # What the platform gives a customer as goodwill (staff credits, 000_…: credit type
    # goodwill): an expense of its own, apart from promo_expense (promo money expires, goodwill
    # is cash) and provider_expense (what the providers charge).
    GOODWILL_EXPENSE = "goodwill_expense"


# System accounts that many transactions touch are split into one sub-account per bucket; the
# account's balance is the sum of its sub-accounts and the central one.
PER_BUCKET_ROLES = frozenset(
    {Role.CLEARING, Role.REVENUE, Role.PROMO_EXPENSE, Role.PROMO_BREAKAGE, Role.TRANSIT}
)
# goodwill_expense is central: a staff credit is rare (an employee, by hand, under a daily
# ceiling), so its one account is never a hot spot worth a sub-account per bucket.
CENTRAL_ONLY_ROLES = frozenset({Role.NOSTRO, Role.PROVIDER_EXPENSE, Role.GOODWILL_EXPENSE})

_ACCOUNT_ID = re.compile(r"^(\d{4}):[A-Za-z0-9:_.\-]{1,110}$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_PROVIDER = re.compile(r"^[a-z][a-z0-9_\-]{0,30}$")


def bucket_of(account_or_wallet_id: str) -> int:
    match = _ACCOUNT_ID.match(account_or_wallet_id)
    if not match or int(match[1]) >= BUCKETS:
        raise InvalidPosting(f"malformed account id {account_or_wallet_id[:120]!r}", field="account")
    return int(match[1])


def random_bucket() -> int:
    """A customer's bucket: uniform over 1..1023, so customers spread over the shards."""
    return 1 + secrets.randbelow(BUCKETS - 1)


def check_currency(currency: str) -> str:
    if not isinstance(currency, str) or not _CURRENCY.match(currency):
        raise InvalidPosting(f"currency {str(currency)[:10]!r} is not an ISO 4217 code", field="currency")
    return currency


def new_wallet_id(bucket: int) -> str:
    if not 1 <= bucket < BUCKETS:
        raise InvalidPosting(f"bucket {bucket} is not a customer bucket", field="bucket")
    return f"{bucket:04d}:w:{new_id()}"


def cash_account(wallet_id: str) -> str:
    return f"{wallet_id}:cash"


def promo_account(wallet_id: str) -> str:
    return f"{wallet_id}:promo"


def wallet_of(account_id: str) -> str:
    """The wallet of a cash or promo account."""
    wallet, _, purse = account_id.rpartition(":")
    if purse not in ("cash", "promo") or ":w:" not in wallet:
        raise InvalidPosting(f"{account_id[:120]!r} is not a wallet's account", field="account")
    return wallet


def system_account(
    role: Role, currency: str, *, bucket: int = CENTRAL_BUCKET, provider: str | None = None
) -> str:
    """The id of a system account: per bucket for the hot roles, central for the others."""
    check_currency(currency)
    if role is Role.USER_WALLET:
        raise InvalidPosting("a user wallet is not a system account", field="role")
    if role in CENTRAL_ONLY_ROLES:
        bucket = CENTRAL_BUCKET
    if role is Role.CLEARING:
        if provider is None or not _PROVIDER.match(provider):
            raise InvalidPosting(f"unknown provider {provider!r}", field="provider")
        return f"{bucket:04d}:sys:clearing:{provider}:{currency}"
    return f"{bucket:04d}:sys:{role.value}:{currency}"
