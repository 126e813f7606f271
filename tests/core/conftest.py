"""Fixtures of the asynchronous spine's tests (tests/core/test_broker.py, test_outbox.py,
test_jobs.py, test_consumer.py): a fresh database, a started broker, a unique topology."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hiwallet.core.broker import Broker
from hiwallet.core.settings import get_settings
from tests import pgtemplate
from tests.core import spine


@pytest.fixture
async def spine_db() -> AsyncIterator[str]:
    name = await spine.make_database()
    yield name
    await pgtemplate.drop_database(name)


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    b = Broker(get_settings().amqp_url, client_name="hiwallet-tests", confirm_timeout_s=5.0)
    await b.start()
    yield b
    await b.close()


@pytest.fixture
async def names(broker: Broker) -> AsyncIterator[spine.Names]:
    """A unique exchange, partition queues and dead letters, declared; deleted afterwards."""
    n = spine.Names()
    await broker.declare(n.topology())
    yield n
    await broker.delete(n.topology())
