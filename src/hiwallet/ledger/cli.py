"""``hiwallet ledger ...``: try the ledger from the command line. Commands only translate."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from hiwallet.contracts.databases import DATABASES
from hiwallet.core import db
from hiwallet.core.actors import operator_actor
from hiwallet.core.cli import run_command
from hiwallet.core.ids import new_id
from hiwallet.core.settings import get_settings
from hiwallet.ledger.errors import LedgerError
from hiwallet.ledger.model import PostResult
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

ledger_app = typer.Typer(no_args_is_help=True, help="Post to and read the ledger.")
console = Console()


def _table(*columns: str) -> Table:
    """A table whose cells fold rather than cut: ids must be readable to be copied."""
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


T = TypeVar("T")


@asynccontextmanager
async def _ledger(role: str | None = None) -> AsyncIterator[Ledger]:
    """The ledger as the wallet database's application role (it posts as wallet-api does), or
    as ``role``."""
    settings = get_settings()
    pool = await db.create_pool(
        DATABASES["wallet"],
        role=role or db.app_role("wallet"),
        settings=settings,
        max_size=2,
        init=init_connection,
    )
    try:
        store = LedgerStore.from_settings(pool)
        yield Ledger(store, Fees.from_settings())
    finally:
        await pool.close()


def _refused(exc: Exception) -> str:
    """A ledger refusal with what the operator needs to correct the command (its fields)."""
    if not isinstance(exc, LedgerError):
        return f"[red]refused[/red]: {type(exc).__name__}"
    fields = "".join(f"\n  {name}: {value}" for name, value in exc.fields.items())
    return f"[red]refused[/red] ({exc.code}): {exc}{fields}"


def _run(work: Callable[[Ledger], Awaitable[T]], role: str | None = None) -> T:
    return run_command(lambda: _ledger(role), work, console=console, refusals={LedgerError: _refused})


def _show(result: PostResult) -> None:
    note = " [yellow](replayed: posted before, nothing moved now)[/yellow]" if result.replayed else ""
    console.print(f"transaction [bold]{result.id}[/bold]{note}")
    table = _table("account", "version", "amount", "balance after")
    for line in result.lines:
        table.add_row(line.account, str(line.version), f"{line.amount:+d}", str(line.balance_after))
    console.print(table)


@ledger_app.command("open")
def open_wallet(
    owner: Annotated[str, typer.Argument(help="Who owns the wallet (any id).")],
    currency: str = "TRY",
    bucket: Annotated[int | None, typer.Option(help="1..1023; random when omitted.")] = None,
) -> None:
    """Open a wallet (a cash and a promo account) and print its id."""
    wallet = _run(lambda ledger: ledger.open_wallet(owner, currency, bucket=bucket))
    console.print(wallet.wallet_id)


@ledger_app.command()
def topup(
    wallet: str,
    amount: Annotated[int, typer.Argument(help="Minor units (kuruş).")],
    provider: str = "stripe",
    currency: str = "TRY",
    key: Annotated[str | None, typer.Option(help="Idempotency key; new when omitted.")] = None,
) -> None:
    """Credit a wallet as a provider's top-up would (wallet +, clearing −)."""
    _show(
        _run(
            lambda ledger: ledger.topup(
                key or new_id(),
                wallet,
                amount,
                currency,
                provider=provider,
                actor=operator_actor(),
                ref=f"cli-topup:{provider}",
            )
        )
    )


@ledger_app.command()
def transfer(
    sender: str,
    receiver: str,
    amount: Annotated[int, typer.Argument(help="Minor units (kuruş).")],
    currency: str = "TRY",
    key: Annotated[str | None, typer.Option(help="Idempotency key; new when omitted.")] = None,
) -> None:
    """Move money from one wallet to another (p2p)."""
    _show(
        _run(
            lambda ledger: ledger.transfer(
                key or new_id(),
                sender,
                receiver,
                amount,
                currency,
                actor=operator_actor(),
                ref="cli-transfer",
            )
        )
    )


@ledger_app.command()
def balance(wallet: str) -> None:
    """A wallet's cash, promo, held and available money."""
    b = _run(lambda ledger: ledger.store.wallet_balance(wallet))
    table = _table("wallet", "currency", "cash", "promo", "held", "available")
    table.add_row(b.wallet_id, b.currency, str(b.cash), str(b.promo), str(b.held), str(b.available))
    console.print(table)


@ledger_app.command()
def statement(
    account: Annotated[str, typer.Argument(help="An account id, e.g. <wallet>:cash.")],
    cursor: str | None = None,
    limit: int = 50,
) -> None:
    """An account's lines in version order (pass --cursor to read the next page)."""
    page = _run(lambda ledger: ledger.store.statement(account, cursor=cursor, limit=limit))
    table = _table("version", "posted at", "type", "ref", "amount", "balance after", "transaction")
    for line in page.lines:
        table.add_row(
            str(line.version),
            line.posted_at.isoformat(timespec="seconds"),
            line.type,
            line.ref,
            f"{line.amount:+d}",
            str(line.balance_after),
            line.transaction_id,
        )
    console.print(table)
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}")


@ledger_app.command("balance-at")
def balance_at(
    account: str, at: Annotated[datetime, typer.Argument(help="ISO time, UTC if no zone.")]
) -> None:
    """An account's balance as of a past moment."""
    console.print(str(_run(lambda ledger: ledger.store.balance_as_of(account, at))))


@ledger_app.command()
def verify() -> None:
    """Recompute every balance, transaction sum and hash chain; exit 1 naming each difference."""

    async def work(ledger: Ledger) -> bool:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("verifying buckets", total=None)

            def step(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            report = await ledger.store.verify(progress=step)
        console.print(
            f"checked {report.buckets} buckets with movements: {report.accounts} accounts, "
            f"{report.transactions} transactions, {report.lines} lines"
        )
        for problem in report.problems:
            console.print(f"[red]✗[/red] {problem}")
        if report.ok:
            console.print("[green]ledger verified: every balance, sum and hash chain holds[/green]")
        return report.ok

    # Read only: verify needs nothing more (docs/ledger.md, "Who may write").
    if not _run(work, role=db.readonly_role("wallet")):
        sys.exit(1)
