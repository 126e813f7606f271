"""Free text a service stores (references, names): printable, and not blank.

PostgreSQL cannot store NUL in ``text`` (a data error, not a retryable one), and no one should
store the other control characters (C0, DEL, C1: U+0000–U+001F, U+007F–U+009F): they bend log
lines, terminals and exports, and a reference a person reads never needs one. They are refused
at the edge, where the client learns which field, and again by the ledger's own check
(``ledger.rules.check_text``) for every caller that is not an HTTP request.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, StrictStr

# A regular-expression character class body, shared by the patterns below.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f"
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")

# No control character, and at least one character that is not white space (the ledger refuses
# a blank text). Rust's regex engine runs it in pydantic (linear time); the OpenAPI document
# carries it as the fields' ``pattern``, which ECMA-262 and Python's ``re`` read alike.
PRINTABLE_TEXT_PATTERN = rf"^[^{CONTROL_CHARACTERS}]*[^\s{CONTROL_CHARACTERS}][^{CONTROL_CHARACTERS}]*$"

PrintableText = Annotated[StrictStr, Field(pattern=PRINTABLE_TEXT_PATTERN)]
"""Every free-text field of a request model: printable and not blank (add a length)."""


def has_control_characters(value: str) -> bool:
    if value.isascii():
        # The common case, in ~40 ns instead of a regex search's ~250 (on the posting path):
        # in ASCII, what is not printable is exactly C0 and DEL.
        return not value.isprintable()
    return _CONTROL.search(value) is not None
