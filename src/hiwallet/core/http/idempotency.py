"""The Idempotency-Key protocol every money-moving POST shares (docs/architecture.md): the
key's form and the four problems it can answer. wallet-api and withdrawal-orchestrator keep
their own stored answers (each in its database); what a client sees of the key is this one
copy, so the same key is treated alike by every service.

- no key: 400 ``idempotency-key-missing``; a key that is not 1-255 visible ASCII characters
  (an sf-string's content, quoted or bare): 400 ``idempotency-key-invalid``;
- the same key with another request: 422 ``idempotency-key-reused``;
- the same key while the first request still runs: 409 ``idempotency-in-progress``.
"""

from __future__ import annotations

import re

from hiwallet.core.http.problems import ProblemError

__all__ = [
    "IDEMPOTENCY_KEY_HEADER",
    "MAX_IDEMPOTENCY_KEY",
    "IdempotencyInProgress",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyMissing",
    "IdempotencyKeyReused",
    "check_idempotency_key",
    "in_progress",
    "reused",
]

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 255
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII, as an sf-string's content


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


# What ``check_idempotency_key`` accepts, exactly, for a document's header parameter: 1 to 255
# visible ASCII characters, bare or as an sf-string ("…", the quotes not counted). A bare key of
# two or more characters that starts and ends with a quote is read as quoted, so '""' is the one
# bare key refused; the alternatives spell "V{1,255} but not two quotes" without a lookahead.
# (the documents' pattern: wallet-api's and the front APIs'; tests/wallet_api/test_document.py
# tests it against this check.)
IDEMPOTENCY_KEY_PATTERN = (
    r'^(?:"[\x21-\x7e]{1,255}"|[\x21-\x7e]|[\x21\x23-\x7e][\x21-\x7e]|"[\x21\x23-\x7e]|[\x21-\x7e]{3,255})$'
)


def check_idempotency_key(key: str | None) -> str:
    """The key of a request's header, or the problem with it."""
    if key is None:
        raise IdempotencyKeyMissing("send an Idempotency-Key header (a UUID is a good key)")
    # RFC draft: the key is an sf-string; accept it quoted or bare.
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not _IDEMPOTENCY_KEY.fullmatch(key):  # fullmatch: "$" would let a trailing newline in
        raise IdempotencyKeyInvalid(
            f"the key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters",
            field=IDEMPOTENCY_KEY_HEADER,
        )
    return key


def in_progress() -> IdempotencyInProgress:
    return IdempotencyInProgress("the first request with this key is still running; retry shortly")


def reused() -> IdempotencyKeyReused:
    return IdempotencyKeyReused("this Idempotency-Key was used with another request; use a new key")
