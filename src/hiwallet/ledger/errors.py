"""The ledger's error tree. Every error a caller can act on is typed and carries what it needs:
a refusal (insufficient funds, no such account, ...), or :class:`LedgerUnavailable` when a retry
with the same id can cure it (the connection was lost, a timeout, a deadlock after the retries).

Anything else - an invariant trigger firing, a data error, an unmapped constraint, an unknown
SQLSTATE - is a defect, :class:`LedgerInternalError`: outside the :class:`LedgerError` tree on
purpose, so that no ``except LedgerError`` turns it into an answer; it reaches the service's
handler of unexpected errors (a logged 500, never "retry").

The store maps PostgreSQL's answers (the ``HW`` SQLSTATEs raised by the posting functions, and
constraint names) to these in one place: :func:`hiwallet.ledger.store.translate`; what a retry
can cure is decided by :func:`hiwallet.core.db.is_transient`.
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


class InvalidRequest(LedgerError):
    """The request itself is wrong; nothing was sent to the database."""

    code = "invalid-request"


class InvalidPosting(InvalidRequest):
    """A posting is wrong: an amount that is not a positive integer, a transfer to itself, an
    oversized field. Nothing was sent to the database."""

    code = "invalid-posting"


class InvalidCursor(InvalidRequest):
    """A statement's cursor is not one the ledger gave out."""

    code = "invalid-cursor"


class NotFound(LedgerError):
    code = "not-found"


class AccountNotFound(NotFound):
    code = "account-not-found"


class TransactionNotFound(NotFound):
    code = "transaction-not-found"


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


class LedgerInternalError(Exception):
    """The database refused in a way that no retry and no caller can correct: a defect. Carries
    the SQLSTATE and constraint for the log; the driver's error is its ``__cause__``."""

    code = "internal-error"

    def __init__(self, message: str, *, sqlstate: str | None = None, constraint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.constraint = constraint
