"""``hiwallet dead-letters list|replay``: the dead-letter queue for an operator. Commands only
translate; the work is in core/deadletters.py. An operator command of the deployment (it knows
its queues), mounted by the command line: not part of the platform."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from hiwallet.contracts.topups import TOPUPS_DEAD_LETTER_QUEUE
from hiwallet.core.broker import Broker, BrokerError
from hiwallet.core.cli import run_command
from hiwallet.core.deadletters import DeadLetter, list_dead_letters, replay_dead_letters
from hiwallet.core.settings import get_settings

__all__ = ["dead_letters_app"]

dead_letters_app = typer.Typer(no_args_is_help=True, help="Show and replay dead-lettered messages.")
console = Console()
T = TypeVar("T")

QueueOption = Annotated[str, typer.Option("--queue", help="The dead-letter queue.")]
LimitOption = Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many.")]


@asynccontextmanager
async def _broker() -> AsyncIterator[Broker]:
    broker = Broker(get_settings().amqp_url.get_secret_value(), client_name="hiwallet-cli dead-letters")
    try:
        await broker.start()
        yield broker
    finally:
        await broker.close()


def _run(work: Callable[[Broker], Awaitable[T]]) -> T:
    return run_command(
        _broker, work, console=console, refusals={BrokerError: lambda exc: f"[red]broker[/red]: {exc}"}
    )


def _table(letters: list[DeadLetter], *, replay: bool = False) -> Table:
    table = Table()
    columns = ["message id", "type", "reason", "origin (exchange / key)", "attempts", "dead at", "bytes"]
    for column in [*columns, "replayed"] if replay else columns:
        table.add_column(column, overflow="fold")
    for d in letters:
        row = [d.message_id, d.type, d.reason, f"{d.original_exchange} / {d.original_routing_key}",
               d.attempts, d.dead_at, str(d.body_bytes)]  # fmt: skip
        table.add_row(*row, *(["yes" if d.replayed else "[red]no: origin unknown[/red]"] if replay else []))
    return table


@dead_letters_app.command("list")
def list_(queue: QueueOption = TOPUPS_DEAD_LETTER_QUEUE, limit: LimitOption = 100) -> None:
    """List dead letters (the first LIMIT); every one stays in the queue."""
    letters = _run(lambda broker: list_dead_letters(broker, queue, limit=limit))
    if not letters:
        console.print(f"no dead letters in [bold]{queue}[/bold]")
        return
    console.print(_table(letters))


@dead_letters_app.command("replay")
def replay(
    queue: QueueOption = TOPUPS_DEAD_LETTER_QUEUE,
    limit: LimitOption = 100,
    message_id: Annotated[str | None, typer.Option("--id", help="Only this message id.")] = None,
) -> None:
    """Publish dead letters again to their original exchange and routing key (confirmed), then
    remove them from the dead-letter queue."""
    letters = _run(lambda broker: replay_dead_letters(broker, queue, limit=limit, message_id=message_id))
    if not letters:
        console.print("nothing replayed" + (f": no dead letter {message_id}" if message_id else ""))
        raise typer.Exit(1 if message_id else 0)
    console.print(_table(letters, replay=True))
