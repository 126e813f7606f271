"""``hiwallet topups unattributed`` and ``hiwallet topups attribute``: the top-ups wallet-consumer
could not attribute, and an operator's attribution of one. Commands only translate; the work is
in :mod:`hiwallet.wallet_consumer.attribution`. And ``hiwallet ledger expire-promos`` /
``sweep``: a round of wallet-consumer's ledger jobs now (:mod:`hiwallet.wallet_consumer.jobs`),
under the job's lock, printing what it did.

Other packages add their own ``topups`` commands (topup-webhook: ``reconcile``): the commands
here are added to any Typer by :func:`register` (``hiwallet.cli`` mounts one ``topups``
sub-app holding them all).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, NoReturn, TypeVar

import asyncpg
import typer
from rich.console import Console
from rich.table import Table

from hiwallet.contracts.databases import DATABASES, service_role
from hiwallet.core import db
from hiwallet.core.actors import operator_actor, operator_login
from hiwallet.core.cli import Refusals, run_command
from hiwallet.core.settings import get_settings
from hiwallet.ledger import Fees, Ledger, LedgerError, LedgerStore, init_connection
from hiwallet.wallet_consumer.attribution import AlreadyAttributed, AttributionRefused, attribute
from hiwallet.wallet_consumer.jobs import LedgerJobs
from hiwallet.wallet_consumer.settings import get_wallet_consumer_settings
from hiwallet.wallet_consumer.topups import UnattributedTopup, list_unattributed

console = Console(emoji=False, soft_wrap=True)  # wallet ids hold ":w:"; no emoji
T = TypeVar("T")


@asynccontextmanager
async def _ledger() -> AsyncIterator[tuple[asyncpg.Pool, Ledger]]:
    """The wallet database as wallet-consumer's role, as wallet-consumer connects."""
    settings = get_settings()
    database = get_wallet_consumer_settings().database or DATABASES["wallet"]
    pool = await db.create_pool(
        database,
        role=service_role("wallet", "wallet_consumer"),
        settings=settings,
        max_size=2,
        init=init_connection,
    )
    try:
        # one posting at a time, in the command's own transaction: no coalescing
        yield pool, Ledger(LedgerStore(pool, coalesce_writers=0), Fees.from_settings())
    finally:
        await pool.close()


def _coded(exc: Exception) -> str:
    return f"({getattr(exc, 'code', type(exc).__name__)}): {exc}"


# In this order: AlreadyAttributed may be an AttributionRefused.
REFUSALS: Refusals = {
    AlreadyAttributed: lambda exc: f"[yellow]already attributed[/yellow]: {exc}",
    AttributionRefused: lambda exc: f"[red]refused[/red] {_coded(exc)}",
    LedgerError: lambda exc: f"[red]refused by the ledger[/red] {_coded(exc)}",
}


def _run(work: Callable[[asyncpg.Pool, Ledger], Awaitable[T]]) -> T:
    return run_command(_ledger, lambda opened: work(*opened), console=console, refusals=REFUSALS)


def _table(topups: list[UnattributedTopup], *, attributed: bool) -> Table:
    table = Table(title="unattributed top-ups")
    columns = ["payment", "provider", "at provider", "amount (minor)", "currency", "reason", "reference"]
    columns += ["received"] + (["attributed to", "by", "at"] if attributed else [])
    for column in columns:
        table.add_column(column, overflow="fold")  # ids must be readable to be copied
    for t in topups:
        row = [
            t.payment_id,
            t.provider,
            t.provider_payment_id,
            str(t.amount_minor),
            t.currency,
            t.reason,
            t.reference or "",
            t.created_at.isoformat(timespec="seconds"),
        ]
        if attributed:
            row += [
                t.attributed_wallet or "",
                t.attributed_by or "",
                t.attributed_at.isoformat(timespec="seconds") if t.attributed_at else "",
            ]
        table.add_row(*row)
    return table


