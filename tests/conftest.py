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
