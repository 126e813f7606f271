"""Named SQL queries, kept in ``.sql`` files (as procrastinate's ``sql/queries.sql``).

A file holds blocks introduced by ``-- name: some_query``; the text up to the next such line is
the query. Code asks for a query by name, so SQL stays SQL and stays greppable.
"""

from __future__ import annotations

import re
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?")


def checked_identifier(name: str) -> str:
    """``name`` if it is a plain (optionally schema-qualified) lower-case identifier: table and
    channel names are put into SQL text, never taken from input."""
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"{name!r} is not a plain lower-case identifier (schema.table)")
    return name


def load_queries(path: Path) -> dict[str, str]:
    text = path.read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} defined twice in {path}")
        queries[name] = body.strip()
    return queries
