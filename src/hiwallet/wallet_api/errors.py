"""wallet-api's error tree: every refusal is a :class:`ProblemError` with a stable ``type`` and
the fields a client needs. Ledger errors are mapped here too (:func:`from_ledger`), so the HTTP
answer of every refusal is decided in this one file."""

from __future__ import annotations

from hiwallet import ledger
from hiwallet.contracts import problems
from hiwallet.core import http
from hiwallet.core.http import ProblemError
from hiwallet.core.http.idempotency import (  # one protocol for every money-moving POST
    IdempotencyInProgress as IdempotencyInProgress,
)
from hiwallet.core.http.idempotency import (
    IdempotencyKeyInvalid as IdempotencyKeyInvalid,
)
from hiwallet.core.http.idempotency import (
    IdempotencyKeyMissing as IdempotencyKeyMissing,
)
from hiwallet.core.http.idempotency import (
    IdempotencyKeyReused as IdempotencyKeyReused,
)


class NotFound(http.NotFound):
    """Missing, or not the caller's: the same answer, so existence does not leak."""


class OnboardingOnly(ProblemError):
    status = 403
    slug = "onboarding-only"
    title = "Only the onboarding service may do this"


class TierNotAllowed(ProblemError):
    status = 403
    slug = "tier-not-allowed"
    title = "The account's tier does not allow this"


class ContractRequired(ProblemError):
    """The Contracted tier is raised by an employee on recorded evidence (``customer.contract``,
    POST /v1/staff/accounts/{id}/contract), never by onboarding's tier raise."""

    status = 403
    slug = "contract-required"
    title = "The Contracted tier is given by staff on recorded evidence"


class NotABusiness(ProblemError):
    """Only a business may do this (grant promo money): no tier of a personal account allows it."""

    status = 403
    slug = "not-a-business"
    title = "Only a business account may do this"


class TierDowngrade(ProblemError):
    status = 409
    slug = "tier-downgrade"
    title = "A tier only goes up"


class NotPersonal(ProblemError):
    status = 422
    slug = "not-a-personal-account"
    title = "The account is not a personal account"


class MonthlyLimitExceeded(ProblemError):
    status = 422
    slug = "monthly-limit-exceeded"
    title = "The amount exceeds the account's monthly limit"


class RecipientNotFound(ProblemError):
    status = 422
    slug = "recipient-not-found"
    title = "No wallet has this number"


class InvalidWalletNumber(ProblemError):
    status = 422
    slug = "invalid-wallet-number"
    title = "The wallet number is not valid"


class RecipientCannotReceive(ProblemError):
    status = 422
    slug = "recipient-cannot-receive"
    title = "The recipient cannot receive this"


class SameWallet(ProblemError):
    status = 422
    slug = "same-wallet"
    title = "A wallet cannot send to itself"


class CurrencyMismatch(ProblemError):
    status = 422
    slug = "currency-mismatch"
    title = "The currencies do not match"


UnsupportedCurrency = problems.UnsupportedCurrency


class InsufficientFunds(ProblemError):
    status = 422
    slug = "insufficient-funds"
    title = "Insufficient funds"


class NotRefundable(ProblemError):
    status = 422
    slug = "not-refundable"
    title = "The transfer cannot be refunded"


class AlreadyRefunded(ProblemError):
    status = 409
    slug = "already-refunded"
    title = "The transfer has already been refunded"


class InvalidRequest(ProblemError):
    status = 422
    slug = "invalid-request"
    title = "The request is not valid"


class BudgetExhausted(ProblemError):
    """A campaign's or a promo programme's budget holds less than the grant."""

    status = 422
    slug = "budget-exhausted"
    title = "The budget does not hold this amount"


class CampaignEnded(ProblemError):
    status = 422
    slug = "campaign-ended"
    title = "The campaign takes no more grants"


class ProgrammeRequired(ProblemError):
    """A business grants promo only under a promo programme that staff accepted."""

    status = 403
    slug = "programme-not-accepted"
    title = "The promo programme is not accepted"


class CustomerAmountExceeded(ProblemError):
    status = 422
    slug = "programme-customer-amount-exceeded"
    title = "The customer would receive more than the programme's amount per customer"


class DailyCeilingExceeded(ProblemError):
    status = 422
    slug = "daily-ceiling-exceeded"
    title = "The amount exceeds the employee's daily ceiling"


class SameEmployee(ProblemError):
    """Four eyes: the employee who asked for a credit never approves it."""

    status = 403
    slug = "four-eyes"
    title = "A second employee must approve this"


class AlreadyDecided(ProblemError):
    status = 409
    slug = "already-decided"
    title = "This was decided already"


class FindingResolved(ProblemError):
    """A reconciliation finding is resolved once; its resolution is never rewritten."""

    status = 409
    slug = "finding-resolved"
    title = "This finding is resolved already"


class ReconciliationRunning(ProblemError):
    status = 409
    slug = "reconciliation-running"
    title = "A reconciliation round is running; try again when it is done"


class InvoiceEnteredOtherwise(ProblemError):
    status = 409
    slug = "invoice-entered-otherwise"
    title = "This provider's invoice was entered before with another amount or currency"


class WebhookUrlForbidden(ProblemError):
    """A webhook endpoint's URL that may not be called (docs/webhooks.md, the SSRF rule):
    ``reason`` is one of scheme, userinfo, malformed, too-long, unresolvable, private-address."""

    status = 422
    slug = "webhook-url-forbidden"
    title = "The endpoint's URL may not be called"


class TooManyEndpoints(ProblemError):
    status = 409
    slug = "too-many-webhook-endpoints"
    title = "The account has as many webhook endpoints as it may"


InvalidCursor = problems.InvalidCursor


class Unavailable(http.ServiceUnavailable):
    """The wallet database could not be used: a retry cures it."""


def from_ledger(exc: ledger.LedgerError) -> ProblemError | None:
    """A ledger refusal as the client sees it. Internal account ids are left out; the amounts a
    client needs to correct the request are kept. :class:`~hiwallet.ledger.LedgerUnavailable`
    (a retry can cure it) is 503. None for an error this service does not expect from the ledger:
    a defect, for the handler of unexpected errors (500), never "retry"."""
    f = exc.fields
    if isinstance(exc, ledger.InsufficientFunds):
        keep = {k: f[k] for k in ("balance", "available", "amount") if k in f}
        return InsufficientFunds("the wallet does not hold enough money for this", **keep)
    if isinstance(exc, ledger.CurrencyMismatch):
        return CurrencyMismatch("the wallets' currency differs from the request's")
    if isinstance(exc, ledger.NotFound):
        return NotFound("no such resource")
    if isinstance(exc, ledger.NotRefundable):
        return NotRefundable(str(exc))
    if isinstance(exc, ledger.TransactionIdReused):
        return IdempotencyKeyReused("the id was used for another request")
    if isinstance(exc, ledger.InvalidRequest):
        field = f.get("field")
        return InvalidRequest(str(exc), field=field if isinstance(field, str) else None)
    if isinstance(exc, ledger.LedgerUnavailable):
        return Unavailable("the ledger is not available; retry with the same Idempotency-Key")
    return None