def unattributed(
    include_attributed: Annotated[
        bool, typer.Option("--all", help="The attributed ones too (newest first).")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many rows.")] = 100,
) -> None:
    """The top-ups that could not be credited to a wallet (oldest first), and why."""
    topups = _run(lambda pool, _: list_unattributed(pool, include_attributed=include_attributed, limit=limit))
    if not topups:
        console.print("no unattributed top-ups")
        return
    console.print(_table(topups, attributed=include_attributed))


def attribute_command(
    payment_id: Annotated[str, typer.Argument(help="The payment's id (the first column of the list).")],
    wallet: Annotated[str, typer.Option("--wallet", help="The wallet to credit.")],
) -> None:
    """Credit an unattributed top-up to a wallet, once, and mark it attributed by
    operator:<your login> (the operating-system user running the command)."""
    done = _run(lambda _, ledger: attribute(ledger, payment_id, wallet, operator=operator_login()))
    console.print(
        f"attributed [bold]{done.topup.payment_id}[/bold]: {done.topup.amount_minor} "
        f"{done.topup.currency} credited to {done.wallet} (transaction {done.transaction_id})"
    )


def _jobs_run(work: Callable[[LedgerJobs, Callable[[], Awaitable[asyncpg.Connection]]], Awaitable[T]]) -> T:
    """``work`` on the ledger's jobs as wallet-consumer runs them: its role, its settings, its
    lock (a dedicated connection, as the scheduled job's)."""
    settings = get_wallet_consumer_settings()
    database = settings.database or DATABASES["wallet"]
    connect = db.dedicated_connection(database, service_role("wallet", "wallet_consumer"))
    return _run(lambda _, ledger: work(LedgerJobs(ledger, settings, actor=operator_actor()), connect))


def _busy(job: str) -> NoReturn:
    console.print(f"[yellow]another instance is running a {job} round now[/yellow]: nothing done; try again")
    raise typer.Exit(2)


def expire_promos_command() -> None:
    """Run a promo expiry round now (as wallet-consumer's job does, under its lock): return each
    expired batch's remainder to the business that funded it, or to promo_breakage; print
    what went where."""
    report = _jobs_run(lambda jobs, connect: jobs.expire_promos_now(connect))
    if report is None:
        _busy("promo expiry")
    if not report.expired:
        console.print("no promo batch to expire")
        return
    table = Table(title="expired promo batches")
    for column in ["batch", "currency", "returned to", "account", "amount (minor)", "transaction"]:
        table.add_column(column, overflow="fold")
    for e in report.expired:
        table.add_row(e.batch_id, e.currency, e.to, e.account, str(e.amount_minor), e.transaction_id)
    console.print(table)
    currencies = sorted({e.currency for e in report.expired})
    for currency in currencies:
        console.print(
            f"{currency}: {report.returned_minor(currency, 'business')} to businesses, "
            f"{report.returned_minor(currency, 'breakage')} to promo_breakage (minor units)"
        )
    console.print(f"expired {len(report.expired)} batches")


def sweep_command() -> None:
    """Run a sweep round now (under the job's lock): move each per-bucket sub-account of
    clearing, revenue, promo_expense and promo_breakage into its central account."""
    report = _jobs_run(lambda jobs, connect: jobs.sweep_now(connect))
    if report is None:
        _busy("sweep")
    if not report.swept:
        console.print("nothing to sweep")
        return
    table = Table(title="swept into the central accounts")
    for column in ["role", "currency", "sub-accounts", "amount (minor, signed)"]:
        table.add_column(column)
    totals: dict[tuple[str, str], tuple[int, int]] = {}
    for s in report.swept:
        count, amount = totals.get((s.role, s.currency), (0, 0))
        totals[(s.role, s.currency)] = (count + 1, amount + s.amount_minor)
    for (role, currency), (count, amount) in sorted(totals.items()):
        table.add_row(role, currency, str(count), str(amount))
    console.print(table)
    console.print(f"swept {len(report.swept)} sub-accounts")


def register(app: typer.Typer) -> None:
    """Add wallet-consumer's ``topups`` commands to ``app``."""
    app.command("unattributed")(unattributed)
    app.command("attribute")(attribute_command)


def register_ledger_jobs(app: typer.Typer) -> None:
    """Add wallet-consumer's ledger job commands (``expire-promos``, ``sweep``) to ``app``
    (``hiwallet ledger``)."""
    app.command("expire-promos")(expire_promos_command)
    app.command("sweep")(sweep_command)
