"""bank-webhook's error tree: every refusal it answers is a :class:`ProblemError` here, so the
HTTP answer of each is decided in this one file."""

from __future__ import annotations

from hiwallet.contracts import problems
from hiwallet.core import http


class SignatureRefused(problems.WebhookSignatureRefused):
    """Unsigned, forged, stale or altered: not the bank's, so nothing is stored."""


class CallbackUnreadable(problems.WebhookUnreadable):
    """Verified, but not a callback we can keep (not a JSON object, no type, a transfer outcome
    naming no reference): nothing is stored."""


class Unavailable(http.ServiceUnavailable):
    """The database could not store the callback: the bank's retry brings it again."""
