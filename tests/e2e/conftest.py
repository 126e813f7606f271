"""End-to-end fixtures: per test, fresh ``hiwallet_topup`` and ``hiwallet_wallet`` databases
(clones of the root conftest's migrated templates) and the processes a test asks for; per module, a RabbitMQ
virtual host (its topology deleted between tests). See tests/e2e/harness.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests import pgtemplate
from tests.e2e import harness
from tests.e2e.system import System


@pytest.fixture(scope="module")
async def vhost() -> AsyncIterator[str]:
    """A RabbitMQ virtual host for this module's tests (the pid and a random part keep two
    runs on one broker apart)."""
    name = f"hwt{os.getpid()}-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(name)
    yield name
    await harness.delete_vhost(name)


@pytest.fixture
async def system(
    vhost: str, topup_template: str, wallet_template: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[System]:
    await harness.clear_topology(vhost)
    topup_db = await pgtemplate.clone(topup_template)
    wallet_db = await pgtemplate.clone(wallet_template)
    running = System(vhost=vhost, topup_db=topup_db, wallet_db=wallet_db, log_dir=tmp_path)
    try:
        await running.open()
        yield running
    finally:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for process in running.children.processes:
                print(process.tail(60))
        await running.close()
        await harness.clear_topology(vhost)
        await pgtemplate.drop_database(topup_db)
        await pgtemplate.drop_database(wallet_db)
    # Every process this test ran: no secret, no sender's name or IBAN in what it logged.
    assert running.leaks() == [], running.leaks()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keep each phase's report on the item, so the fixture can print the processes' logs of a
    failed test."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
