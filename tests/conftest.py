from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests import pgtemplate


@pytest.fixture(scope="session")
async def wallet_template() -> AsyncIterator[str]:
    name = await pgtemplate.make_template("wallet")
    yield name
    await pgtemplate.drop_database(name)


@pytest.fixture
async def wallet_db(wallet_template: str) -> AsyncIterator[str]:
    """The name of a fresh, migrated ``hiwallet_wallet`` for one test."""
    name = await pgtemplate.clone(wallet_template)
    yield name
    await pgtemplate.drop_database(name)


def _hypothesis_profiles() -> None:
    """Hypothesis profiles. "default" keeps `make test` fast; HYPOTHESIS_PROFILE=long runs far
    more examples and longer stateful sequences (README), e.g. after touching the ledger's rules.
    A test that sets its own counts keeps them; the others follow the profile."""
    import os

    from hypothesis import settings

    settings.register_profile("default", max_examples=25, stateful_step_count=30, deadline=None)
    settings.register_profile("long", max_examples=200, stateful_step_count=80, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


_hypothesis_profiles()
