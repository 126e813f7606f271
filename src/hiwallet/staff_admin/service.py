"""staff-admin's work: who an employee is now (GET /v1/me), roles, employees, invitations, the
audit log, and the bootstrap at start. Routes and commands only translate to and from this.

Every change runs in ONE transaction with its audit row (:meth:`StaffAdmin._change`): a change
that fails leaves no row, and a row never stands without its change. Changes that could take
staff.manage away from someone take one transaction advisory lock first and check, before
committing, that an active employee still holds it (the last holder is protected).

Actors: ``staff:<sub>`` for an employee (the API), ``operator:<login>`` for a shell,
``system:staff-admin`` for what the service does by itself (the bootstrap, the first login
completing an invitation is the employee's own: ``staff:<sub>``).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg
import structlog

from hiwallet.contracts.staff import StaffPermission, staff_actor
from hiwallet.core import db, uow
from hiwallet.core.ids import new_id
from hiwallet.core.uow import in_transaction, unit_of_work
from hiwallet.staff_admin import errors
from hiwallet.staff_admin.identity import StaffRealm, UserExists
from hiwallet.staff_admin.settings import StaffAdminSettings
from hiwallet.staff_admin.sql import Q

log = structlog.get_logger(__name__)

ADMINISTRATOR = "administrator"
SYSTEM_ACTOR = "system:staff-admin"
# Transaction advisory locks in hiwallet_staff_admin (per database).
STAFF_LOCK_KEY = 0x6873_616D  # "hsam": changes that could take staff.manage away
BOOTSTRAP_LOCK_KEY = 0x6873_6162  # "hsab": the administrator role and the first invitation
PERMISSIONS = frozenset(p.value for p in StaffPermission)
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,255}\.[^@\s]+$")


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def check_permissions(names: Iterable[str]) -> list[str]:
    """The names sorted and deduplicated; a name not in the fixed list is refused."""
    wanted = sorted(set(names))
    unknown = [n for n in wanted if n not in PERMISSIONS]
    if unknown:
        raise errors.UnknownPermission(
            f"not a permission: {', '.join(unknown)}", unknown=unknown, permissions=sorted(PERMISSIONS)
        )
    return wanted


def check_email(email: str) -> str:
    email = email.strip().lower()
    if not _EMAIL.match(email):
        raise errors.InvalidEmail("the e-mail address is not valid")
    return email


def role_view(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "permissions": list(row["permissions"]),
        "builtin": row["builtin"],
        "holders": row["holders"],
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
    }


def employee_view(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "subject": row["subject"],
        "email": row["email"],
        "name": row["name"],
        "active": row["active"],
        "role_ids": list(row["role_ids"]),
        "created_at": _iso(row["created_at"]),
        "changed_at": _iso(row["changed_at"]),
    }


def invitation_view(row: asyncpg.Record) -> dict[str, Any]:
    state = "expired" if row["expired"] else row["state"]
    return {
        "id": row["id"],
        "email": row["email"],
        "name": row["name"],
        "subject": row["subject"],
        "role_ids": list(row["role_ids"]),
        "invited_by": row["invited_by"],
        "state": state,
        "created_at": _iso(row["created_at"]),
        "expires_at": _iso(row["expires_at"]),
        "completed_at": _iso(row["completed_at"]),
        "revoked_at": _iso(row["revoked_at"]),
        "revoked_by": row["revoked_by"],
    }


def audit_view(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "id": row["id"],
        "at": _iso(row["at"]),
        "actor": row["actor"],
        "action": row["action"],
        "target": row["target"],
        "detail": json.loads(row["detail"]),
    }


def me_view(row: asyncpg.Record) -> dict[str, Any]:
    """The GET /v1/me answer (the contract every service's StaffDirectory reads)."""
    return {
        "subject": row["subject"],
        "email": row["email"],
        "name": row["name"],
        "active": True,
        "roles": [{"id": i, "name": n} for i, n in zip(row["role_ids"], row["role_names"], strict=True)],
        # Only the fixed permissions: a name the code no longer has grants nothing.
        "permissions": [p for p in row["permissions"] if p in PERMISSIONS],
    }


def parse_cursor(cursor: str | None) -> int | None:
    if cursor is None or cursor == "":
        return None
    if not cursor.isdigit() or len(cursor) > 18:
        raise errors.InvalidCursor("the cursor is not one this service gave")
    return int(cursor)


def _actor_subject(actor: str) -> str | None:
    return actor.removeprefix("staff:") if actor.startswith("staff:") else None


class StaffAdmin:
    def __init__(self, pool: asyncpg.Pool, settings: StaffAdminSettings, realm: StaffRealm) -> None:
        self.pool = pool
        self.settings = settings
        self.realm = realm

    # -- the hot path --------------------------------------------------------------------------

    async def me(self, subject: str) -> dict[str, Any]:
        """The employee ``subject`` now: one query by primary key. A staff-realm subject with no
        employee row completes its pending invitation here (the first login); unknown,
        deactivated, or an invitation expired or revoked: 403 ``staff-not-allowed``."""
        try:
            row = await self.pool.fetchrow(Q["me"], subject)
            if row is None:
                row = await self._complete_invitation(subject)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, uow.Unavailable) as exc:
            if db.is_transient(exc):
                raise errors.Unavailable("the staff database is not reachable; retry") from exc
            raise
        if not row["active"]:
            raise errors.StaffNotAllowed("the employee is deactivated")
        return me_view(row)

    async def _complete_invitation(self, subject: str) -> asyncpg.Record:
        actor = staff_actor(subject)

        async def work(conn: asyncpg.Connection) -> tuple[asyncpg.Record, str | None]:
            invitation = await conn.fetchrow(Q["pending_invitation_of_subject"], subject)
            if invitation is None:
                # Another first request may have completed it while this one looked.
                row = await conn.fetchrow(Q["me"], subject)
                if row is None:
                    raise errors.StaffNotAllowed("no employee and no pending invitation for this user")
                return row, None
            if invitation["expired"]:
                raise errors.StaffNotAllowed("the invitation expired")
            await conn.execute(
                Q["insert_employee"], subject, invitation["email"], invitation["name"], invitation["id"]
            )
            await conn.execute(Q["grant_roles"], subject, list(invitation["role_ids"]))
            await conn.execute(Q["complete_invitation"], invitation["id"])
            await self._audit(
                conn,
                actor,
                "invitation.completed",
                f"invitation:{invitation['id']}",
                {"employee": subject, "role_ids": list(invitation["role_ids"])},
            )
            row = await conn.fetchrow(Q["me"], subject)
            if row is None:  # inserted just above, in this transaction
                raise AssertionError("the employee just inserted is not found")
            return row, str(invitation["id"])

        row, completed = await in_transaction(self.pool, work)
        if completed is not None:
            log.info("invitation completed", invitation_id=completed)
        return row

    # -- changes -------------------------------------------------------------------------------

    @asynccontextmanager
    async def _change(self, *, guard: bool = True) -> AsyncIterator[asyncpg.Connection]:
        """A transaction for one change and its audit row. ``guard``: under the staff lock, and
        refused at the end if nobody active would hold staff.manage any more."""
        async with unit_of_work(self.pool) as conn:
            if guard:
                await conn.execute(Q["lock_staff"], STAFF_LOCK_KEY)
            yield conn
            if guard and await conn.fetchval(Q["staff_managers"]) == 0:
                raise errors.LastStaffManager("the change would leave nobody holding staff.manage")

    async def _audit(
        self, conn: asyncpg.Connection, actor: str, action: str, target: str, detail: dict[str, Any]
    ) -> None:
        await conn.fetchval(Q["audit_insert"], actor, action, target, json.dumps(detail, sort_keys=True))

    # -- roles ---------------------------------------------------------------------------------

    async def roles(self) -> list[dict[str, Any]]:
        return [role_view(r) for r in await self.pool.fetch(Q["roles"])]

    async def role(self, role_id: str) -> dict[str, Any]:
        row = await self.pool.fetchrow(Q["role"], role_id)
        if row is None:
            raise errors.RoleNotFound(f"no role {role_id}")
        return role_view(row)

    async def create_role(self, actor: str, name: str, permissions: Sequence[str]) -> dict[str, Any]:
        wanted = check_permissions(permissions)
        role_id = new_id()
        # A new role is held by nobody: it cannot change who holds staff.manage.
        async with self._change(guard=False) as conn:
            if await conn.fetchval(Q["role_by_name"], name) is not None:
                raise errors.RoleNameTaken(f"a role named {name!r} exists")
            try:
                await conn.execute(Q["insert_role"], role_id, name, wanted, False)
            except asyncpg.UniqueViolationError as exc:
                raise errors.RoleNameTaken(f"a role named {name!r} exists") from exc
            await self._audit(
                conn, actor, "role.created", f"role:{role_id}", {"name": name, "permissions": wanted}
            )
        return await self.role(role_id)

    async def update_role(
        self, actor: str, role_id: str, name: str | None, permissions: Sequence[str] | None
    ) -> dict[str, Any]:
        wanted = check_permissions(permissions) if permissions is not None else None
        async with self._change() as conn:
            row = await conn.fetchrow(Q["role"], role_id)
            if row is None:
                raise errors.RoleNotFound(f"no role {role_id}")
            subject = _actor_subject(actor)
            if subject is not None and await conn.fetchval(Q["holds_role"], subject, role_id):
                raise errors.SelfEscalation("an employee cannot change a role they hold")
            new_name = name if name is not None else row["name"]
            new_permissions = wanted if wanted is not None else list(row["permissions"])
            if new_name.lower() != row["name"].lower() and await conn.fetchval(Q["role_by_name"], new_name):
                raise errors.RoleNameTaken(f"a role named {new_name!r} exists")
            await conn.execute(Q["update_role"], role_id, new_name, new_permissions)
            await self._audit(
                conn,
                actor,
                "role.changed",
                f"role:{role_id}",
                {
                    "before": {"name": row["name"], "permissions": list(row["permissions"])},
                    "after": {"name": new_name, "permissions": new_permissions},
                },
            )
        return await self.role(role_id)

    async def delete_role(self, actor: str, role_id: str) -> None:
        async with self._change() as conn:
            row = await conn.fetchrow(Q["role"], role_id)
            if row is None:
                raise errors.RoleNotFound(f"no role {role_id}")
            subject = _actor_subject(actor)
            if subject is not None and await conn.fetchval(Q["holds_role"], subject, role_id):
                raise errors.SelfEscalation("an employee cannot change a role they hold")
            if row["holders"]:
                raise errors.RoleInUse(f"{row['holders']} employee(s) hold the role", holders=row["holders"])
            await conn.execute(Q["delete_role"], role_id)
            await self._audit(
                conn,
                actor,
                "role.deleted",
                f"role:{role_id}",
                {"name": row["name"], "permissions": list(row["permissions"])},
            )

    # -- employees -----------------------------------------------------------------------------

    async def employees(
        self, cursor: str | None, limit: int, active: bool | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        rows = await self.pool.fetch(Q["employees_page"], parse_cursor(cursor), limit, active)
        next_cursor = str(rows[-1]["seq"]) if len(rows) == limit else None
        return [employee_view(r) for r in rows], next_cursor

    async def employee(self, subject: str) -> dict[str, Any]:
        row = await self.pool.fetchrow(Q["employee"], subject)
        if row is None:
            raise errors.EmployeeNotFound(f"no employee {subject}")
        return employee_view(row)

    async def set_roles(self, actor: str, subject: str, role_ids: Sequence[str]) -> dict[str, Any]:
        wanted = sorted(set(role_ids))
        if _actor_subject(actor) == subject:
            raise errors.SelfEscalation("an employee cannot change their own roles")
        async with self._change() as conn:
            row = await conn.fetchrow(Q["employee"], subject)
            if row is None:
                raise errors.EmployeeNotFound(f"no employee {subject}")
            if await conn.fetchval(Q["roles_exist"], wanted) != len(wanted):
                raise errors.UnknownRole("a role named does not exist")
            await conn.execute(Q["revoke_other_roles"], subject, wanted)
            await conn.execute(Q["grant_roles"], subject, wanted)
            await self._audit(
                conn,
                actor,
                "employee.roles_changed",
                f"employee:{subject}",
                {"before": list(row["role_ids"]), "after": wanted},
            )
        return await self.employee(subject)

    async def set_active(self, actor: str, subject: str, active: bool) -> dict[str, Any]:
        if not active and _actor_subject(actor) == subject:
            raise errors.SelfEscalation("an employee cannot deactivate themselves")
        async with self._change() as conn:
            row = await conn.fetchrow(Q["employee"], subject)
            if row is None:
                raise errors.EmployeeNotFound(f"no employee {subject}")
            if row["active"] != active:
                await conn.execute(Q["set_active"], subject, active)
                action = "employee.reactivated" if active else "employee.deactivated"
                await self._audit(conn, actor, action, f"employee:{subject}", {})
        return await self.employee(subject)

    # -- invitations ---------------------------------------------------------------------------

    async def invitations(
        self, cursor: str | None, limit: int, state: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        rows = await self.pool.fetch(Q["invitations_page"], parse_cursor(cursor), limit, state)
        next_cursor = str(rows[-1]["seq"]) if len(rows) == limit else None
        return [invitation_view(r) for r in rows], next_cursor

    async def invitation(self, invitation_id: str) -> dict[str, Any]:
        row = await self.pool.fetchrow(Q["invitation"], invitation_id)
        if row is None:
            raise errors.InvitationNotFound(f"no invitation {invitation_id}")
        return invitation_view(row)

    async def invite(
        self,
        actor: str,
        email: str,
        name: str | None,
        role_ids: Sequence[str],
        *,
        bootstrap: bool = False,
        once: bool = True,
    ) -> dict[str, Any] | None:
        """Invite ``email`` with ``role_ids``: the staff-realm user (made, or the one an earlier
        expired or revoked invitation made), the invitation and its audit row, and the identity
        service's e-mail, sent INSIDE the transaction: if the mail cannot be sent nothing is
        written; if the commit fails after the mail went, the link leads to a user with no
        invitation, who has no permission (fail closed).

        ``bootstrap``: an administrator invitation while nobody holds staff.manage, under the
        bootstrap lock; with ``once``, None when one was ever sent (another process at start)."""
        email = check_email(email)
        wanted = sorted(set(role_ids))
        if await self.pool.fetchval(Q["roles_exist"], wanted) != len(wanted):
            raise errors.UnknownRole("a role named does not exist")
        if await self.pool.fetchval(Q["employee_by_email"], email) is not None:
            raise errors.AlreadyEmployee("this address belongs to an employee; change their roles instead")
        try:
            subject: str | None = await self.realm.create_user(email, name)
        except UserExists:
            subject = None
        if subject is None:
            user = await self.realm.find_by_email(email)
            if user is None:
                raise errors.IdentityUnavailable(
                    "the staff realm has this address and cannot find it"
                ) from None
            subject = str(user["id"])
            if await self.pool.fetchval(Q["employee"], subject) is not None:
                raise errors.AlreadyEmployee(
                    "this address belongs to an employee; change their roles instead"
                )
            await self.realm.prepare_again(subject)
        ttl = self.settings.invitation_ttl_s
        invitation_id = new_id()
        async with self._change(guard=False) as conn:
            if bootstrap:
                await conn.execute(Q["lock_staff"], BOOTSTRAP_LOCK_KEY)
                if await conn.fetchval(Q["staff_managers"]):
                    if once:
                        return None
                    raise errors.BootstrapNotNeeded(
                        "an employee holds staff.manage; they invite administrators"
                    )
                if once and await conn.fetchrow(Q["bootstrap"]):
                    return None
            pending = await conn.fetchrow(Q["pending_invitation_of_email"], email)
            if pending is not None:
                if not pending["expired"]:
                    raise errors.InvitationPending("an invitation to this address is pending")
                # An expired invitation gives way to the new one (single use: one way in).
                await conn.execute(Q["revoke_invitation"], pending["id"], SYSTEM_ACTOR)
                await self._audit(conn, SYSTEM_ACTOR, "invitation.expired", f"invitation:{pending['id']}", {})
            try:
                row = await conn.fetchrow(
                    Q["insert_invitation"],
                    invitation_id,
                    email,
                    name,
                    subject,
                    wanted,
                    actor,
                    float(ttl),
                    bootstrap,
                )
            except asyncpg.UniqueViolationError as exc:
                raise errors.InvitationPending("an invitation to this address is pending") from exc
            if row is None:  # the insert answers its row or raises
                raise RuntimeError("the invitation's insert answered no row")
            if bootstrap:
                await conn.execute(Q["bootstrap_sent"], invitation_id)
            await self._audit(
                conn,
                actor,
                "invitation.created",
                f"invitation:{invitation_id}",
                {"email": email, "subject": subject, "role_ids": wanted, "bootstrap": bootstrap},
            )
            await self.realm.send_invitation(subject, ttl)
        log.info("invitation sent", invitation_id=invitation_id, bootstrap=bootstrap)
        return await self.invitation(invitation_id)

    async def revoke(self, actor: str, invitation_id: str) -> dict[str, Any]:
        async with self._change(guard=False) as conn:
            row = await conn.fetchrow(Q["invitation"], invitation_id)
            if row is None:
                raise errors.InvitationNotFound(f"no invitation {invitation_id}")
            if row["state"] != "pending":
                raise errors.InvitationNotPending(f"the invitation is {row['state']}")
            await conn.execute(Q["revoke_invitation"], invitation_id, actor)
            await self._audit(conn, actor, "invitation.revoked", f"invitation:{invitation_id}", {})
        # The link may still be followed on the identity pages; the user can no longer log in,
        # and GET /v1/me refuses them whatever happens here (no pending invitation).
        try:
            await self.realm.disable(row["subject"])
        except errors.IdentityUnavailable:
            log.warning("revoked invitation's user not disabled", invitation_id=invitation_id)
        return await self.invitation(invitation_id)

    async def staff_managers(self) -> int:
        """Active employees holding staff.manage."""
        return int(await self.pool.fetchval(Q["staff_managers"]))

    # -- the audit log -------------------------------------------------------------------------

    async def audit(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> tuple[list[dict[str, Any]], str | None]:
        rows = await self.pool.fetch(
            Q["audit_page"], actor, action, target, since, until, parse_cursor(cursor), limit
        )
        next_cursor = str(rows[-1]["id"]) if len(rows) == limit else None
        return [audit_view(r) for r in rows], next_cursor

    # -- at start ------------------------------------------------------------------------------

    async def ensure_administrator(self) -> str:
        """The administrator role (every permission), made once whatever the number of
        processes starting; its id."""
        async with self._change(guard=False) as conn:
            await conn.execute(Q["lock_staff"], BOOTSTRAP_LOCK_KEY)
            role_id = await conn.fetchval(Q["role_of_builtin"], ADMINISTRATOR)
            if role_id is None:
                role_id = new_id()
                everything = sorted(PERMISSIONS)
                await conn.execute(Q["insert_role"], role_id, ADMINISTRATOR, everything, True)
                await self._audit(
                    conn,
                    SYSTEM_ACTOR,
                    "role.created",
                    f"role:{role_id}",
                    {"name": ADMINISTRATOR, "permissions": everything},
                )
        return str(role_id)

    async def bootstrap(self, actor: str = SYSTEM_ACTOR) -> dict[str, Any] | None:
        """At start: the administrator role; and if nobody holds staff.manage and no bootstrap
        invitation was ever sent, one to ``bootstrap_email``. Returns the invitation sent."""
        role_id = await self.ensure_administrator()
        email = self.settings.bootstrap_email.strip()
        if not email:
            return None
        if await self.pool.fetchval(Q["staff_managers"]) or await self.pool.fetchrow(Q["bootstrap"]):
            return None
        return await self.invite(actor, email, "Administrator", [role_id], bootstrap=True)

    async def bootstrap_again(self, actor: str, email: str | None = None) -> dict[str, Any]:
        """`hiwallet staff bootstrap-invite`: while nobody holds staff.manage, a new
        administrator invitation (a pending one to the address is revoked first)."""
        role_id = await self.ensure_administrator()
        address = check_email(email or self.settings.bootstrap_email)
        if await self.pool.fetchval(Q["staff_managers"]):
            raise errors.BootstrapNotNeeded("an employee holds staff.manage; they invite administrators")
        for row in await self.pool.fetch(Q["invitations_page"], None, 1_000, "pending"):
            if row["email"].lower() == address:
                await self.revoke(actor, row["id"])
        invitation = await self.invite(actor, address, "Administrator", [role_id], bootstrap=True, once=False)
        if invitation is None:  # once=False: invite never skips
            raise RuntimeError("the bootstrap invitation was skipped")
        return invitation
