"""topup-webhook's error tree: every refusal it answers is a :class:`ProblemError` here, so the
HTTP answer of each is decided in this one file."""

from __future__ import annotations

from hiwallet.core import http
from hiwallet.core.http import ProblemError


class SignatureRefused(ProblemError):
    """Unsigned, forged, stale or altered: not the provider's, so nothing is stored.

    400, not 401: 401 is a challenge the client answers with credentials (it needs a
    WWW-Authenticate scheme), and a webhook sender has none to offer; Stripe's own examples
    answer a failed verification 400. Either is a non-2xx, which a genuine sender retries.
    ``reason`` says which check failed (a sender's clock or secret is what an operator fixes);
    nothing of the body is echoed."""

    status = 400
    slug = "webhook-signature-refused"
    title = "The webhook's signature does not verify"


class NotificationUnreadable(ProblemError):
    """Verified, but not a notification we can keep (not a JSON object, no event id or type):
    002's DECODE, 422. Nothing is stored; the sender's retry or an operator sees it."""

    status = 422
    slug = "webhook-unreadable"
    title = "The webhook's body is not a notification"


class UnknownProvider(http.NotFound):
    slug = "unknown-provider"
    title = "No such provider"


class Unavailable(http.ServiceUnavailable):
    """The database could not store the notification: the provider's retry brings it again."""

    slug = "service-unavailable"
