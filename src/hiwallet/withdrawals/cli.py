"""``hiwallet withdrawals …``: the review of large withdrawals and the stuck saga scan by hand,
as the withdrawal database's application role. What they enqueue wakes the service's relay
by a pg_notify (no relay runs here).

- ``review``: the withdrawals waiting for a member of staff;
- ``release ID`` / ``cancel ID``: the review's decision, recorded as made by
  ``operator:<login>`` (the operating-system user running the command);
- ``show ID``: a withdrawal and its history;
- ``scan``: one stuck saga round, under the same lock as the service's rounds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from hiwallet.core.actors import operator_actor
from hiwallet.core.cli import run_command
from hiwallet.core.http import PROBLEM_REFUSALS
from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.outbox import RelayHint
from hiwallet.core.settings import get_settings
from hiwallet.withdrawals.app import STUCK_SCAN_LOCK_KEY, database_spec
from hiwallet.withdrawals.metrics import WithdrawalMetrics
from hiwallet.withdrawals.service import OUTBOX_CHANNEL, WithdrawalService, view
from hiwallet.withdrawals.settings import WithdrawalSettings, get_withdrawal_settings

__all__ = ["scan_once", "withdrawals_app", "withdrawals_service"]

console = Console(emoji=False, soft_wrap=True)
T = TypeVar("T")


@asynccontextmanager
async def withdrawals_service(settings: WithdrawalSettings) -> AsyncIterator[WithdrawalService]:
    """The service on a small pool of its own; what it commits wakes the service's relay."""
    pool = await database_spec(settings).create_pool(get_settings(), max_size=2)
    hint = RelayHint(pool, OUTBOX_CHANNEL)
    try:
        yield WithdrawalService(pool, settings, WithdrawalMetrics(), on_committed=hint.committed)
    finally:
        await hint.aclose()
        await pool.close()


def _run(work: Callable[[WithdrawalService], Awaitable[T]]) -> T:
    return run_command(
        lambda: withdrawals_service(get_withdrawal_settings()),
        work,
        console=console,
        refusals=PROBLEM_REFUSALS,
    )


async def scan_once(settings: WithdrawalSettings) -> int | None:
    """One stuck saga round; None when another instance holds the round's lock."""
    async with withdrawals_service(settings) as service:
        found: list[int] = []

        async def round_() -> int:
            found.append(await service.scan_stuck())
            return found[-1]

        job = PeriodicJob(
            "withdrawal-stuck-scan",
            settings.stuck_scan_interval_s,
            STUCK_SCAN_LOCK_KEY,
            round_,
            database_spec(settings).dedicated(get_settings()),
        )
        return found[0] if await job.run_once() else None


def _print(saga: dict[str, Any]) -> None:
    console.print(
        f"{saga['id']}  [bold]{saga['state']}[/bold]  {saga['amount_minor']} {saga['currency']}"
        f"  wallet {saga['wallet']}  to {saga['destination_iban']}"
        + (f"  reason {saga['reason']}" if saga["reason"] else "")
    )


withdrawals_app = typer.Typer(no_args_is_help=True, help="Withdrawals: the review and the stuck saga scan.")


@withdrawals_app.command("review")
def review(limit: Annotated[int, typer.Option(min=1, max=1000)] = 100) -> None:
    """The withdrawals waiting for a review (above the review threshold), oldest first."""
    rows = _run(lambda s: s.under_review(limit))
    for row in rows:  # one line each (no table: ids and IBANs are never cut)
        _print(view(row))
    console.print(f"{len(rows)} withdrawal(s) under review")


@withdrawals_app.command("release")
def release(saga_id: str) -> None:
    """Send a reviewed withdrawal to the bank, as operator:<your login>."""
    actor = operator_actor()
    _print(_run(lambda s: s.release(saga_id, actor)))


@withdrawals_app.command("cancel")
def cancel(saga_id: str) -> None:
    """Refuse a reviewed withdrawal: the debit is reversed (fee included), operator:<your
    login> recorded as who decided."""
    actor = operator_actor()
    _print(_run(lambda s: s.cancel(saga_id, actor)))


@withdrawals_app.command("show")
def show(saga_id: str) -> None:
    """A withdrawal and its history."""

    async def work(service: WithdrawalService) -> tuple[Any, list[Any]]:
        return await service.saga(saga_id), await service.history(saga_id)

    saga, history = _run(work)
    if saga is None:
        console.print(f"[red]no withdrawal[/red] {saga_id}")
        raise typer.Exit(1)
    _print(view(saga))
    if saga["reason_detail"]:
        console.print(f"  detail: {saga['reason_detail']}")
    if saga["reviewed_by"]:
        console.print(f"  reviewed by: {saga['reviewed_by']}")
    console.print(f"  republished: {saga['republished']}")
    for step in history:
        console.print(
            f"  {step['at'].isoformat()}  {step['from_state'] or '-'} -> {step['to_state']}"
            f"  by {step['actor']}"
        )


@withdrawals_app.command("scan")
def scan() -> None:
    """One stuck saga round by hand: the commands of sagas waiting too long, published again."""
    done = asyncio.run(scan_once(get_withdrawal_settings()))
    if done is None:
        console.print("[yellow]busy[/yellow]: a stuck saga round is running elsewhere; try again")
        raise typer.Exit(1)
    console.print(f"published [bold]{done}[/bold] command(s) again")
