"""``hiwallet broker to-quorum``: bring a running broker's queues to the deployment's topology
(a classic queue of a deployment made before the queues were quorum, one declared by hand),
moving their messages without losing one. Commands only translate; the work is in
core/queue_move.py. An operator command of the deployment (it knows its queues, from the
registry): not part of the platform. docs/operations.md says when and how to run it."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hiwallet.contracts.deployables import deployment_topology
from hiwallet.core.broker import BrokerError
from hiwallet.core.queue_move import QueueReport, move_to_declared
from hiwallet.core.settings import get_settings

__all__ = ["broker_app"]

broker_app = typer.Typer(no_args_is_help=True, help="The broker's topology (operator commands).")
console = Console()


def _table(reports: list[QueueReport]) -> Table:
    table = Table()
    for column in ("queue", "outcome", "messages moved", "what differed"):
        table.add_column(column, overflow="fold")
    for r in reports:
        table.add_row(r.queue, r.outcome, str(r.moved), r.reason)
    return table


@broker_app.command("to-quorum")
def to_quorum(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what it would do.")] = False,
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Messages moved per confirmed batch.")] = 200,
    timeout_s: Annotated[float, typer.Option(min=1.0, max=300.0, help="Per broker call.")] = 10.0,
) -> None:
    """Declare the deployment's topology, moving every queue declared otherwise (classic) to
    its declaration (quorum) with all its messages, in order. Stop the processes that consume
    or publish first; idempotent: after a crash, run it again and it finishes the job."""
    topology = deployment_topology()
    url = get_settings().amqp_url.get_secret_value()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=dry_run,
    ) as progress:  # fmt: skip
        moved_task = progress.add_task("messages moved", total=None)
        done: dict[str, int] = {}

        def on_progress(queue: str, moved: int) -> None:
            done[queue] = moved
            progress.update(moved_task, completed=sum(done.values()), description=f"moving {queue}")

        try:
            reports = asyncio.run(
                move_to_declared(
                    url, topology, batch=batch, dry_run=dry_run, timeout_s=timeout_s, on_progress=on_progress
                )
            )
        except BrokerError as exc:
            console.print(f"[red]broker[/red]: {exc}")
            console.print("nothing is lost: fix it and run the command again, it finishes the job")
            raise typer.Exit(1) from exc
    console.print(_table(reports))
    moved = sum(r.moved for r in reports)
    if dry_run:
        console.print(f"dry run: {sum(r.outcome == 'would move' for r in reports)} queues to move")
    else:
        console.print(f"every queue as declared; {moved} messages moved")
