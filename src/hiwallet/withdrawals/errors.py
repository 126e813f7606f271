"""withdrawal-orchestrator's error tree: every refusal it answers is a :class:`ProblemError`
here, so the HTTP answer of each is decided in this one file. The Idempotency-Key's problems
are wallet-api's (the same slugs and statuses: one protocol for every money-moving POST)."""

from __future__ import annotations

from hiwallet.core import http
from hiwallet.core.http import ProblemError


class NotFound(http.NotFound):
    """Missing, or not the caller's: the same answer, so existence does not leak."""


class IdempotencyKeyMissing(ProblemError):
    status = 400
    slug = "idempotency-key-missing"
    title = "An Idempotency-Key header is required"


class IdempotencyKeyInvalid(ProblemError):
    status = 400
    slug = "idempotency-key-invalid"
    title = "The Idempotency-Key header is not valid"


class IdempotencyKeyReused(ProblemError):
    status = 422
    slug = "idempotency-key-reused"
    title = "The Idempotency-Key was used for another request"


class IdempotencyInProgress(ProblemError):
    status = 409
    slug = "idempotency-in-progress"
    title = "A request with this Idempotency-Key is still being processed"


class InvalidIban(ProblemError):
    status = 422
    slug = "invalid-iban"
    title = "The destination IBAN is not valid"


class UnsupportedCurrency(ProblemError):
    status = 422
    slug = "unsupported-currency"
    title = "The currency is not supported"


class StaffNotAllowed(ProblemError):
    status = 403
    slug = "caller-not-allowed"
    title = "This kind of caller may not use this endpoint"


class Unavailable(http.ServiceUnavailable):
    slug = "service-unavailable"


class WalletApiUnavailable(http.ServiceUnavailable):
    """wallet-api, which answers who may see a wallet's withdrawals, could not be asked."""

    slug = "dependency-unavailable"
    title = "A service this answer depends on is not reachable"


# -- the service layer's refusals (the review's operations; the staff endpoint of issue 13
#    answers them over HTTP) ------------------------------------------------------------------


class SagaNotFound(http.NotFound):
    slug = "withdrawal-not-found"
    title = "No such withdrawal"


class NotUnderReview(ProblemError):
    status = 409
    slug = "withdrawal-not-under-review"
    title = "The withdrawal is not waiting for a review"


class InvalidActor(ProblemError):
    status = 422
    slug = "invalid-actor"
    title = "The reviewer's name is not valid"
