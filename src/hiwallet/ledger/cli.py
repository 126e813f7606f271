"""``hiwallet ledger ...``: try the ledger from the command line."""

from __future__ import annotations

import typer

ledger_app = typer.Typer(no_args_is_help=True, help="Post to and read the ledger.")
