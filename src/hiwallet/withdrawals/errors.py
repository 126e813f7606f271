"""withdrawal-orchestrator's error tree: every refusal it answers is a :class:`ProblemError`
here, so the HTTP answer of each is decided in this one file. The Idempotency-Key's problems
are wallet-api's (the same slugs and statuses: one protocol for every money-moving POST)."""

from __future__ import annotations

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


class InvalidIban(ProblemError):
    status = 422
    slug = "invalid-iban"
    title = "The destination IBAN is not valid"


UnsupportedCurrency = problems.UnsupportedCurrency


class Unavailable(http.ServiceUnavailable):
    """The withdrawal database could not be used: a retry cures it."""


class WalletApiUnavailable(problems.DependencyUnavailable):
    """wallet-api, which answers who may see a wallet's withdrawals, could not be asked."""


# -- the service layer's refusals (the review's operations; the staff endpoints
#    (staff_routes.py) answer them over HTTP) ---------------------------------------------


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
