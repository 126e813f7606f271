"""``hiwallet onboarding …``: operator commands, as the onboarding database's application role.

- ``rekey``: every sealed field re-sealed under the active data key (key rotation), in
  batches, with a progress bar."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from hiwallet.core.settings import get_settings
from hiwallet.onboarding.crypto import KeyRing
from hiwallet.onboarding.rekey import count_rows, rekey
from hiwallet.onboarding.settings import get_onboarding_settings
from hiwallet.onboarding.store import database_spec

__all__ = ["onboarding_app"]

console = Console(emoji=False, soft_wrap=True)
onboarding_app = typer.Typer(no_args_is_help=True, help="Onboarding: operator commands.")


@onboarding_app.command("rekey")
def rekey_command(batch: Annotated[int, typer.Option(min=1, max=10_000)] = 500) -> None:
    """Re-seal every encrypted field under the first key of HIWALLET_ONBOARDING_DATA_KEYS."""
    settings = get_onboarding_settings()
    ring = KeyRing.parse(settings.data_keys.get_secret_value())

    async def main() -> tuple[int, int]:
        pool = await database_spec(settings).create_pool(get_settings(), max_size=2)
        try:
            total = await count_rows(pool)
            columns = (
                TextColumn("[bold]rekey[/bold]"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
            )
            with Progress(*columns, console=console) as bar:
                task = bar.add_task("rows", total=total)
                report = await rekey(pool, ring, batch=batch, progress=lambda n: bar.advance(task, n))
            return report.rows, report.resealed
        finally:
            await pool.close()

    rows, resealed = asyncio.run(main())
    console.print(f"{rows} row(s) read, {resealed} field(s) re-sealed under key [bold]{ring.active}[/bold]")
