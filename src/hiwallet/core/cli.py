"""The one runner of operator commands: open what the command works on (a pool, a service, a
broker connection), do the work in one event loop, close it, and turn a refusal into one line
and exit status 1. A command module only translates its arguments and names its refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import typer
from rich.console import Console

__all__ = ["Refusals", "run_command"]

R = TypeVar("R")
T = TypeVar("T")

# A refusal's type -> the line that says it (the first type the error is an instance of wins).
Refusals = Mapping[type[Exception], Callable[[Exception], str]]


def run_command(
    resource: Callable[[], AbstractAsyncContextManager[R]],
    work: Callable[[R], Awaitable[T]],
    *,
    console: Console,
    refusals: Refusals,
) -> T:
    """``work(r)`` with ``r`` the resource opened for it, closed after whatever happens. A
    refusal named in ``refusals`` (a service's problems: ``core.http.PROBLEM_REFUSALS``) is
    printed and exits 1; anything else is a defect and propagates with its traceback."""
    named = refusals

    async def main() -> T:
        async with resource() as opened:
            return await work(opened)

    try:
        return asyncio.run(main())
    except tuple(named) as exc:
        line = next(describe for kind, describe in named.items() if isinstance(exc, kind))(exc)
        console.print(line)
        raise typer.Exit(1) from exc
