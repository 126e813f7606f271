"""migrations/topup/schema.sql is the live schema (as tests/core/test_schema.py for the others)."""

from __future__ import annotations

from tests.core.test_schema import _check


async def test_the_topup_migrations_produce_the_committed_schema(topup_template: str) -> None:
    await _check("topup", topup_template)
