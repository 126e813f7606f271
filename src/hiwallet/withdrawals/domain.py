"""The withdrawal saga's states and the changes allowed between them (docs/withdrawals.md's
diagram; migrations/withdrawal/0001_withdrawal.sql holds the same list as data and refuses any
other change), and what a request is: IBAN checks and masking. Pure; no I/O."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum

from schwifty import IBAN
from schwifty.exceptions import SchwiftyException


class State(StrEnum):
    INITIATED = "initiated"
    DEBITED = "debited"
    REJECTED = "rejected"
    UNDER_REVIEW = "under_review"
    BANK_TRANSFER_PENDING = "bank_transfer_pending"
    SETTLING = "settling"
    COMPLETED = "completed"
    COMPENSATING = "compensating"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


ALLOWED: frozenset[tuple[State, State]] = frozenset(
    {
        (State.INITIATED, State.DEBITED),
        (State.INITIATED, State.REJECTED),
        (State.DEBITED, State.UNDER_REVIEW),
        (State.DEBITED, State.BANK_TRANSFER_PENDING),
        (State.UNDER_REVIEW, State.BANK_TRANSFER_PENDING),
        (State.UNDER_REVIEW, State.CANCELLING),
        (State.BANK_TRANSFER_PENDING, State.SETTLING),
        (State.BANK_TRANSFER_PENDING, State.COMPENSATING),
        (State.SETTLING, State.COMPLETED),
        (State.COMPENSATING, State.FAILED),
        (State.CANCELLING, State.CANCELLED),
    }
)
TERMINAL: frozenset[State] = frozenset({State.REJECTED, State.COMPLETED, State.FAILED, State.CANCELLED})
# The states that wait on another service's answer to a command: the stuck saga scan publishes
# their command again. under_review waits on a person; debited is never committed (it moves on
# in the same transaction); the terminal states wait on nothing.
WAITING: frozenset[State] = frozenset(
    {State.INITIATED, State.BANK_TRANSFER_PENDING, State.SETTLING, State.COMPENSATING, State.CANCELLING}
)


class TransitionRefused(Exception):
    """A change of state the diagram does not have (a defect of the caller, never data's)."""


def check_transition(current: State, target: State) -> None:
    if (current, target) not in ALLOWED:
        raise TransitionRefused(f"a withdrawal does not go from {current} to {target}")


class InvalidIban(ValueError):
    """Not an IBAN: its checksum, length or country format is wrong."""


def normalized_iban(text: str) -> str:
    """The IBAN in its electronic form (no spaces, upper case), checked by schwifty: the
    checksum, the country's length and its BBAN format. Raises :class:`InvalidIban`."""
    compact = "".join(text.split()).upper()
    try:
        iban = IBAN(compact)
    except SchwiftyException as exc:
        # schwifty's message names the check that failed, never the number
        raise InvalidIban(type(exc).__name__) from exc
    return str(iban.compact)


def masked_iban(iban: str) -> str:
    """What the API and the logs show of an IBAN: its country and its last four characters
    (``TR** **** **** 1326``)."""
    if len(iban) < 8:
        return "****"
    return f"{iban[:2]}** **** **** {iban[-4:]}"


def request_hash(wallet: str, amount_minor: int, currency: str, destination_iban: str) -> bytes:
    """The fingerprint of a POST: the same key with another request is 422."""
    content = json.dumps(
        ["withdrawal", wallet, amount_minor, currency, destination_iban], separators=(",", ":")
    )
    return hashlib.sha256(content.encode()).digest()


def review_hash(decision: str, saga_id: str) -> bytes:
    """The fingerprint of a review's POST (release or cancel): the same key for another
    withdrawal or the other decision is 422."""
    content = json.dumps(["review", decision, saga_id], separators=(",", ":"))
    return hashlib.sha256(content.encode()).digest()
