"""migrations/bank/schema.sql is the live schema (as tests/core/test_schema.py for the others)."""

from __future__ import annotations

from tests.core.test_schema import _check


async def test_the_bank_migrations_produce_the_committed_schema(bank_template: str) -> None:
    await _check("bank", bank_template)
