"""Is this notification the provider's? Checked over the raw bytes of the body, before anything
is parsed, for the two signature schemes of our providers. One copy for every service that
receives webhooks: topup-webhook (Stripe, the bank's incoming wires) and bank-webhook (the
bank's transfer outcomes).

- Stripe (``Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>]``): HMAC-SHA256 with the secret's
  text as key over ``b"<t>." + body``, hex; refused when ``t`` is older than the tolerance
  (only older: Stripe's own library accepts a timestamp from the future).
- Standard Webhooks (``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<b64>
  [v1,<b64>]``): HMAC-SHA256 with the secret's base64-decoded bytes (after ``whsec_``) over
  ``b"<id>.<timestamp>." + body``; refused when the timestamp is further than the tolerance
  from now in either direction.

Our own code, not the libraries' verify functions (tests/core/test_webhooks.py holds this
code to what ``stripe`` and ``standardwebhooks`` sign and accept): ``standardwebhooks``'
``Webhook.verify`` has a fixed ±5 minute tolerance (``tolerance_s`` would not be honoured) and
raises ``ValueError`` or ``binascii.Error``, not its own error, on a malformed header; stripe's
``verify_header`` puts the raw body into its error (one careless log line from writing it out),
names the reason only in its message text, and importing the SDK costs this process ~37 MB and
~470 modules. Both check one secret per call; here every configured secret (two during a
rotation) is compared against every signature in the header, each comparison constant-time
(``hmac.compare_digest``) and none skipped once one matches, so the time taken says nothing
about which secret or signature matched.

The reason of a refusal (:class:`VerificationFailed`) is one of :data:`REASONS`; it goes to the
log and the answer, never the body or a header's value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_HEADER_CHARS",
    "MAX_SIGNATURES",
    "REASONS",
    "StandardWebhookSignature",
    "StripeSignature",
    "VerificationFailed",
    "Verified",
    "Verifier",
    "standard_webhooks_key",
]

REASONS = ("unsigned", "malformed-signature", "signature-mismatch", "stale-timestamp", "future-timestamp")

# Bounds on what is parsed from a header, before any of it is trusted.
MAX_HEADER_CHARS = 2_048
MAX_SIGNATURES = 8
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")
# Standard Webhooks: the id must not contain a "." (it is a field of the signed content).
_MESSAGE_ID = re.compile(r"[A-Za-z0-9_:\-]{1,255}")
_SW_SECRET_PREFIX = "whsec_"


class VerificationFailed(Exception):
    """The request is not verifiably the provider's. ``reason``: one of :data:`REASONS`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Verified:
    timestamp: int
    # Standard Webhooks' webhook-id (the same on every retry of one message); Stripe: None (the
    # event id is in the body).
    message_id: str | None = None


def _any_match(expected: Sequence[bytes], given: Sequence[bytes]) -> bool:
    """Whether any of ``given`` equals any of ``expected``: every pair compared in constant
    time, none skipped."""
    matched = False
    for mine in expected:
        for theirs in given:
            matched |= hmac.compare_digest(mine, theirs)
    return matched


class StripeSignature:
    header = "stripe-signature"

    def __init__(
        self, secrets: Sequence[str], tolerance_s: int, clock: Callable[[], float] = time.time
    ) -> None:
        if not secrets or any(not s for s in secrets):
            raise ValueError("at least one non-empty signing secret")
        self._keys = [s.encode() for s in secrets]
        self._tolerance_s = tolerance_s
        self._clock = clock

    def verify(self, body: bytes, headers: Mapping[str, str]) -> Verified:
        value = headers.get(self.header)
        if not value:
            raise VerificationFailed("unsigned")
        if len(value) > MAX_HEADER_CHARS:
            raise VerificationFailed("malformed-signature")
        timestamps: list[str] = []
        signatures: list[bytes] = []
        for item in value.split(","):
            key, _, text = item.strip().partition("=")
            if key == "t":
                timestamps.append(text)
            elif key == "v1" and _HEX_SHA256.fullmatch(text):
                signatures.append(text.encode())
            # other schemes (v0, a test-mode scheme) are not ours to accept
        if len(timestamps) != 1 or not _TIMESTAMP.fullmatch(timestamps[0]) or not signatures:
            raise VerificationFailed("malformed-signature")
        if len(signatures) > MAX_SIGNATURES:
            raise VerificationFailed("malformed-signature")
        signed = timestamps[0].encode() + b"." + body
        expected = [hmac.new(key, signed, hashlib.sha256).hexdigest().encode() for key in self._keys]
        if not _any_match(expected, signatures):
            raise VerificationFailed("signature-mismatch")
        timestamp = int(timestamps[0])
        if timestamp < self._clock() - self._tolerance_s:
            raise VerificationFailed("stale-timestamp")
        return Verified(timestamp)


def standard_webhooks_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (``whsec_<base64>``, or the base64 alone)."""
    text = secret.removeprefix(_SW_SECRET_PREFIX)
    try:
        # the reference library pads what it is given; a secret without padding is common
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("a Standard Webhooks secret is base64 after whsec_") from exc
    if not key:
        raise ValueError("an empty Standard Webhooks secret")
    return key


class StandardWebhookSignature:
    id_header = "webhook-id"
    timestamp_header = "webhook-timestamp"
    header = "webhook-signature"

    def __init__(
        self, secrets: Sequence[str], tolerance_s: int, clock: Callable[[], float] = time.time
    ) -> None:
        if not secrets:
            raise ValueError("at least one signing secret")
        self._keys = [standard_webhooks_key(s) for s in secrets]
        self._tolerance_s = tolerance_s
        self._clock = clock

    def verify(self, body: bytes, headers: Mapping[str, str]) -> Verified:
        message_id = headers.get(self.id_header)
        stamp = headers.get(self.timestamp_header)
        value = headers.get(self.header)
        if not value:
            raise VerificationFailed("unsigned")
        if (
            not message_id
            or not stamp
            or not _MESSAGE_ID.fullmatch(message_id)
            or not _TIMESTAMP.fullmatch(stamp)
            or len(value) > MAX_HEADER_CHARS
        ):
            raise VerificationFailed("malformed-signature")
        signatures: list[bytes] = []
        for item in value.split():
            version, _, text = item.partition(",")
            if version != "v1":
                continue  # v1a (asymmetric) and later schemes are not ours
            try:
                signatures.append(base64.b64decode(text, validate=True))
            except (binascii.Error, ValueError):
                continue
        if not signatures or len(signatures) > MAX_SIGNATURES:
            raise VerificationFailed("malformed-signature")
        signed = f"{message_id}.{stamp}.".encode() + body
        expected = [hmac.new(key, signed, hashlib.sha256).digest() for key in self._keys]
        if not _any_match(expected, signatures):
            raise VerificationFailed("signature-mismatch")
        timestamp, now = int(stamp), self._clock()
        if timestamp < now - self._tolerance_s:
            raise VerificationFailed("stale-timestamp")
        if timestamp > now + self._tolerance_s:
            raise VerificationFailed("future-timestamp")
        return Verified(timestamp, message_id)


Verifier = StripeSignature | StandardWebhookSignature
