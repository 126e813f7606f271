"""``hiwallet reconcile``: the operator's side of reconciliation (the same work as
wallet-consumer's jobs and wallet-api's staff endpoints, as wallet-consumer's role).

- ``run``: a round now, under the jobs' lock (refused while one runs elsewhere);
- ``findings`` (``--resolved``, ``--kind``): what the rounds and the settlement import found;
- ``resolve ID --note``: resolved by ``operator:<your login>``;
- ``summary`` (``--days``, ``--refresh``, ``--csv``): the daily operations summary."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, TypeVar

import asyncpg
import typer
from rich.console import Console
from rich.table import Table

from hiwallet.contracts.databases import DATABASES, service_role
from hiwallet.core import db
from hiwallet.core.actors import operator_login
from hiwallet.core.cli import Refusals, run_command
from hiwallet.core.settings import get_settings
from hiwallet.ledger import init_connection
from hiwallet.reconciliation.checks import Reconciler, run_now
from hiwallet.reconciliation.errors import FindingAlreadyResolved, FindingNotFound, ReconciliationBusy
from hiwallet.reconciliation.findings import MAX_PAGE, list_findings, resolve_finding
from hiwallet.reconciliation.settings import get_reconciliation_settings
from hiwallet.reconciliation.summary import MAX_DAYS, read_summary, refresh_summary, summary_csv

__all__ = ["reconcile_app"]

console = Console(emoji=False, soft_wrap=True)
reconcile_app = typer.Typer(
    no_args_is_help=True, help="Reconciliation and the daily summary (operator commands)."
)
T = TypeVar("T")
Opened = tuple[asyncpg.Pool, Callable[[], Awaitable[asyncpg.Connection]]]

REFUSALS: Refusals = {
    ReconciliationBusy: lambda exc: f"[yellow]busy[/yellow]: {exc}",
    FindingNotFound: lambda exc: f"[red]not found[/red]: {exc}",
    FindingAlreadyResolved: lambda exc: f"[yellow]already resolved[/yellow]: {exc}",
    ValueError: lambda exc: f"[red]refused[/red]: {exc}",
}


@asynccontextmanager
async def _wallet_db() -> AsyncIterator[Opened]:
    """The wallet database as wallet-consumer's role (whose jobs these are), and how to open a
    connection of its own (the jobs' lock)."""
    settings = get_settings()
    database = DATABASES["wallet"]
    role = service_role("wallet", "wallet_consumer")
    pool = await db.create_pool(database, role=role, settings=settings, max_size=2, init=init_connection)
    try:
        yield pool, db.dedicated_connection(database, role, settings)
    finally:
        await pool.close()


def _run(work: Callable[[Opened], Awaitable[T]]) -> T:
    return run_command(_wallet_db, work, console=console, refusals=REFUSALS)


@reconcile_app.command("run")
def run_command_() -> None:
    """A reconciliation round now (as the 6-hourly job's): what it found, by kind."""

    async def work(opened: Opened) -> None:
        pool, connect = opened
        with console.status("reconciling: balances against their lines, top-ups against payouts …"):
            report = await run_now(Reconciler(pool, get_reconciliation_settings()), connect)
        table = Table(title="reconciliation round")
        for column in ("kind", "found"):
            table.add_column(column)
        for kind, n in sorted(report.found.items()):
            table.add_row(kind, str(n))
        console.print(table if report.found else "nothing found")
        console.print(f"new findings: {report.new}; resolved (not found again): {report.resolved}")

    _run(work)


@reconcile_app.command("findings")
def findings_command(
    resolved: Annotated[bool, typer.Option("--resolved", help="The resolved ones (default: open).")] = False,
    kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_PAGE, help="At most this many, newest first.")] = 50,
) -> None:
    """Findings, newest first."""

    async def work(opened: Opened) -> None:
        page = await list_findings(
            opened[0], status="resolved" if resolved else "open", kind=kind, limit=limit
        )
        if not page.findings:
            console.print("no findings")
            return
        table = Table(title=f"{'resolved' if resolved else 'open'} findings")
        for column in ("id", "kind", "subject", "details", "found", "resolved by", "note"):
            table.add_column(column, overflow="fold")
        for f in page.findings:
            table.add_row(
                f.id,
                f.kind,
                f.subject,
                str(f.details),
                f.found_at.isoformat(timespec="seconds"),
                f.resolved_by or "",
                f.resolution_note or "",
            )
        console.print(table)

    _run(work)


@reconcile_app.command("resolve")
def resolve_command(
    finding_id: Annotated[str, typer.Argument(help="The finding's id (the first column of the list).")],
    note: Annotated[str, typer.Option("--note", help="Why it is resolved (what was done).")],
) -> None:
    """Resolve an open finding, as operator:<your login>."""

    async def work(opened: Opened) -> None:
        done = await resolve_finding(opened[0], finding_id, by=f"operator:{operator_login()}", note=note)
        console.print(f"resolved [bold]{done.id}[/bold] ({done.kind} {done.subject}) by {done.resolved_by}")

    _run(work)


@reconcile_app.command("summary")
def summary_command(
    days: Annotated[int, typer.Option(min=1, max=MAX_DAYS, help="The last this many UTC days.")] = 7,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Compute them again from the ledger first.")
    ] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on standard output.")] = False,
) -> None:
    """The daily operations summary: per day, each business and the total."""

    async def work(opened: Opened) -> None:
        last = datetime.now(UTC).date()
        first = last - timedelta(days=days - 1)
        pool = opened[0]
        if refresh:
            async with pool.acquire() as conn:
                with console.status("computing the days from the ledger's lines …"):
                    await refresh_summary(conn, [first + timedelta(days=n) for n in range(days)])
        rows = await read_summary(pool, first, last, account_id=None)
        if as_csv:
            typer.echo(summary_csv(rows), nl=False)
            return
        table = Table(title="daily operations summary")
        for column in (
            "day",
            "currency",
            "account",
            "transactions",
            "in (minor)",
            "out (minor)",
            "fees (minor)",
        ):
            table.add_column(column, overflow="fold")
        for r in rows:
            table.add_row(
                r.day.isoformat(),
                r.currency,
                r.account_id or "total",
                str(r.transactions),
                str(r.volume_in_minor),
                str(r.volume_out_minor),
                str(r.fees_minor),
            )
        console.print(table if rows else "no days computed yet (--refresh computes them)")

    _run(work)
