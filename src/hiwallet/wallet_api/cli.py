"""``hiwallet business ...``: an operator opens business accounts and links merchant
integrations to them from a shell (employees do it over HTTP: POST /v1/staff/business-accounts).
The ledger records the operator as actor.
Commands only translate; the work is in :mod:`hiwallet.wallet_api.service`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from hiwallet.contracts.databases import DATABASES
from hiwallet.core import db
from hiwallet.core.actors import operator_actor
from hiwallet.core.cli import run_command
from hiwallet.core.http import PROBLEM_REFUSALS
from hiwallet.core.settings import get_settings
from hiwallet.ledger import Fees, LedgerStore, init_connection
from hiwallet.wallet_api.domain import service_account_subject
from hiwallet.wallet_api.service import WalletService
from hiwallet.wallet_api.settings import WalletApiSettings, get_wallet_api_settings
from hiwallet.wallet_api.staff_money import billing_period, enter_provider_invoice

business_app = typer.Typer(no_args_is_help=True, help="Business accounts (operator commands).")
invoices_app = typer.Typer(no_args_is_help=True, help="Providers' invoices (operator commands).")
console = Console(emoji=False, soft_wrap=True)  # ids hold ":a:", which rich would make an emoji
T = TypeVar("T")


def operator() -> str:
    """The actor of these commands: ``operator:<os login>`` (core.actors)."""
    return operator_actor()


@asynccontextmanager
async def wallet_service(
    database: str | None = None, api_settings: WalletApiSettings | None = None
) -> AsyncIterator[WalletService]:
    settings = get_settings()
    pool = await db.create_pool(
        database or DATABASES["wallet"],
        role=db.app_role("wallet"),  # whatever the database's name (tests use fresh ones)
        settings=settings,
        max_size=2,
        init=init_connection,
    )
    try:
        store = LedgerStore.from_settings(pool)
        yield WalletService(pool, store, Fees.from_settings(), api_settings or get_wallet_api_settings())
    finally:
        await pool.close()


def _run(work: Callable[[WalletService], Awaitable[T]]) -> T:
    return run_command(wallet_service, work, console=console, refusals=PROBLEM_REFUSALS)


def _show(account: dict[str, Any]) -> None:
    console.print(f"account [bold]{account['id']}[/bold] ({account['kind']}) {account['name'] or ''}")
    for wallet in account["wallets"]:
        console.print(f"  wallet {wallet['id']}  number {wallet['number']}  {wallet['currency']}")


@business_app.command("open")
def open_business(name: Annotated[str, typer.Argument(help="The business's name.")]) -> None:
    """Open a business account with a TRY wallet; prints its id and wallet number."""
    _show(_run(lambda s: s.open_business(name, operator=operator())))


@business_app.command("link")
def link(
    account_id: Annotated[str, typer.Argument(help="The business account's id (NNNN:a:...).")],
    client: Annotated[
        str | None, typer.Option(help="A client of the customer realm, e.g. merchant-demo.")
    ] = None,
    subject: Annotated[str | None, typer.Option(help="The identity's sub, instead of --client.")] = None,
) -> None:
    """Make a merchant integration's service account a member of the business account."""
    settings = get_wallet_api_settings()
    if (client is None) == (subject is None):
        raise typer.BadParameter("give exactly one of --client and --subject")
    sub = subject or service_account_subject(settings.customer_realm, str(client))
    _show(_run(lambda s: s.link(account_id, settings.customer_issuer, sub, operator=operator())))
    console.print(f"linked {client or sub}")


@invoices_app.command("enter")
def enter_invoice(
    provider: Annotated[str, typer.Option(help="The provider that invoiced us: stripe, bank …")],
    number: Annotated[str, typer.Option(help="The invoice's number, as the provider wrote it.")],
    amount_minor: Annotated[int, typer.Option(help="The invoice's total, in minor units.")],
    currency: Annotated[str, typer.Option(help="ISO 4217.")] = "TRY",
    period: Annotated[
        str | None, typer.Option(help="The month it bills, YYYY-MM (default: last month).")
    ] = None,
) -> None:
    """Book a provider's invoice paid from our bank account (provider_expense −, nostro +).
    Once per (provider, number): entering it again changes nothing."""
    if period is not None and not re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])", period):
        raise typer.BadParameter("a month: YYYY-MM", param_hint="--period")
    billed = billing_period(period, datetime.now(UTC))
    posted = _run(
        lambda s: enter_provider_invoice(
            s.ledger,
            provider=provider,
            invoice_number=number,
            amount=amount_minor,
            currency=currency.upper(),
            period=billed,
            actor=operator(),
        )
    )
    what = f"{posted['provider']} {posted['invoice_number']}: {posted['amount_minor']} {posted['currency']}"
    console.print(f"invoice {what} in transaction [bold]{posted['transaction_id']}[/bold]")
