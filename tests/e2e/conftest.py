"""End-to-end fixtures: per test, fresh ``hiwallet_topup`` and ``hiwallet_wallet`` databases
(clones of the root conftest's migrated templates) and the processes a test asks for; per module, a RabbitMQ
virtual host (its topology deleted between tests). See tests/e2e/harness.py.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests import pgtemplate
from tests.e2e import collector, harness
from tests.e2e.harness import Process
from tests.e2e.system import System
from tests.e2e.withdrawals import WithdrawalSystem, withdrawal_system
from tests.identity.conftest import IdentityServer
from tests.servers import free_port
from tests.staff_admin.conftest import StaffAdminServer

# The identity servers of the wallet-api tests (session fixtures): the withdrawal tests' customers
# get real tokens from them.
from tests.wallet_api.conftest import customer_idp, idps, staff_idp  # noqa: F401


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


@pytest.fixture(scope="module")
async def withdrawals_module(
    vhost: str,
    wallet_template: str,
    withdrawal_template: str,
    bank_template: str,
    customer_idp: IdentityServer,  # noqa: F811
    staff_idp: IdentityServer,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> AsyncIterator[WithdrawalSystem]:
    """The withdrawal saga's system, shared by a module's tests (tests/e2e/withdrawals.py); a
    module that sets ``PROXIED = True`` gets a proxy in front of RabbitMQ for each process, one
    that sets ``TRACED = True`` an OTLP collector its processes export their spans to
    (``request.module.collector``, tests/e2e/collector.py)."""
    with contextlib.ExitStack() as stack:
        extra_env: dict[str, str] = {}
        if getattr(request.module, "TRACED", False):
            traces = stack.enter_context(collector.collecting())
            request.module.collector = traces
            extra_env = {"HIWALLET_OTEL_ENDPOINT": traces.url, **collector.SCHEDULE_DELAY_ENV}
        async with withdrawal_system(
            vhost,
            (wallet_template, withdrawal_template, bank_template),
            customer_idp,
            staff_idp,
            tmp_path_factory.mktemp("withdrawals"),
            proxied=getattr(request.module, "PROXIED", False),
            extra_env=extra_env,
        ) as running:
            yield running
    # Every process the module ran: no secret, token or IBAN (but masked) in what it logged.
    assert running.leaks() == [], running.leaks()


@pytest.fixture
async def withdrawals(
    withdrawals_module: WithdrawalSystem, request: pytest.FixtureRequest
) -> AsyncIterator[WithdrawalSystem]:
    """The module's system, healed: every process standard and ready, no transfer rule. After
    the test, every process still runs (none exited on its own)."""
    await withdrawals_module.heal()
    yield withdrawals_module
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for process in withdrawals_module.processes.values():
            print(process.tail(60))
    else:
        assert withdrawals_module.exited() == [], withdrawals_module.exited()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keep each phase's report on the item, so the fixture can print the processes' logs of a
    failed test."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="module")
async def staff_admin_process(
    staff_idp: IdentityServer,  # noqa: F811 (the fixture imported above)
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Process, StaffAdminServer]]:
    """staff-admin as a process on a clone of hiwallet_staff_admin (one per module: the staff
    endpoints' tests); the helper that seeds
    employees (as an accepted invitation leaves them) and logs them in on the staff realm."""
    async with (
        pgtemplate.temporary(pgtemplate.make_template("staff_admin")) as template,
        pgtemplate.temporary(pgtemplate.clone(template)) as database,
    ):
        port = free_port()
        env = harness.env_of(
            dict(os.environ),
            HIWALLET_STAFF_ADMIN_PORT=port,
            HIWALLET_STAFF_ADMIN_DATABASE=database,
            HIWALLET_STAFF_ADMIN_STAFF_ISSUER_BASE=staff_idp.base_url,
            HIWALLET_STAFF_ADMIN_BOOTSTRAP_EMAIL="",
        )
        log_dir: Path = tmp_path_factory.mktemp("staff-admin")
        process = Process(name="staff-admin", port=port, env=env, log_dir=log_dir)
        process.start()
        try:
            await process.wait_ready()
            helper = StaffAdminServer(process.url, database, staff_idp, None, None, None)  # type: ignore[arg-type]
            yield process, helper
        finally:
            await process.stop()
