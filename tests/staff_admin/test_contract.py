"""staff-admin's served OpenAPI document is exact (tests/contract.py: Schemathesis, every check,
positive, negative and coverage cases), with an administrator's token (every permission) on
every case. Half the positive cases are pointed at a real role and another employee, so
generation reaches the use cases, not only "not found"."""

from __future__ import annotations

from typing import Any

from tests import contract
from tests.staff_admin.conftest import StaffAdminServer


def test_the_service_matches_its_document(staff_admin: StaffAdminServer) -> None:
    admin = staff_admin.admin()
    other = staff_admin.employee("other", "customer.view")
    role_id = staff_admin.role("a-role", "customer.view")

    def steer(case: Any) -> None:
        if contract.digest(case)[0] % 2 or case.method == "DELETE":  # the role stays for the rest
            return
        real = {"role_id": role_id, "subject": other.subject}
        for name in list(case.path_parameters or {}):
            if name in real:
                case.path_parameters[name] = real[name]
        if isinstance(case.body, dict) and "role_ids" in case.body:
            case.body["role_ids"] = [role_id]

    seen = contract.check_document(staff_admin.base_url, token=lambda: admin.token, steer=steer)
    for reached in (
        "GET /v1/me 200",
        "GET /v1/roles/{role_id} 200",
        "PATCH /v1/roles/{role_id} 200",
        "POST /v1/roles 201",
        "GET /v1/employees/{subject} 200",
        "PUT /v1/employees/{subject}/roles 200",
        "POST /v1/invitations 201",
        "GET /v1/audit 200",
    ):
        assert seen[reached], (reached, seen)
