"""staff-admin's named queries (``queries.sql``)."""

from __future__ import annotations

from pathlib import Path

from hiwallet.core.queries import load_queries

Q: dict[str, str] = load_queries(Path(__file__).with_name("queries.sql"))
