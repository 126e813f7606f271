from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from hiwallet.core.broker import Broker
from hiwallet.core.logging import configure_logging
from hiwallet.core.settings import get_settings
from tests import logscan, pgtemplate

LOG_FILE_ENV = "HIWALLET_LOG_FILE"
_ran: set[str] = set()


def pytest_configure(config: pytest.Config) -> None:
    # One log file for the whole run, inherited by every process the tests start; scanned for
    # secrets when the run ends (pytest_sessionfinish).
    if LOG_FILE_ENV not in os.environ:
        directory = tempfile.mkdtemp(prefix="hiwallet-test-log-")
        os.environ[LOG_FILE_ENV] = str(Path(directory) / "run.jsonl")
    get_settings.cache_clear()
    configure_logging("tests")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A test marked in_process starts no service, so it cannot make the access lines the scan
    # checks for: a run of only such tests (one unit-test file alone) asks for none.
    if report.when == "call" and report.passed and "in_process" not in report.keywords:
        _ran.add(report.nodeid.split("/")[1] if report.nodeid.count("/") > 1 else report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any process it started logged a secret; and make sure the scan saw the
    services the run exercised (their access lines are in the file).

    Under pytest-xdist (``make test`` runs three workers) the workers inherit the controller's
    log file and the controller sees every worker's reports: the scan is the controller's, once,
    after every worker has finished."""
    if hasattr(session.config, "workerinput"):
        return
    path = Path(os.environ[LOG_FILE_ENV])
    text = path.read_text(errors="replace") if path.exists() else ""
    problems = [f"{kind}: {line[:300]}" for kind, line in logscan.find_secrets(text)]
    services = logscan.access_services(text)
    if "wallet_api" in _ran and "wallet-api" not in services:
        problems.append(f"no wallet-api access line in {path}: the scan would see nothing")
    if "identity" in _ran and not any(s.startswith("identity-") for s in services):
        problems.append(f"no identity access line in {path}: the scan would see nothing")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if problems:
        if reporter is not None:
            reporter.write_line(f"the logs of this run ({path}) hold what no log may:", red=True)
            for problem in problems[:20]:
                reporter.write_line(f"  {problem}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif reporter is not None and text:
        lines = text.count("\n")
        reporter.write_line(f"log scan: {lines} lines of {path}, no secret ({', '.join(sorted(services))})")


@pytest.fixture(autouse=True)
def _logging_as_tests() -> Iterator[None]:
    """A command run in-process (typer's CliRunner) configures logging as "hiwallet-cli" for
    the rest of the process; each test starts as "tests" again, whatever ran before it."""
    yield
    configure_logging("tests")


@pytest.fixture(scope="session")
async def wallet_template() -> AsyncIterator[str]:
    async with pgtemplate.temporary(pgtemplate.make_template("wallet")) as name:
        yield name


@pytest.fixture
async def wallet_db(wallet_template: str) -> AsyncIterator[str]:
    """The name of a fresh, migrated ``hiwallet_wallet`` for one test."""
    async with pgtemplate.temporary(pgtemplate.clone(wallet_template)) as name:
        yield name


@pytest.fixture(scope="session")
async def topup_template() -> AsyncIterator[str]:
    async with pgtemplate.temporary(pgtemplate.make_template("topup")) as name:
        yield name


@pytest.fixture
async def topup_db(topup_template: str) -> AsyncIterator[str]:
    """The name of a fresh, migrated ``hiwallet_topup`` for one test."""
    async with pgtemplate.temporary(pgtemplate.clone(topup_template)) as name:
        yield name


@pytest.fixture(scope="session")
async def withdrawal_template() -> AsyncIterator[str]:
    async with pgtemplate.temporary(pgtemplate.make_template("withdrawal")) as name:
        yield name


@pytest.fixture(scope="session")
async def bank_template() -> AsyncIterator[str]:
    async with pgtemplate.temporary(pgtemplate.make_template("bank")) as name:
        yield name


@pytest.fixture
async def withdrawal_db(withdrawal_template: str) -> AsyncIterator[str]:
    """The name of a fresh, migrated ``hiwallet_withdrawal`` for one test."""
    async with pgtemplate.temporary(pgtemplate.clone(withdrawal_template)) as name:
        yield name


@pytest.fixture
async def bank_db(bank_template: str) -> AsyncIterator[str]:
    """The name of a fresh, migrated ``hiwallet_bank`` for one test."""
    async with pgtemplate.temporary(pgtemplate.clone(bank_template)) as name:
        yield name


@pytest.fixture(scope="session")
async def onboarding_template() -> AsyncIterator[str]:
    async with pgtemplate.temporary(pgtemplate.make_template("onboarding")) as name:
        yield name


@pytest.fixture
async def onboarding_db(onboarding_template: str) -> AsyncIterator[str]:
    """The name of a fresh, migrated ``hiwallet_onboarding`` for one test."""
    async with pgtemplate.temporary(pgtemplate.clone(onboarding_template)) as name:
        yield name


@pytest.fixture(scope="session")
async def staff_admin_template() -> AsyncIterator[str]:
    async with pgtemplate.temporary(pgtemplate.make_template("staff_admin")) as name:
        yield name


@pytest.fixture
async def staff_admin_db(staff_admin_template: str) -> AsyncIterator[str]:
    """The name of a fresh, migrated ``hiwallet_staff_admin`` for one test."""
    async with pgtemplate.temporary(pgtemplate.clone(staff_admin_template)) as name:
        yield name


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    """A started broker client (tests/core, tests/topup_webhook, tests/wallet_consumer); the
    test gives what it declares a unique prefix and deletes it afterwards."""
    b = Broker(
        get_settings().amqp_url.get_secret_value(), client_name="hiwallet-tests", confirm_timeout_s=5.0
    )
    await b.start()
    yield b
    await b.close()


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
