"""The ledger's error tree. Every error a caller can act on is typed and carries what it needs;
a database failure that is none of them is :class:`LedgerUnavailable`.

The store maps PostgreSQL's answers (the ``HW`` SQLSTATEs raised by the posting functions, and
constraint names) to these in one place: :func:`hiwallet.ledger.store.translate`.
"""

from __future__ import annotations

from typing import Any


class LedgerError(Exception):
    """Base of every ledger error. ``code`` is stable; callers map it to HTTP problem types."""

    code = "ledger-error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.fields = fields

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None


class InvalidPosting(LedgerError):
    """The request itself is wrong: an amount that is not a positive integer, a transfer to
    itself, an oversized field. Nothing was sent to the database."""

    code = "invalid-posting"


class AccountNotFound(LedgerError):
    code = "account-not-found"


class CurrencyMismatch(LedgerError):
    code = "currency-mismatch"


class InsufficientFunds(LedgerError):
    """The account's available money (balance - held) is less than the amount."""

    code = "insufficient-funds"


class TransactionIdReused(LedgerError):
    """The id was used before for a different request. The first one stands."""

    code = "transaction-id-reused"


class HoldNotUsable(LedgerError):
    """The hold is missing, already captured or released, or smaller than the capture."""

    code = "hold-not-usable"


class NotRefundable(LedgerError):
    """The transaction is not of a refundable type, or not found."""

    code = "not-refundable"


class NothingToExpire(LedgerError):
    """The promo batch has nothing left, has not expired yet, or is not found."""

    code = "nothing-to-expire"


class LedgerUnavailable(LedgerError):
    """The database failed in a way no caller can correct; the posting may be retried with
    the same id, which is safe."""

    code = "unavailable"
