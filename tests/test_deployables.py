"""The registry of deployables (hiwallet.contracts.deployables) is the one list of processes:
`hiwallet run`, `hiwallet up` and the README read it. Each entry resolves, its default port is
its settings' default, its database is a registered one, and `up` runs exactly it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hiwallet.cli import app
from hiwallet.contracts.databases import DATABASES
from hiwallet.contracts.deployables import DEPLOYABLES, deployable
from hiwallet.up import deployables

NAMES = [d.name for d in DEPLOYABLES]


def test_names_and_ports_are_unique() -> None:
    assert len(set(NAMES)) == len(NAMES)
    assert len({d.port for d in DEPLOYABLES}) == len(DEPLOYABLES)


@pytest.mark.parametrize("name", NAMES)
def test_the_entry_resolves_and_the_port_is_the_settings_default(name: str) -> None:
    d = deployable(name)
    module, _, function = d.entry.partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    module, _, function = d.settings.partition(":")
    settings_class = type(getattr(importlib.import_module(module), function)())
    # the class's default, not the environment's: the registry says what a fresh machine runs
    assert settings_class.model_fields[d.port_field].default == d.port
    assert d.database is None or d.database in DATABASES
    # a fake keeps what it has in memory; a front API has no state at all
    assert not d.fake or d.database is None
    assert d.ready_path == ("/health" if d.fake else "/ready")


def test_up_runs_exactly_the_registry() -> None:
    assert [(d.name, d.args, d.tier, d.ready_path) for d in deployables()] == [
        (d.name, ("run", d.name), d.tier, d.ready_path) for d in DEPLOYABLES
    ]


def test_an_unknown_deployable_is_refused_naming_none_started() -> None:
    result = CliRunner().invoke(app, ["run", "no-such-deployable"])
    assert result.exit_code == 2
    assert "unknown deployable" in result.output
    with pytest.raises(KeyError, match="wallet-api"):
        deployable("no-such-deployable")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "wallet-api", "--realm", "hiwallet"], "has no realm"),
        (["run", "identity", "--realm", "elsewhere"], "has no realm"),
        (["run", "staff-admin", "--workers", "2"], "takes no workers"),
    ],
)
def test_an_option_the_deployable_does_not_take_is_refused(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_readmes_table_is_the_registry() -> None:
    """README.md's table of deployables names each deployable of the registry, in its order,
    with its port and database: a deployable added, renamed or moved shows there too."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("<!-- deployables:start -->")[1].split("<!-- deployables:end -->")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    listed = [
        (row[0].strip("`"), row[1].split()[0], row[2]) for row in rows if row and row[0].startswith("`")
    ]
    assert listed == [
        (
            d.name,
            str(d.port),
            f"`{DATABASES[d.database]}`" if d.database else "none (memory)" if d.fake else "none",
        )
        for d in DEPLOYABLES
    ]


def test_the_readme_is_short_and_its_layout_names_every_package() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "the README is read to the end: details go to docs/"
    layout = readme.split("## Layout")[1].split("```")[1]
    src = Path(__file__).resolve().parents[1] / "src" / "hiwallet"
    packages = sorted(p.name for p in src.iterdir() if (p / "__init__.py").exists())
    assert [p for p in packages if f"  {p}/" not in layout] == []


# The front APIs and BFFs have no database and no broker, so they must not pay for their client
# libraries (about 10 MB of each process, docs/performance.md): a contracts or platform module
# that pulls one in again fails this test.
FRONTS = [
    d.name for d in DEPLOYABLES if not d.fake and d.database is None and not d.consumes and d.topology is None
]
# What `hiwallet up` runs for each (`python -m hiwallet.cli run NAME`): the CLI module with that
# command line, then the app built and the settings read as the entry point does before serving.
_CLIENT_LIBRARIES_IN = """
import importlib, sys
name, module, function = sys.argv[1], sys.argv[2], sys.argv[3]
sys.argv = ["hiwallet", "run", name]
import hiwallet.cli
from hiwallet.contracts.deployables import deployable
deployable(name).port_in_force()
app_module = importlib.import_module(module)
getattr(app_module, "create_" + function.removeprefix("run_") + "_app")()
print(" ".join(sorted(m for m in ("asyncpg", "aio_pika", "aiormq") if m in sys.modules)))
"""


@pytest.mark.parametrize("name", FRONTS)
def test_a_front_process_loads_no_database_or_broker_client(name: str) -> None:
    module, _, function = deployable(name).entry.partition(":")
    # A fresh interpreter: this one (the tests') has loaded everything already.
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT_LIBRARIES_IN, name, module, function],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""


def test_the_fronts_are_the_five_doors() -> None:
    """The list above is derived from the registry; this keeps it from going empty silently."""
    assert set(FRONTS) == {
        "personal-mobile-api",
        "business-api",
        "personal-web-bff",
        "business-web-bff",
        "backoffice-bff",
    }
