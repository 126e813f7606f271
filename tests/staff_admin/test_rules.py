"""No self-escalation in each of its forms; the last staff.manage holder protected (also when
two administrators take it from each other at once); staff.manage needed everywhere but
GET /v1/me; and an audit row for every change, in the same transaction (a refused change leaves
no row)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from hiwallet.core.http import problem_type
from hiwallet.staff_admin import errors
from tests.staff_admin.conftest import StaffAdminServer, service_of

SELF = problem_type("self-escalation")


def own_role(server: StaffAdminServer, subject: str) -> str:
    [row] = server.sql("SELECT role_id FROM staff.employee_roles WHERE subject = $1", subject)
    return str(row["role_id"])


def test_no_self_escalation_in_any_form(staff_admin: StaffAdminServer) -> None:
    admin = staff_admin.admin()
    other = staff_admin.role("goodwill", "credit.goodwill")
    mine = own_role(staff_admin, admin.subject)
    refusals = [
        staff_admin.call("PUT", f"/v1/employees/{admin.subject}/roles", admin, {"role_ids": [mine, other]}),
        staff_admin.call("PATCH", f"/v1/roles/{mine}", admin, {"permissions": ["staff.manage"]}),
        staff_admin.call("PATCH", f"/v1/roles/{mine}", admin, {"name": "renamed"}),
        staff_admin.call("DELETE", f"/v1/roles/{mine}", admin),
        staff_admin.call("POST", f"/v1/employees/{admin.subject}/deactivate", admin),
    ]
    for answer in refusals:
        assert answer.status_code == 403, answer.text
        assert answer.json()["type"] == SELF
    assert own_role(staff_admin, admin.subject) == mine
    assert staff_admin.audit_rows() == []


def test_everything_but_me_needs_staff_manage(staff_admin: StaffAdminServer) -> None:
    viewer = staff_admin.employee("viewer", "customer.view", "withdrawal.review")
    for method, path in [
        ("GET", "/v1/roles"),
        ("POST", "/v1/roles"),
        ("GET", "/v1/employees"),
        ("GET", "/v1/invitations"),
        ("POST", "/v1/invitations"),
        ("GET", "/v1/audit"),
        ("GET", "/v1/permissions"),
    ]:
        answer = staff_admin.call(method, path, viewer, {})
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json() | {"detail": None} == answer.json() | {
            "type": problem_type("permission-missing"),
            "permission": "staff.manage",
            "detail": None,
        }


def test_roles_crud_with_an_audit_row_each(staff_admin: StaffAdminServer) -> None:
    admin = staff_admin.admin()
    created = staff_admin.call(
        "POST", "/v1/roles", admin, {"name": "Campaigns", "permissions": ["campaigns.view"]}
    )
    assert created.status_code == 201, created.text
    role = created.json()
    assert role["permissions"] == ["campaigns.view"] and role["holders"] == 0
    taken = staff_admin.call("POST", "/v1/roles", admin, {"name": "campaigns", "permissions": []})
    assert taken.status_code == 409 and taken.json()["type"] == problem_type("role-name-taken")
    bad = staff_admin.call("POST", "/v1/roles", admin, {"name": "x", "permissions": ["root"]})
    assert bad.status_code == 422 and bad.json()["type"] == problem_type("unknown-permission")
    changed = staff_admin.call(
        "PATCH", f"/v1/roles/{role['id']}", admin, {"permissions": ["campaigns.manage", "campaigns.view"]}
    )
    assert changed.status_code == 200 and changed.json()["permissions"] == [
        "campaigns.manage",
        "campaigns.view",
    ]
    holder = staff_admin.employee("holder", "customer.view")
    roles = {"role_ids": [role["id"]]}
    assert staff_admin.call("PUT", f"/v1/employees/{holder.subject}/roles", admin, roles).status_code == 200
    in_use = staff_admin.call("DELETE", f"/v1/roles/{role['id']}", admin)
    assert in_use.status_code == 409 and in_use.json()["type"] == problem_type("role-in-use")
    assert (
        staff_admin.call("PUT", f"/v1/employees/{holder.subject}/roles", admin, {"role_ids": []}).status_code
        == 200
    )
    assert staff_admin.call("DELETE", f"/v1/roles/{role['id']}", admin).status_code == 204
    assert staff_admin.call("GET", f"/v1/roles/{role['id']}", admin).status_code == 404
    actor = f"staff:{admin.subject}"
    assert [(r["actor"], r["action"], r["target"]) for r in staff_admin.audit_rows()] == [
        (actor, "role.created", f"role:{role['id']}"),
        (actor, "role.changed", f"role:{role['id']}"),
        (actor, "employee.roles_changed", f"employee:{holder.subject}"),
        (actor, "employee.roles_changed", f"employee:{holder.subject}"),
        (actor, "role.deleted", f"role:{role['id']}"),
    ]


async def test_the_last_staff_manage_holder_cannot_lose_it(staff_admin: StaffAdminServer) -> None:
    admin = staff_admin.admin()
    mine = own_role(staff_admin, admin.subject)
    # Not reachable over HTTP (the only holder is the actor, who cannot change themselves):
    # the service refuses it from a shell too, and the refusal leaves no audit row.
    service, close = await service_of(staff_admin)
    try:
        for attempt in (
            service.set_active("operator:root", admin.subject, False),
            service.update_role("operator:root", mine, None, ["customer.view"]),
            service.set_roles("operator:root", admin.subject, []),
        ):
            with pytest.raises(errors.LastStaffManager):
                await attempt
    finally:
        await close()
    assert staff_admin.audit_rows() == []
    assert staff_admin.get("/v1/me", admin).json()["permissions"][-2:] == [
        "staff.manage",
        "withdrawal.review",
    ]


def test_two_administrators_deactivating_each_other_at_once_leave_one(staff_admin: StaffAdminServer) -> None:
    for round_ in range(3):
        a = staff_admin.admin(f"a{round_}")
        b = staff_admin.admin(f"b{round_}")
        # Only these two hold staff.manage this round.
        staff_admin.sql(
            "UPDATE staff.employees SET active = false WHERE subject <> ALL ($1::text[])",
            [a.subject, b.subject],
        )
        with ThreadPoolExecutor(max_workers=2) as pool:
            answers = list(
                pool.map(
                    lambda pair: staff_admin.call(
                        "POST", f"/v1/employees/{pair[1].subject}/deactivate", pair[0]
                    ),
                    [(a, b), (b, a)],
                )
            )
        statuses = sorted(r.status_code for r in answers)
        assert statuses in ([200, 403], [200, 409]), [r.text for r in answers]
        active = staff_admin.sql("SELECT count(*) FROM staff.employees WHERE active")[0][0]
        assert active == 1
