"""``hiwallet``: the command line. Commands only translate arguments; the work lives below."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer
from rich.console import Console

from hiwallet.contracts.deployables import DEPLOYABLES, deployable
from hiwallet.core.logging import configure_logging
from hiwallet.core.settings import get_settings

# No locals in a crash's traceback (typer's rich tracebacks show them by default): settings,
# DSNs and tokens live in locals.
app = typer.Typer(
    no_args_is_help=True,
    help="HiWallet: wallets on a double-entry ledger.",
    pretty_exceptions_show_locals=False,
)
console = Console()


@app.callback()
def _start() -> None:
    # Every command's process logs JSON lines (core/logging.py); `run` and `up` name their own.
    configure_logging("hiwallet-cli")


@app.command()
def migrate(
    database: Annotated[
        list[str] | None,
        typer.Option("--db", help="A database key (wallet, identity, ...); all when omitted."),
    ] = None,
) -> None:
    """Create the databases and apply their numbered migrations (idempotent, concurrency-safe)."""
    from hiwallet.contracts import databases
    from hiwallet.core import db

    settings = get_settings()
    keys = database or list(databases.DATABASES)

    async def _run() -> None:
        for key in keys:
            done = await databases.migrate(key, settings=settings)
            what = ", ".join(f"{v:04d}" for v in done) or "nothing new"
            console.print(f"[bold]{databases.DATABASES[key]}[/bold]: {what}")

    try:
        asyncio.run(_run())
    except db.DatabaseMisconfigured as exc:
        console.print(f"[red]refused[/red]: {exc}")
        raise typer.Exit(2) from exc


schema_app = typer.Typer(no_args_is_help=True, help="The generated schema.sql of each database.")
app.add_typer(schema_app, name="schema")


@schema_app.command("dump")
def schema_dump() -> None:
    """Write migrations/<db>/schema.sql from freshly migrated databases (after a new migration;
    tests/core/test_schema.py checks the files). Needs pg_dump and the owner's server URL."""
    from hiwallet.contracts import databases
    from hiwallet.core import schema

    for path in asyncio.run(
        schema.write_all(databases.folder_keys(), get_settings(), services=databases.SERVICE_ROLES)
    ):
        console.print(f"wrote [bold]{path}[/bold]")


@app.command()
def run(
    name: Annotated[
        str,
        typer.Argument(
            help="The deployable to run: "
            + ", ".join(d.name for d in DEPLOYABLES)
            + " (identity-staff is identity's staff realm)."
        ),
    ],
    realm: Annotated[
        str | None, typer.Option(help="identity: hiwallet or hiwallet-staff (the same as identity-staff)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Listen port; the service's default if omitted.")] = None,
    host: Annotated[str, typer.Option(help="Listen address.")] = "127.0.0.1",
    workers: Annotated[
        int | None,
        typer.Option(help="wallet-api: worker processes (default HIWALLET_WALLET_API_WORKERS, 1)."),
    ] = None,
) -> None:
    """Run one deployable (assumes `hiwallet migrate` has run). The list is the registry's
    (hiwallet.contracts.deployables), the same `hiwallet up` starts."""
    if name == "identity" and realm == "hiwallet-staff":
        name = "identity-staff"
    elif (
        realm is not None
        and not (name == "identity" and realm == "hiwallet")
        and not (name == "identity-staff" and realm == "hiwallet-staff")
    ):
        raise typer.BadParameter(f"{name} has no realm {realm!r}", param_hint="--realm")
    try:
        target = deployable(name)
    except KeyError as exc:
        raise typer.BadParameter(f"unknown deployable {name!r}", param_hint="NAME") from exc
    try:
        target.run(port, host, workers=workers)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


@app.command()
def up() -> None:
    """Start the whole system (migrated, demo data ready); Ctrl-C stops it all."""
    from hiwallet.up import up as run_up

    configure_logging("up")
    run_up()


def _register_subcommands() -> None:
    from hiwallet.broker_cli import broker_app
    from hiwallet.deadletters_cli import dead_letters_app
    from hiwallet.identity.cli import identity_app
    from hiwallet.ledger.cli import ledger_app
    from hiwallet.reconciliation.cli import reconcile_app
    from hiwallet.topup_webhook.cli import register as register_topup_webhook
    from hiwallet.wallet_api.cli import business_app, invoices_app
    from hiwallet.wallet_consumer.cli import register as register_wallet_consumer
    from hiwallet.wallet_consumer.cli import register_ledger_jobs

    # wallet-consumer's ledger jobs (expire-promos, sweep) beside the ledger's own commands
    register_ledger_jobs(ledger_app)
    app.add_typer(ledger_app, name="ledger")
    app.add_typer(identity_app, name="identity")
    app.add_typer(business_app, name="business")
    app.add_typer(invoices_app, name="invoices")
    app.add_typer(dead_letters_app, name="dead-letters")
    app.add_typer(broker_app, name="broker")
    app.add_typer(reconcile_app, name="reconcile")
    # One `topups` sub-app, each service adding its commands (neither imports the other):
    # topup-webhook's reconcile, wallet-consumer's unattributed and attribute.
    topups_app = typer.Typer(no_args_is_help=True, help="Top-ups (operator commands).")
    register_topup_webhook(topups_app)
    register_wallet_consumer(topups_app)
    app.add_typer(topups_app, name="topups")
    from hiwallet.withdrawals.cli import withdrawals_app

    app.add_typer(withdrawals_app, name="withdrawals")
    from hiwallet.bank.cli import bank_app

    app.add_typer(bank_app, name="bank")
    from hiwallet.onboarding.cli import onboarding_app

    app.add_typer(onboarding_app, name="onboarding")
    from hiwallet.staff_admin.cli import staff_app

    app.add_typer(staff_app, name="staff")


# The database's and the broker's modules (asyncpg, aio-pika) are imported by the commands that
# use them, not here: `hiwallet run personal-mobile-api` (a front, with neither) starts here.
# `hiwallet run NAME`, the command each of `hiwallet up`'s processes is, needs none of the other
# commands: importing them (the ledger's, identity's, wallet-api's, … command modules and what
# they import) cost every service process about 10 MB it never used (docs/performance.md).
if sys.argv[1:2] != ["run"]:
    _register_subcommands()


if __name__ == "__main__":
    app()
