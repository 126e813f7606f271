"""migrations/onboarding/schema.sql is the live schema (as tests/core/test_schema.py for the
others)."""

from __future__ import annotations

from tests.core.test_schema import _check


async def test_the_onboarding_migrations_produce_the_committed_schema(onboarding_template: str) -> None:
    await _check("onboarding", onboarding_template)
