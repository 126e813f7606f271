"""staff-admin's HTTP routes: they only translate between HTTP and :class:`StaffAdmin`.

Only staff-realm tokens are accepted (the app trusts no other issuer; the staff realm's service
accounts are refused, 403 ``caller-not-allowed``). ``GET /v1/me`` answers any employee about
themselves; every other endpoint needs ``staff.manage``, read from the database on each request.

- ``GET /v1/me``: who the caller is and their permissions now (a lean, hot route: it is asked
  on every staff request of every service);
- ``GET /v1/permissions``: the fixed list;
- ``GET|POST /v1/roles``, ``GET|PATCH|DELETE /v1/roles/{id}``;
- ``GET /v1/employees?active=&cursor=&limit=``, ``GET /v1/employees/{sub}``,
  ``PUT /v1/employees/{sub}/roles``, ``POST /v1/employees/{sub}/deactivate|reactivate``;
- ``GET|POST /v1/invitations``, ``GET /v1/invitations/{id}``, ``POST /v1/invitations/{id}/revoke``;
- ``GET /v1/audit?actor=&action=&target=&since=&until=&cursor=&limit=``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from hiwallet.contracts.staff import ME_PATH, StaffPermission, staff_actor
from hiwallet.core.auth import CallerNotAllowed, Principal, TokenVerifier, bearer_token
from hiwallet.core.http import MALFORMED_BODY_ANSWER, PROBLEM_CONTENT_TYPE, FastJSONResponse, LeanRoute
from hiwallet.core.text import EMAIL_PATTERN, PRINTABLE_TEXT_PATTERN, PrintableText, Rfc3339DateTime
from hiwallet.staff_admin import errors
from hiwallet.staff_admin.service import PERMISSIONS, StaffAdmin
from hiwallet.staff_admin.settings import StaffAdminSettings

_PROBLEM: dict[str, Any] = {"content": {PROBLEM_CONTENT_TYPE: {}}}
_COMMON: dict[int | str, dict[str, Any]] = {
    401: {**_PROBLEM, "description": "No valid staff-realm access token"},
    403: {**_PROBLEM, "description": "Not an active employee, no staff.manage, or a self-escalation"},
    404: {**_PROBLEM, "description": "Not found"},
    409: {**_PROBLEM, "description": "The change conflicts (last staff.manage holder, pending, in use)"},
    422: {**_PROBLEM, "description": "Invalid input"},
    503: {**_PROBLEM, "description": "The database or the staff identity provider is not reachable; retry"},
}
Name = Annotated[PrintableText, Field(min_length=1, max_length=100)]
# A role's, an employee's (the identity subject) or an invitation's id: printable, bounded (a NUL
# is no text PostgreSQL holds); one of that form that names nothing is the 404 of its kind.
Id = Annotated[str, Path(min_length=1, max_length=100, pattern=PRINTABLE_TEXT_PATTERN)]
RoleIds = Annotated[list[Annotated[PrintableText, Field(max_length=100)]], Field(max_length=64)]


async def _principal(request: Request) -> Principal:
    verifier: TokenVerifier = request.app.state.verifier
    principal = await verifier.verify(bearer_token(request))
    # The verifier trusts the staff issuer alone; its service accounts are clients, not people.
    if principal.kind != "staff" or principal.is_service_account:
        raise CallerNotAllowed(f"a {principal.caller} may not call staff-admin")
    return principal


def _service(request: Request) -> StaffAdmin:
    service: StaffAdmin = request.app.state.service
    return service


async def manager(request: Request) -> str:
    """The acting employee's actor name, if they hold staff.manage now."""
    principal = await _principal(request)
    me = await _service(request).me(principal.subject)
    if StaffPermission.STAFF_MANAGE.value not in me["permissions"]:
        raise errors.PermissionMissing(
            "this needs the permission staff.manage", permission=StaffPermission.STAFF_MANAGE.value
        )
    return staff_actor(principal.subject)


Manager = Annotated[str, Depends(manager)]

lean_router = APIRouter(responses=_COMMON, route_class=LeanRoute)
router = APIRouter(prefix="/v1", responses=_COMMON)


class MeOut(BaseModel):
    subject: str
    email: str | None
    name: str | None
    active: bool
    roles: list[dict[str, str]]
    permissions: list[str]


@lean_router.get(ME_PATH, response_model=MeOut, tags=["me"])
async def me(request: Request) -> Response:
    """Who the caller is and their permissions now (403 if unknown or deactivated)."""
    principal = await _principal(request)
    return FastJSONResponse(await _service(request).me(principal.subject))


@router.get("/permissions", tags=["roles"])
async def permissions(_: Manager) -> dict[str, list[str]]:
    return {"permissions": sorted(PERMISSIONS)}


class RoleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    permissions: Annotated[list[StrictStr], Field(max_length=64)]


class RoleChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name | None = None
    permissions: Annotated[list[StrictStr] | None, Field(max_length=64)] = None


@router.get("/roles", tags=["roles"])
async def roles(request: Request, _: Manager) -> dict[str, Any]:
    return {"roles": await _service(request).roles()}


