"""The problem types several services answer: one class a type (a ``slug`` is defined once in
the codebase: tests/test_problems.py), so a client sees the same type, title and status from
every service. A service may subclass one to say in its own words when it answers it; it does
not redefine its slug."""

from __future__ import annotations

from hiwallet.core.http import ProblemError, ServiceUnavailable

__all__ = [
    "DependencyUnavailable",
    "IdentityUnavailable",
    "InvalidCursor",
    "UnsupportedCurrency",
    "WebhookSignatureRefused",
    "WebhookUnreadable",
]


class InvalidCursor(ProblemError):
    """A page's cursor that the service did not give (staff-admin's audit, wallet-api's
    webhook deliveries)."""

    status = 422
    slug = "invalid-cursor"
    title = "The cursor is not one this service gave"


class WebhookSignatureRefused(ProblemError):
    """Unsigned, forged, stale or altered: not the sender's, so nothing is stored.

    400, not 401: 401 is a challenge the client answers with credentials (it needs a
    WWW-Authenticate scheme), and a webhook sender has none to offer; Stripe's own examples
    answer a failed verification 400. Either is a non-2xx, which a genuine sender retries.
    ``reason`` says which check failed (a sender's clock or secret is what an operator fixes);
    nothing of the body is echoed."""

    status = 400
    slug = "webhook-signature-refused"
    title = "The webhook's signature does not verify"


class WebhookUnreadable(ProblemError):
    """Verified, but not a message we can keep: nothing is stored; the sender's retry or an
    operator sees it."""

    status = 422
    slug = "webhook-unreadable"
    title = "The webhook's body is not a message this endpoint keeps"


class UnsupportedCurrency(ProblemError):
    status = 422
    slug = "unsupported-currency"
    title = "The currency is not supported"


class IdentityUnavailable(ServiceUnavailable):
    """The identity provider (its admin API) could not be asked."""

    slug = "identity-unavailable"
    title = "The identity provider could not be reached"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"Retry-After": "2"})


class DependencyUnavailable(ServiceUnavailable):
    """Another service this answer depends on could not be asked."""

    slug = "dependency-unavailable"
    title = "A service this answer depends on is not reachable"
