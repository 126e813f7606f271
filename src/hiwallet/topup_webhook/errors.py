"""topup-webhook's error tree: every refusal it answers is a :class:`ProblemError` here, so the
HTTP answer of each is decided in this one file."""

from __future__ import annotations

from hiwallet.contracts import problems
from hiwallet.core import http


class SignatureRefused(problems.WebhookSignatureRefused):
    """Unsigned, forged, stale or altered: not the provider's, so nothing is stored."""


class NotificationUnreadable(problems.WebhookUnreadable):
    """Verified, but not a notification we can keep (not a JSON object, no event id or type):
    422. Nothing is stored; the sender's retry or an operator sees it."""


class UnknownProvider(http.NotFound):
    slug = "unknown-provider"
    title = "No such provider"


class Unavailable(http.ServiceUnavailable):
    """The database could not store the notification: the provider's retry brings it again."""
