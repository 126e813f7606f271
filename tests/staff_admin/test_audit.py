"""The audit log: readable through the API with filters and a cursor; append-only in the
database (the application role may INSERT and SELECT it, nothing else; the trigger refuses an
UPDATE or DELETE even to the owner); and the staff-admin database's grants, exactly."""

from __future__ import annotations

import asyncpg
import pytest

from hiwallet.core import db
from hiwallet.core.http import problem_type
from tests import pgtemplate
from tests.core.test_roles import privileges
from tests.staff_admin.conftest import StaffAdminServer

APP = db.app_role("staff_admin")
READONLY = db.readonly_role("staff_admin")


def test_audit_filters_and_cursor(staff_admin: StaffAdminServer) -> None:
    admin = staff_admin.admin()
    for n in range(5):
        body = {"name": f"role {n}", "permissions": ["customer.view"]}
        assert staff_admin.call("POST", "/v1/roles", admin, body).status_code == 201
    target = staff_admin.employee("target", "customer.view")
    assert staff_admin.call("POST", f"/v1/employees/{target.subject}/deactivate", admin).status_code == 200

    seen: list[dict[str, object]] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = staff_admin.get("/v1/audit", admin, **params).json()
        seen += page["entries"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 6
    assert [e["id"] for e in seen] == sorted((e["id"] for e in seen), reverse=True)  # newest first
    assert seen[0]["action"] == "employee.deactivated"

    by_target = staff_admin.get("/v1/audit", admin, target=f"employee:{target.subject}").json()["entries"]
    assert [e["action"] for e in by_target] == ["employee.deactivated"]
    by_action = staff_admin.get("/v1/audit", admin, action="role.created").json()["entries"]
    assert len(by_action) == 5 and all(e["actor"] == f"staff:{admin.subject}" for e in by_action)
    assert staff_admin.get("/v1/audit", admin, actor="staff:nobody").json()["entries"] == []
    bad = staff_admin.get("/v1/audit", admin, cursor="x1")
    assert bad.status_code == 422 and bad.json()["type"] == problem_type("invalid-cursor")


async def test_the_audit_log_is_append_only(staff_admin_db: str) -> None:
    async with pgtemplate.owner_connection(staff_admin_db) as owner:
        await owner.execute(
            "INSERT INTO staff.audit_log (actor, action, target) VALUES ('staff:x', 'role.created', 'role:r')"
        )
        # The owner too: the trigger refuses.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await owner.execute("UPDATE staff.audit_log SET actor = 'staff:y'")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await owner.execute("DELETE FROM staff.audit_log")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await owner.execute("TRUNCATE staff.audit_log")
    app = await asyncpg.connect(db.service_dsn(staff_admin_db, APP))
    try:
        await app.execute("INSERT INTO staff.audit_log (actor, action, target) VALUES ('staff:x', 'a', 't')")
        assert await app.fetchval("SELECT count(*) FROM staff.audit_log") == 2
        for statement in (
            "UPDATE staff.audit_log SET actor = 'staff:y'",
            "DELETE FROM staff.audit_log",
            "TRUNCATE staff.audit_log",
            "ALTER TABLE staff.audit_log DISABLE TRIGGER audit_log_append_only",
            "DROP TRIGGER audit_log_append_only ON staff.audit_log",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await app.execute(statement)
    finally:
        await app.close()


STAFF_TABLES = {
    "staff.roles",
    "staff.employees",
    "staff.employee_roles",
    "staff.invitations",
    "staff.bootstrap",
    "staff.audit_log",
}


async def test_the_roles_may_do_exactly_what_grants_sql_says(staff_admin_db: str) -> None:
    async with pgtemplate.owner_connection(staff_admin_db) as owner:
        app = await privileges(owner, APP)
        readonly = await privileges(owner, READONLY)
    reads = {(t, "SELECT") for t in STAFF_TABLES}
    assert app["tables"] == reads | {
        ("staff.roles", "INSERT"),
        ("staff.roles", "DELETE"),
        ("staff.employees", "INSERT"),
        ("staff.employee_roles", "INSERT"),
        ("staff.employee_roles", "DELETE"),
        ("staff.invitations", "INSERT"),
        ("staff.bootstrap", "INSERT"),
        ("staff.audit_log", "INSERT"),
    }
    assert app["columns"] == {
        *(("staff.roles", c, "UPDATE") for c in ("name", "permissions", "updated_at")),
        *(("staff.employees", c, "UPDATE") for c in ("active", "changed_at", "email", "name")),
        *(("staff.invitations", c, "UPDATE") for c in ("state", "completed_at", "revoked_at", "revoked_by")),
        *(("staff.bootstrap", c, "UPDATE") for c in ("invitation_id", "sent_at")),
    }
    assert app["functions"] == set()
    assert app["schemas"] == {("staff", "USAGE"), ("public", "USAGE")}  # PUBLIC's, as in every database
    assert readonly["tables"] == reads | {("public.schema_migrations", "SELECT")}
    assert readonly["columns"] == set()
    for role in (app, readonly):
        assert role["create_in_database"] is False
        assert role["special_attributes"] is False
        assert role["member_of"] == []
