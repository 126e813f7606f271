"""bank-webhook's error tree: every refusal it answers is a :class:`ProblemError` here, so the
HTTP answer of each is decided in this one file."""

from __future__ import annotations

from hiwallet.core import http
from hiwallet.core.http import ProblemError


class SignatureRefused(ProblemError):
    """Unsigned, forged, stale or altered: not the bank's, so nothing is stored. 400, as
    topup-webhook answers (a webhook sender has no credentials to offer a 401's challenge);
    ``reason`` says which check failed; nothing of the body is echoed."""

    status = 400
    slug = "webhook-signature-refused"
    title = "The webhook's signature does not verify"


class CallbackUnreadable(ProblemError):
    """Verified, but not a callback we can keep (not a JSON object, no type, a transfer outcome
    naming no reference): nothing is stored."""

    status = 422
    slug = "webhook-unreadable"
    title = "The webhook's body is not a bank callback"


class Unavailable(http.ServiceUnavailable):
    """The database could not store the callback: the bank's retry brings it again."""

    slug = "service-unavailable"
