"""At start: the administrator role exists; if nobody holds staff.manage, the first
administrator invitation goes to the configured address, once (however many processes start,
however often); the operator's `hiwallet staff bootstrap-invite` sends another only while nobody
holds staff.manage; and the bootstrap administrator's first login gives them every permission."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from hiwallet.cli import app as cli
from hiwallet.staff_admin import errors
from hiwallet.staff_admin.login import StaffClient, current_code, first_login, next_code
from hiwallet.staff_admin.service import PERMISSIONS
from hiwallet.staff_admin.settings import get_staff_admin_settings
from tests.identity.conftest import PASSWORD, IdentityServer
from tests.staff_admin.conftest import Catcher, Employee, StaffAdminServer, service_of, start_staff_admin
from tests.waiting import until_sync

ADMIN = "boss@hiwallet.dev"


def invitations(server: StaffAdminServer) -> list[str]:
    return [r["id"] for r in server.sql("SELECT id FROM staff.invitations WHERE bootstrap ORDER BY seq")]


def until_invited(server: StaffAdminServer) -> list[str]:
    return until_sync(lambda: invitations(server), 20, "a bootstrap invitation")


def test_the_first_administrator_is_invited_once_and_gets_everything(
    staff_idp: IdentityServer, staff_admin_db: str, catcher: Catcher
) -> None:
    # Two processes start at once on one database: one role, one invitation, one mail.
    first = start_staff_admin(staff_idp, staff_admin_db, bootstrap=True, bootstrap_email=ADMIN)
    second = start_staff_admin(staff_idp, staff_admin_db, bootstrap=True, bootstrap_email=ADMIN)
    try:
        [invitation] = until_invited(first)
        roles = first.sql("SELECT name, permissions, builtin FROM staff.roles")
        assert [(r["name"], sorted(r["permissions"]), r["builtin"]) for r in roles] == [
            ("administrator", sorted(PERMISSIONS), True)
        ]
        second.stop()
        # A restart before the invitation is completed does not send another.
        third = start_staff_admin(staff_idp, staff_admin_db, bootstrap=True, bootstrap_email=ADMIN)
        third.stop()
        assert invitations(first) == [invitation]
        assert len(catcher.messages_to(ADMIN)) == 1

        secret = first.accept(catcher.link_for(ADMIN))
        token, _ = first.login(ADMIN, secret)
        [subject] = [r["subject"] for r in first.sql("SELECT subject FROM staff.invitations")]
        boss = Employee(subject, ADMIN, token, secret)
        me = first.get("/v1/me", boss).json()
        assert me["permissions"] == sorted(PERMISSIONS)
        assert [r["name"] for r in me["roles"]] == ["administrator"]
        actions = [(r["actor"], r["action"]) for r in first.audit_rows()]
        assert actions == [
            ("system:staff-admin", "role.created"),
            ("system:staff-admin", "invitation.created"),
            (f"staff:{subject}", "invitation.completed"),
        ]
    finally:
        first.stop()
        second.stop()


async def test_the_operator_sends_it_again_only_while_nobody_manages(
    staff_admin: StaffAdminServer, catcher: Catcher
) -> None:
    service, close = await service_of(staff_admin)
    try:
        sent = await service.bootstrap_again("operator:root", ADMIN)
        again = await service.bootstrap_again("operator:root", ADMIN)
        assert sent["id"] != again["id"]
        states = {r["id"]: r["state"] for r in staff_admin.sql("SELECT id, state FROM staff.invitations")}
        assert states == {sent["id"]: "revoked", again["id"]: "pending"}
        staff_admin.admin()
        with pytest.raises(errors.BootstrapNotNeeded):
            await service.bootstrap_again("operator:root", ADMIN)
    finally:
        await close()
    assert len(catcher.messages_to(ADMIN)) == 2


def test_the_operator_commands(staff_admin: StaffAdminServer, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = staff_admin.admin("root")
    viewer = staff_admin.employee("viewer", "customer.view")
    assert staff_admin.call("POST", f"/v1/employees/{viewer.subject}/deactivate", admin).status_code == 200
    monkeypatch.setenv("HIWALLET_STAFF_ADMIN_DATABASE", staff_admin.database)
    monkeypatch.setenv("HIWALLET_STAFF_ADMIN_STAFF_ISSUER_BASE", staff_admin.idp.base_url)
    get_staff_admin_settings.cache_clear()
    try:
        runner = CliRunner()
        listed = runner.invoke(cli, ["staff", "employees", "--all"])
        assert listed.exit_code == 0, listed.output
        assert admin.subject in listed.output and "deactivated" in listed.output
        audit = runner.invoke(cli, ["staff", "audit", "--action", "employee.deactivated"])
        assert audit.exit_code == 0 and viewer.subject in audit.output
        refused = runner.invoke(cli, ["staff", "bootstrap-invite", "--email", ADMIN])
        assert refused.exit_code == 1 and "staff.manage" in refused.output

        # The panel's login from a shell: password, then the authenticator's code.
        email = "shell@hiwallet.dev"
        staff_admin.idp.create_user(email, email=email)
        client = StaffClient(f"{staff_admin.idp.base_url}/realms/hiwallet-staff")
        _, secret = first_login(client, email, PASSWORD)
        login = ["staff", "token", "--email", email, "--password", PASSWORD]
        wrong = runner.invoke(
            cli, [*login, "--otp", "000000" if current_code(secret) != "000000" else "111111"]
        )
        assert wrong.exit_code == 1 and "Invalid authenticator code" in wrong.output
        printed = runner.invoke(cli, [*login, "--otp", next_code(secret)])
        assert printed.exit_code == 0, printed.output
        token = printed.output.strip().splitlines()[-1]  # after the in-process servers' log lines
        me = httpx.get(f"{staff_admin.base_url}/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 403  # a good staff token; no employee behind it
    finally:
        get_staff_admin_settings.cache_clear()
