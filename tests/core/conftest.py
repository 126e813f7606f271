"""Fixtures of the asynchronous spine's tests (tests/core/test_broker.py, test_outbox.py,
test_jobs.py, test_consumer.py): a fresh database and a unique topology; the started broker is
the root conftest's ``broker``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hiwallet.core.broker import Broker
from tests import pgtemplate
from tests.core import spine


@pytest.fixture
async def spine_db() -> AsyncIterator[str]:
    async with pgtemplate.temporary(spine.make_database()) as name:
        yield name


@pytest.fixture
async def names(broker: Broker) -> AsyncIterator[spine.Names]:
    """A unique exchange, partition queues and dead letters, declared; deleted afterwards."""
    n = spine.Names()
    await broker.declare(n.topology())
    yield n
    await broker.delete(n.topology())
