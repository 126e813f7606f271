"""``hiwallet bank reconcile``: one bank reconciliation round by hand, under the same lock as
bank-adapter's rounds (never two at once); ``hiwallet bank statements``: one round of the
statements' import, likewise. What they record is announced by bank-adapter's relay (woken by a
NOTIFY after the commit)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from prometheus_client import CollectorRegistry
from rich.console import Console

from hiwallet.bank.adapter import reconcile_job, statement_client, statement_job
from hiwallet.bank.client import BankClient
from hiwallet.bank.metrics import AdapterMetrics
from hiwallet.bank.pool import database_spec
from hiwallet.bank.reconcile import Reconciler
from hiwallet.bank.settings import BankSettings, get_bank_settings
from hiwallet.bank.statements import StatementImporter
from hiwallet.bank.store import OUTBOX_CHANNEL, BankStore
from hiwallet.core.relay_hint import RelayHint
from hiwallet.core.settings import get_settings

__all__ = ["bank_app", "reconcile_once", "statements_once"]

console = Console(emoji=False, soft_wrap=True)


async def reconcile_once(settings: BankSettings) -> int | None:
    """One round; None when another instance holds the round's lock (it is running one)."""
    core = get_settings()
    pool = await database_spec(settings).create_pool(core, max_size=2)
    bank = BankClient.from_settings(settings)
    # what it records wakes bank-adapter's relay (in another process: one NOTIFY after commits)
    hint = RelayHint(pool, OUTBOX_CHANNEL)
    try:
        reconciler = Reconciler(
            BankStore(pool, settings.exchange, on_committed=hint.committed),
            bank,
            AdapterMetrics(CollectorRegistry()),
            stale_after_s=settings.reconcile_stale_after_s,
            batch=settings.reconcile_batch,
        )
        found: list[int] = []

        async def round_() -> int:
            found.append(await reconciler.run())
            return found[-1]

        job = reconcile_job(round_, settings, database_spec(settings).dedicated(core))
        return found[0] if await job.run_once() else None
    finally:
        await hint.aclose()
        await bank.aclose()
        await pool.close()


async def statements_once(settings: BankSettings) -> int | None:
    """One round of the statements' import; None when another instance holds its lock."""
    core = get_settings()
    pool = await database_spec(settings).create_pool(core, max_size=2)
    client = statement_client(settings)
    hint = RelayHint(pool, OUTBOX_CHANNEL)
    try:
        importer = StatementImporter(
            BankStore(pool, settings.exchange, on_committed=hint.committed),
            client,
            lookback_days=settings.statement_lookback_days,
            exchange=settings.events_exchange,
        )
        announced: list[int] = []

        async def round_() -> int:
            announced.append(await importer.run())
            return announced[-1]

        job = statement_job(round_, settings, database_spec(settings).dedicated(core))
        return announced[0] if await job.run_once() else None
    finally:
        await hint.aclose()
        await client.aclose()
        await pool.close()


bank_app = typer.Typer(no_args_is_help=True, help="The bank side of withdrawals (operator commands).")


@bank_app.command()
def reconcile(
    stale_after_s: Annotated[
        float | None,
        typer.Option(help="Ask about transfers pending longer than this (default: the setting)."),
    ] = None,
) -> None:
    """Ask the bank about every transfer pending for longer than the stale age and record the
    outcomes no callback reported (once: a transfer with an outcome is left alone)."""
    settings = get_bank_settings()
    if stale_after_s is not None:
        settings = settings.model_copy(update={"reconcile_stale_after_s": stale_after_s})
    found = asyncio.run(reconcile_once(settings))
    if found is None:
        console.print("[yellow]busy[/yellow]: a reconciliation round is running elsewhere; try again")
        raise typer.Exit(1)
    console.print(f"recorded [bold]{found}[/bold] transfer outcome(s) no callback had reported")


@bank_app.command()
def statements() -> None:
    """Read the bank's statements of the last complete days not read yet and announce the wires
    each one shows credited (once a day: a day recorded before is left alone)."""
    announced = asyncio.run(statements_once(get_bank_settings()))
    if announced is None:
        console.print("[yellow]busy[/yellow]: a statements round is running elsewhere; try again")
        raise typer.Exit(1)
    console.print(f"announced [bold]{announced}[/bold] day(s) of statements")
