"""wallet-api's domain: tiers and what each may do, account and wallet identifiers, wallet
numbers with a check digit. Pure functions; no I/O."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from hiwallet.core.ids import derived_id, new_id
from hiwallet.ledger import BUCKETS, TxType
from hiwallet.wallet_api import errors


class Tier(StrEnum):
    """A personal account's tier; it only goes up (docs/architecture.md, "Tokens and realms")."""

    UNKNOWN = "unknown"
    UNVERIFIED = "unverified"
    VERIFIED = "verified"
    CONTRACTED = "contracted"

    @property
    def rank(self) -> int:
        return list(Tier).index(self)


class AccountKind(StrEnum):
    PERSONAL = "personal"
    BUSINESS = "business"


class LimitKind(StrEnum):
    TRANSFER = "transfer"  # p2p sent by a personal account
    PAYMENT = "payment"  # paid by a personal account to a business


@dataclass(frozen=True)
class Caller:
    """Who is asking: the verified token's issuer and subject (an identity is both)."""

    issuer: str
    subject: str
    azp: str | None
    is_service_account: bool

    @property
    def scope(self) -> str:
        """Idempotency keys are scoped to the caller."""
        return f"{self.issuer}#{self.subject}"

    @property
    def actor(self) -> str:
        """Who the ledger records as the actor."""
        if self.is_service_account:
            return f"client:{self.azp}:{self.subject}"[:200]
        return f"customer:{self.subject}"[:200]


# ---------------------------------------------------------------------------------------------
# Identifiers
# ---------------------------------------------------------------------------------------------

ACCOUNT_ID_PATTERN = r"^[0-9]{4}:a:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
WALLET_ID_PATTERN = r"^[0-9]{4}:w:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
TRANSFER_ID_PATTERN = r"^[0-9]{4}:[A-Za-z0-9:_.\-]{1,95}$"
WALLET_NUMBER_PATTERN = r"^[0-9]{16}$"
_BUCKETED = re.compile(r"^([0-9]{4}):")
_ID_FORMS = {
    "account": re.compile(ACCOUNT_ID_PATTERN),
    "wallet": re.compile(WALLET_ID_PATTERN),
    "transfer": re.compile(TRANSFER_ID_PATTERN),
}


def path_id(identifier: str, kind: Literal["account", "wallet", "transfer"]) -> str:
    """An id from a request's path: of ``kind``'s form, in a bucket that exists; else it names
    nothing, and the answer is the one of a missing ``kind`` (the service's own words)."""
    if not _ID_FORMS[kind].fullmatch(identifier) or not 1 <= int(identifier[:4]) < BUCKETS:
        raise errors.NotFound(f"no such {kind}")
    return identifier


def bucket_in(identifier: str) -> int:
    """The bucket an id or a wallet number names; an id that names none is not found."""
    match = _BUCKETED.match(identifier) or re.match(r"^([0-9]{4})[0-9]{12}$", identifier)
    if not match or not 1 <= int(match[1]) < BUCKETS:
        raise errors.NotFound("no such resource")
    return int(match[1])


def new_account_id(bucket: int) -> str:
    return f"{bucket:04d}:a:{new_id()}"


# A digit doubled, less 9 when over 9 (Luhn), by the digit's ASCII code.
_DOUBLED = {48 + d: (2 * d if d < 5 else 2 * d - 9) for d in range(10)}


def luhn_digit(digits: str) -> str:
    """The Luhn check digit to append to ``digits`` (ISO/IEC 7812): every other digit from the
    right doubled. Sliced, not a loop over each digit: checked on every transfer."""
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"not decimal digits: {digits!r}")
    raw = digits.encode()
    plain = raw[-2::-2]
    total = sum(_DOUBLED[b] for b in raw[-1::-2]) + sum(plain) - 48 * len(plain)
    return str((10 - total % 10) % 10)


def luhn_valid(number: str) -> bool:
    return number.isascii() and number.isdigit() and len(number) > 1 and luhn_digit(number[:-1]) == number[-1]


def new_wallet_number(bucket: int) -> str:
    """16 digits: the bucket's four, eleven random ones, and a Luhn check digit. A typo in one
    digit, or two adjacent digits swapped, fails the check instead of paying a stranger."""
    body = f"{bucket:04d}{secrets.randbelow(10**11):011d}"
    return body + luhn_digit(body)


def parse_wallet_number(number: str) -> tuple[int, str]:
    if not re.fullmatch(WALLET_NUMBER_PATTERN, number) or not luhn_valid(number):
        raise errors.InvalidWalletNumber(
            "the wallet number is not valid (check digit)", field="to_wallet_number"
        )
    bucket = int(number[:4])
    if not 1 <= bucket < BUCKETS:
        raise errors.RecipientNotFound("no wallet has this number")
    return bucket, number


# ---------------------------------------------------------------------------------------------
# Who may do what
# ---------------------------------------------------------------------------------------------


def transfer_type(sender: AccountKind, receiver: AccountKind) -> TxType:
    if sender is AccountKind.PERSONAL:
        return TxType.P2P if receiver is AccountKind.PERSONAL else TxType.PAYMENT
    return TxType.B2P if receiver is AccountKind.PERSONAL else TxType.B2B


# Both tables built once: they were made anew on every transfer (a dict and four frozensets,
# one through the generic alias ``frozenset[TxType]``: 3 % of wallet-api's CPU in a profile).
_LIMIT_KINDS = {TxType.P2P: LimitKind.TRANSFER, TxType.PAYMENT: LimitKind.PAYMENT}
_MAY_SEND: dict[Tier, frozenset[TxType]] = {
    Tier.UNKNOWN: frozenset(),
    Tier.UNVERIFIED: frozenset({TxType.PAYMENT}),
    Tier.VERIFIED: frozenset({TxType.P2P, TxType.PAYMENT}),
    Tier.CONTRACTED: frozenset({TxType.P2P, TxType.PAYMENT}),
}


def limit_kind(type_: TxType) -> LimitKind | None:
    return _LIMIT_KINDS.get(type_)


def check_may_send(kind: AccountKind, tier: Tier | None, type_: TxType) -> None:
    """Unknown moves nothing; Unverified pays businesses but sends no transfer."""
    if kind is AccountKind.BUSINESS:
        return
    if tier is None:  # a personal account always has a tier (wallet.accounts' CHECK)
        raise ValueError("a personal account without a tier")
    if type_ not in _MAY_SEND[tier]:
        raise errors.TierNotAllowed(
            f"a {tier.value} account may not make a {type_.value}", tier=tier.value, operation=type_.value
        )


def check_may_receive(kind: AccountKind, tier: Tier | None) -> None:
    """An Unknown account takes part in no transaction at all, incoming included."""
    if kind is AccountKind.PERSONAL and tier is Tier.UNKNOWN:
        raise errors.RecipientCannotReceive("the recipient's account cannot receive money yet")


def check_tier_raise(current: Tier, requested: Tier) -> bool:
    """True when the tier changes; a lower tier is refused (tiers only go up)."""
    if requested.rank < current.rank:
        raise errors.TierDowngrade(
            f"a tier only goes up: {current.value} to {requested.value} is refused",
            current=current.value,
            requested=requested.value,
        )
    return requested.rank > current.rank


def service_account_subject(realm: str, client_id: str) -> str:
    """The ``sub`` of a client's service-account tokens: the identity service derives it from
    the realm and the client (docs/identity.md); with Keycloak, an operator passes the subject."""
    return derived_id("service-account", realm, client_id)
