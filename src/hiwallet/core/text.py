"""Free text a service stores (references, names): printable, and not blank.

PostgreSQL cannot store NUL in ``text`` (a data error, not a retryable one), and no one should
store the other control characters (C0, DEL, C1: U+0000–U+001F, U+007F–U+009F): they bend log
lines, terminals and exports, and a reference a person reads never needs one. They are refused
at the edge, where the client learns which field, and again by the ledger's own check
(``ledger.rules.check_text``) for every caller that is not an HTTP request.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictStr

# A regular-expression character class body, shared by the patterns below.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f"
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")

# No control character, and at least one character that is not white space (the ledger refuses
# a blank text). Rust's regex engine runs it in pydantic (linear time); the OpenAPI document
# carries it as the fields' ``pattern``, which ECMA-262 and Python's ``re`` read alike.
PRINTABLE_TEXT_PATTERN = rf"^[^{CONTROL_CHARACTERS}]*[^\s{CONTROL_CHARACTERS}][^{CONTROL_CHARACTERS}]*$"

PrintableText = Annotated[StrictStr, Field(pattern=PRINTABLE_TEXT_PATTERN)]
"""Every free-text field of a request model: printable and not blank (add a length)."""


# An e-mail address as the identity service takes one: it is the user's username there, of
# letters, digits and . _ + - (identity/admin.py: _USERNAME, compared in lower case), at most 255
# characters; with RFC 5321's lengths (64 before the @, 254 in all: the fields' max_length).
# Narrower than mail allows (no internationalized address): what one service takes, the next
# must, or a registration would fail at its last step.
EMAIL_PATTERN = r"^[A-Za-z0-9._+-]{1,64}@[A-Za-z0-9.-]{1,252}\.[A-Za-z0-9-]{1,63}$"

# RFC 3339's date-time, as JSON Schema's ``format: date-time`` means it: a date, "T", a time and
# its offset. pydantic's datetime alone also takes a Unix time ("0.5"), a date, no offset: more
# than a document with that format says.
RFC3339_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_RFC3339 = re.compile(RFC3339_PATTERN)


def _rfc3339(value: Any) -> Any:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("an RFC 3339 date-time with its offset, e.g. 2026-01-31T12:00:00Z")
    return value


Rfc3339DateTime = Annotated[datetime, BeforeValidator(_rfc3339)]
"""A date-time in a request (a query parameter, a field): exactly ``format: date-time``."""


def has_control_characters(value: str) -> bool:
    if value.isascii():
        # The common case, in ~40 ns instead of a regex search's ~250 (on the posting path):
        # in ASCII, what is not printable is exactly C0 and DEL.
        return not value.isprintable()
    return _CONTROL.search(value) is not None
