"""staff-admin's error tree: every refusal it answers is a :class:`ProblemError` here, so the
HTTP answer of each is decided in this one file. The 403s of GET /v1/me and of a missing
permission are contracts.staff's, the same types every service answers."""

from __future__ import annotations

from hiwallet.contracts import problems
from hiwallet.contracts.staff import PermissionMissing as PermissionMissing
from hiwallet.contracts.staff import StaffNotAllowed as StaffNotAllowed
from hiwallet.core import http
from hiwallet.core.http import ProblemError


class NotFound(http.NotFound):
    pass


class RoleNotFound(NotFound):
    slug = "role-not-found"
    title = "No such role"


class EmployeeNotFound(NotFound):
    slug = "employee-not-found"
    title = "No such employee"


class InvitationNotFound(NotFound):
    slug = "invitation-not-found"
    title = "No such invitation"


class UnknownPermission(ProblemError):
    status = 422
    slug = "unknown-permission"
    title = "A permission is not one of the fixed permissions"


class RoleNameTaken(ProblemError):
    status = 409
    slug = "role-name-taken"
    title = "A role with this name exists"


class RoleInUse(ProblemError):
    status = 409
    slug = "role-in-use"
    title = "The role is held by employees; take it from them first"


class SelfEscalation(http.Forbidden):
    """An employee changing their own roles, a role they hold, or deactivating themselves."""

    slug = "self-escalation"
    title = "An employee cannot change their own authority"


class LastStaffManager(ProblemError):
    status = 409
    slug = "last-staff-manager"
    title = "The change would leave nobody holding staff.manage"


class AlreadyEmployee(ProblemError):
    status = 409
    slug = "already-employee"
    title = "This address belongs to an employee already"


class InvitationPending(ProblemError):
    status = 409
    slug = "invitation-pending"
    title = "An invitation to this address is pending; revoke it first"


class InvitationNotPending(ProblemError):
    status = 409
    slug = "invitation-not-pending"
    title = "The invitation is completed or revoked"


InvalidCursor = problems.InvalidCursor


class IdentityUnavailable(problems.IdentityUnavailable):
    """The staff realm's admin API could not be asked (or refused staff-admin's account)."""


class Unavailable(http.ServiceUnavailable):
    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"Retry-After": "1"})


class UnknownRole(ProblemError):
    status = 422
    slug = "unknown-role"
    title = "A role named in the request does not exist"


class InvalidEmail(ProblemError):
    status = 422
    slug = "invalid-email"
    title = "The e-mail address is not valid"


class BootstrapNotNeeded(ProblemError):
    status = 409
    slug = "bootstrap-not-needed"
    title = "An employee holds staff.manage already; they invite administrators"