@router.post("/roles", status_code=201, tags=["roles"], responses=MALFORMED_BODY_ANSWER)
async def create_role(request: Request, body: RoleIn, actor: Manager) -> dict[str, Any]:
    return await _service(request).create_role(actor, body.name, body.permissions)


@router.get("/roles/{role_id}", tags=["roles"])
async def role(request: Request, role_id: Id, _: Manager) -> dict[str, Any]:
    return await _service(request).role(role_id)


@router.patch("/roles/{role_id}", tags=["roles"], responses=MALFORMED_BODY_ANSWER)
async def change_role(request: Request, role_id: Id, body: RoleChange, actor: Manager) -> dict[str, Any]:
    return await _service(request).update_role(actor, role_id, body.name, body.permissions)


@router.delete("/roles/{role_id}", status_code=204, tags=["roles"])
async def delete_role(request: Request, role_id: Id, actor: Manager) -> Response:
    await _service(request).delete_role(actor, role_id)
    return Response(status_code=204)


def _limit(request: Request, limit: int | None) -> int:
    settings: StaffAdminSettings = request.app.state.settings
    return min(limit or settings.page_size, settings.max_page_size)


Limit = Annotated[int | None, Query(ge=1, le=1_000)]
Cursor = Annotated[str | None, Query(max_length=20)]


@router.get("/employees", tags=["employees"])
async def employees(
    request: Request, _: Manager, active: bool | None = None, cursor: Cursor = None, limit: Limit = None
) -> dict[str, Any]:
    page, next_cursor = await _service(request).employees(cursor, _limit(request, limit), active)
    return {"employees": page, "next_cursor": next_cursor}


@router.get("/employees/{subject}", tags=["employees"])
async def employee(request: Request, subject: Id, _: Manager) -> dict[str, Any]:
    return await _service(request).employee(subject)


class RolesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role_ids: RoleIds


@router.put("/employees/{subject}/roles", tags=["employees"], responses=MALFORMED_BODY_ANSWER)
async def set_roles(request: Request, subject: Id, body: RolesIn, actor: Manager) -> dict[str, Any]:
    return await _service(request).set_roles(actor, subject, body.role_ids)


@router.post("/employees/{subject}/deactivate", tags=["employees"])
async def deactivate(request: Request, subject: Id, actor: Manager) -> dict[str, Any]:
    return await _service(request).set_active(actor, subject, False)


@router.post("/employees/{subject}/reactivate", tags=["employees"])
async def reactivate(request: Request, subject: Id, actor: Manager) -> dict[str, Any]:
    return await _service(request).set_active(actor, subject, True)


class InvitationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # at most 254: RFC 5321, and the identity service refuses a longer one
    email: Annotated[StrictStr, Field(min_length=3, max_length=254, pattern=EMAIL_PATTERN)]
    name: Name | None = None
    role_ids: RoleIds


@router.get("/invitations", tags=["invitations"])
async def invitations(
    request: Request,
    _: Manager,
    state: Annotated[str | None, Query(pattern="^(pending|completed|revoked)$")] = None,
    cursor: Cursor = None,
    limit: Limit = None,
) -> dict[str, Any]:
    page, next_cursor = await _service(request).invitations(cursor, _limit(request, limit), state)
    return {"invitations": page, "next_cursor": next_cursor}


@router.post("/invitations", status_code=201, tags=["invitations"], responses=MALFORMED_BODY_ANSWER)
async def invite(request: Request, body: InvitationIn, actor: Manager) -> dict[str, Any]:
    invitation = await _service(request).invite(actor, body.email, body.name, body.role_ids)
    if invitation is None:  # only a bootstrap invitation may be skipped
        raise RuntimeError("an administrator's invitation was skipped")
    return invitation


@router.get("/invitations/{invitation_id}", tags=["invitations"])
async def invitation(request: Request, invitation_id: Id, _: Manager) -> dict[str, Any]:
    return await _service(request).invitation(invitation_id)


@router.post("/invitations/{invitation_id}/revoke", tags=["invitations"])
async def revoke(request: Request, invitation_id: Id, actor: Manager) -> dict[str, Any]:
    return await _service(request).revoke(actor, invitation_id)


@router.get("/audit", tags=["audit"])
async def audit(
    request: Request,
    _: Manager,
    actor: Annotated[str | None, Query(max_length=300, pattern=PRINTABLE_TEXT_PATTERN)] = None,
    action: Annotated[str | None, Query(max_length=100, pattern=PRINTABLE_TEXT_PATTERN)] = None,
    target: Annotated[str | None, Query(max_length=300, pattern=PRINTABLE_TEXT_PATTERN)] = None,
    since: Rfc3339DateTime | None = None,
    until: Rfc3339DateTime | None = None,
    cursor: Cursor = None,
    limit: Limit = None,
) -> dict[str, Any]:
    page, next_cursor = await _service(request).audit(
        actor=actor,
        action=action,
        target=target,
        since=since,
        until=until,
        cursor=cursor,
        limit=_limit(request, limit),
    )
    return {"entries": page, "next_cursor": next_cursor}
