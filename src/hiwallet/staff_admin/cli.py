"""``hiwallet staff …``: for an operator who has only a shell, as the staff-admin database's
application role (the same guards as the service: the audit log takes rows, never loses them).

- ``employees``: the employees, their roles, active or not;
- ``audit [--actor --action --target --limit]``: the audit log, newest first;
- ``token --email --otp``: an employee's access token, logged in as the staff panel does
  (local development);
- ``bootstrap-invite [--email]``: while nobody holds staff.manage, a new administrator
  invitation (a pending one to the address is revoked first)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from hiwallet.core.actors import operator_actor
from hiwallet.core.cli import run_command
from hiwallet.core.http import PROBLEM_REFUSALS
from hiwallet.core.settings import get_settings
from hiwallet.staff_admin.app import database_spec
from hiwallet.staff_admin.identity import StaffRealm
from hiwallet.staff_admin.login import LoginFailed, StaffClient, staff_token
from hiwallet.staff_admin.service import StaffAdmin
from hiwallet.staff_admin.settings import StaffAdminSettings, get_staff_admin_settings

__all__ = ["operator", "staff_app", "staff_service"]

console = Console(emoji=False, soft_wrap=True)
staff_app = typer.Typer(
    no_args_is_help=True, help="Staff: employees, the audit log, the bootstrap invitation."
)
T = TypeVar("T")


def operator() -> str:
    """The actor of these commands: ``operator:<os login>`` (core.actors)."""
    return operator_actor()


@asynccontextmanager
async def staff_service(settings: StaffAdminSettings) -> AsyncIterator[StaffAdmin]:
    pool = await database_spec(settings).create_pool(get_settings(), max_size=2)
    realm = StaffRealm(settings)
    try:
        yield StaffAdmin(pool, settings, realm)
    finally:
        await realm.aclose()
        await pool.close()


def _run(work: Callable[[StaffAdmin], Awaitable[T]]) -> T:
    return run_command(
        lambda: staff_service(get_staff_admin_settings()), work, console=console, refusals=PROBLEM_REFUSALS
    )


@staff_app.command("employees")
def employees(
    inactive: Annotated[bool, typer.Option("--inactive/--active", help="Only deactivated ones.")] = False,
    everyone: Annotated[bool, typer.Option("--all", help="Active and deactivated.")] = False,
) -> None:
    """The employees (oldest first) with their roles."""

    async def work(service: StaffAdmin) -> None:
        roles = {r["id"]: r["name"] for r in await service.roles()}
        cursor: str | None = None
        while True:
            page, cursor = await service.employees(cursor, 200, None if everyone else not inactive)
            for e in page:
                names = ", ".join(roles.get(r, r) for r in e["role_ids"]) or "-"
                state = "active" if e["active"] else "deactivated"
                console.print(f"{e['subject']}  {e['email'] or '-'}  {state}  roles: {names}")
            if cursor is None:
                return

    _run(work)


@staff_app.command("audit")
def audit(
    actor: Annotated[str | None, typer.Option(help="e.g. staff:<sub> or operator:<login>")] = None,
    action: Annotated[str | None, typer.Option(help="e.g. role.changed, employee.deactivated")] = None,
    target: Annotated[str | None, typer.Option(help="e.g. employee:<sub>, role:<id>")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
) -> None:
    """The audit log, newest first, one JSON line per entry."""

    async def work(service: StaffAdmin) -> None:
        cursor: str | None = None
        left = limit
        while left > 0:
            page, cursor = await service.audit(
                actor=actor, action=action, target=target, cursor=cursor, limit=min(left, 200)
            )
            for entry in page:
                console.print(json.dumps(entry, sort_keys=True), markup=False, highlight=False)
            left -= len(page)
            if cursor is None:
                return

    _run(work)


@staff_app.command("token")
def token(
    email: Annotated[str, typer.Option(help="The employee's e-mail (their username).")],
    password: Annotated[str, typer.Option(prompt=True, hide_input=True, help="Prompted when omitted.")],
    otp: Annotated[str, typer.Option(help="The current code, e.g. $(oathtool --totp -b SECRET).")],
) -> None:
    """Log in as an employee the way the staff panel does (local development) and print the
    access token: the staff realm has no direct grants."""
    settings = get_staff_admin_settings()
    client = StaffClient(settings.staff_issuer, redirect_uri=settings.invitation_redirect_uri)
    try:
        typer.echo(staff_token(client, email, password, otp))
    except LoginFailed as exc:
        console.print(f"[red]refused[/red]: {exc}")
        raise typer.Exit(1) from exc


@staff_app.command("bootstrap-invite")
def bootstrap_invite(
    email: Annotated[str | None, typer.Option(help="Default: HIWALLET_STAFF_ADMIN_BOOTSTRAP_EMAIL.")] = None,
) -> None:
    """Send the administrator invitation again (only while nobody holds staff.manage)."""
    invitation = _run(lambda service: service.bootstrap_again(operator(), email))
    console.print(
        f"invitation {invitation['id']} sent to {invitation['email']}, valid until {invitation['expires_at']}"
    )
