"""GET /v1/me: who the employee is and their permissions NOW, read on every call; only staff
tokens; unknown, deactivated, or a service account: refused."""

from __future__ import annotations

import httpx

from hiwallet.core.http import problem_type
from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer, ServerFactory
from tests.staff_admin.conftest import StaffAdminServer


def test_me_names_the_employee_roles_and_sorted_permissions(staff_admin: StaffAdminServer) -> None:
    selin = staff_admin.employee("selin", "withdrawal.review", "customer.view")
    answer = staff_admin.get("/v1/me", selin)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    [role] = body.pop("roles")
    assert role["name"].startswith("role-of-selin")
    assert body == {
        "subject": selin.subject,
        "email": selin.email,
        "name": "selin",
        "active": True,
        "permissions": ["customer.view", "withdrawal.review"],
    }


def test_a_change_holds_from_the_very_next_request_with_the_same_token(staff_admin: StaffAdminServer) -> None:
    admin = staff_admin.admin()
    okan = staff_admin.employee("okan", "customer.view")
    assert staff_admin.get("/v1/me", okan).json()["permissions"] == ["customer.view"]
    reviewers = {"name": "reviewers", "permissions": ["withdrawal.review"]}
    role = staff_admin.call("POST", "/v1/roles", admin, reviewers)
    assert role.status_code == 201, role.text
    roles = {"role_ids": [role.json()["id"]]}
    changed = staff_admin.call("PUT", f"/v1/employees/{okan.subject}/roles", admin, roles)
    assert changed.status_code == 200, changed.text
    assert staff_admin.get("/v1/me", okan).json()["permissions"] == ["withdrawal.review"]

    assert staff_admin.call("POST", f"/v1/employees/{okan.subject}/deactivate", admin).status_code == 200
    refused = staff_admin.get("/v1/me", okan)
    assert refused.status_code == 403
    assert refused.json()["type"] == problem_type("staff-not-allowed")
    assert staff_admin.call("POST", f"/v1/employees/{okan.subject}/reactivate", admin).status_code == 200
    assert staff_admin.get("/v1/me", okan).status_code == 200


def test_a_staff_realm_user_who_is_no_employee_has_no_permission(staff_admin: StaffAdminServer) -> None:
    # Made in the realm directly (the console's way), never invited: nothing.
    stranger = staff_admin.user("console-made")
    refused = staff_admin.get("/v1/me", stranger)
    assert refused.status_code == 403
    assert refused.json()["type"] == problem_type("staff-not-allowed")
    assert staff_admin.get("/v1/roles", stranger).status_code == 403


def test_only_staff_people_tokens(staff_admin: StaffAdminServer, identity_factory: ServerFactory) -> None:
    assert staff_admin.get("/v1/me").json()["type"] == problem_type("token-missing")
    # A customer's token: not an issuer staff-admin knows.
    customers: IdentityServer = identity_factory("hiwallet")
    customers.create_user("ayse")
    token = httpx.post(
        customers.token_url,
        data={
            "grant_type": "password",
            "client_id": "personal-mobile-api",
            "username": "ayse",
            "password": PASSWORD,
        },
    ).json()["access_token"]
    answer = httpx.get(f"{staff_admin.base_url}/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 401
    assert answer.json()["type"] == problem_type("untrusted-issuer")
    # The staff realm's own service account is a client, not an employee.
    service = httpx.post(
        staff_admin.idp.token_url,
        auth=("staff-admin", SECRETS["staff-admin"]),
        data={"grant_type": "client_credentials"},
    ).json()["access_token"]
    answer = httpx.get(f"{staff_admin.base_url}/v1/me", headers={"Authorization": f"Bearer {service}"})
    assert answer.status_code == 403
    assert answer.json()["type"] == problem_type("caller-not-allowed")
