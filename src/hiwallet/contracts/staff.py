"""Staff on every service: the fixed permissions, who an employee is, and the live check.

Staff identity (docs/architecture.md, "Tokens and realms"): an employee logs in on the staff realm; what they
may do is staff-admin's to say, read on EVERY staff request with the employee's own token
(``GET /v1/me``), never cached, so a deactivation or a role change holds from the very next
request. The permissions are fixed in code (:class:`StaffPermission`); they live here, not in
staff-admin, because wallet-api, withdrawal-orchestrator and staff-admin all name them.

A staff endpoint depends on :func:`require_staff` with the one permission it needs:

1. the token is verified with the service's own :class:`~hiwallet.core.auth.TokenVerifier`
   (``app.state.verifier``); only a token the STAFF issuer verified qualifies, anything else is
   refused exactly as a staff token is refused on a customer endpoint (403 ``caller-not-allowed``);
2. staff-admin is asked who the employee is (:class:`StaffDirectory`, ``app.state.staff_directory``):
   unknown or deactivated -> 403 ``staff-not-allowed``; staff-admin unreachable, failing or slow
   -> 503 ``staff-admin-unavailable`` with ``Retry-After`` (the employee retries; customers'
   requests never ask staff-admin, so they are unaffected);
3. the permission is checked -> 403 ``permission-missing`` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx
import structlog
from fastapi import Request

from hiwallet.core.auth import CallerNotAllowed, Principal, TokenRejected, TokenVerifier, bearer_token
from hiwallet.core.http import Forbidden, ServiceUnavailable

__all__ = [
    "ME_PATH",
    "PermissionMissing",
    "StaffAdminContractBroken",
    "StaffAdminUnavailable",
    "StaffDirectory",
    "StaffMember",
    "StaffNotAllowed",
    "StaffPermission",
    "require_staff",
    "staff_actor",
]

log = structlog.get_logger(__name__)

ME_PATH = "/v1/me"
# What an employee's client is told to wait when staff-admin cannot answer: staff-admin is one
# process behind a supervisor, back within seconds or down for long.
RETRY_AFTER_S = 2
MAX_ME_BYTES = 65_536  # a /v1/me answer is a few hundred bytes; far larger is not staff-admin


class StaffPermission(StrEnum):
    """The fixed permissions (staff-admin's ``StaffPermissions``). A role is a named set of them."""

    CUSTOMER_VIEW = "customer.view"
    WITHDRAWAL_REVIEW = "withdrawal.review"
    PROMO_STAFF = "promo.staff"
    CAMPAIGNS_VIEW = "campaigns.view"
    CAMPAIGNS_MANAGE = "campaigns.manage"
    PROMO_MERCHANT_ACCEPT = "promo.merchant_accept"
    STAFF_MANAGE = "staff.manage"
    CREDIT_GOODWILL = "credit.goodwill"
    # Record the evidence (remote identity verification, signed agreement) that raises a
    # personal account to the Contracted tier (wallet-api, POST /v1/staff/accounts/{id}/contract).
    CUSTOMER_CONTRACT = "customer.contract"
    # the books: reconciliation's findings (list, resolve, run a round) and the daily summary
    FINANCE_RECONCILIATION = "finance.reconciliation"
    # the providers' invoices entered (wallet-api, POST /v1/staff/provider-invoices)
    FINANCE_INVOICES = "finance.invoices"


def staff_actor(subject: str) -> str:
    """How the ledger, the sagas and the audit name an employee: ``staff:<sub>``."""
    return f"staff:{subject}"


@dataclass(frozen=True)
class StaffMember:
    """An active employee and their permissions at the moment staff-admin answered."""

    subject: str
    email: str | None
    permissions: frozenset[StaffPermission]

    @property
    def actor(self) -> str:
        return staff_actor(self.subject)

    def can(self, permission: StaffPermission) -> bool:
        return permission in self.permissions


class StaffNotAllowed(Forbidden):
    # A valid staff-realm token, but staff-admin knows no active employee behind it (never
    # invited, invitation not completed, or deactivated).
    slug = "staff-not-allowed"
    title = "This employee may not act as staff"


class PermissionMissing(Forbidden):
    slug = "permission-missing"
    title = "The employee lacks the permission this endpoint needs"


class StaffAdminUnavailable(ServiceUnavailable):
    slug = "staff-admin-unavailable"
    title = "staff-admin could not say who the employee is"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"Retry-After": str(RETRY_AFTER_S)})


class StaffAdminContractBroken(RuntimeError):
    """staff-admin answered 200 with what its contract does not allow (unreadable, inactive,
    another subject): a defect, answered as an internal error (500, logged by the edge)."""


class StaffDirectory:
    """An httpx client of staff-admin's ``GET /v1/me``, asked with the employee's own token.

    No cache, by design: the answer is the employee's permissions NOW. Bounded: at most
    ``max_connections`` requests to staff-admin at once (a burst waits for a connection, up to
    the timeout) and every request within ``timeout_s``; a timeout is a 503 like a refused
    connection, so a slow staff-admin never holds a service's workers for long.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 2.0,
        max_connections: int = 20,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._own_client = http_client is None
        self.client = http_client or httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(1.0, timeout_s)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()

    async def member(self, token: str) -> StaffMember:
        """The employee behind ``token`` (already verified as a staff token by the caller).

        Raises :class:`StaffNotAllowed` (403: unknown or deactivated),
        :class:`~hiwallet.core.auth.TokenRejected` (401: staff-admin refused the token itself,
        e.g. it expired in between) or :class:`StaffAdminUnavailable` (503: anything else).
        """
        try:
            response = await self.client.get(ME_PATH, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            log.warning("staff-admin unreachable", error=type(exc).__name__)
            raise StaffAdminUnavailable("staff-admin is not reachable; retry") from exc
        if response.status_code == 403:
            raise StaffNotAllowed("staff-admin knows no active employee with this token")
        if response.status_code == 401:
            raise TokenRejected("staff-admin did not accept the token")
        if response.status_code != 200:
            log.warning("staff-admin failed", status=response.status_code)
            raise StaffAdminUnavailable("staff-admin could not answer; retry")
        try:
            return _member(response)
        except ValueError as exc:
            # A 200 that breaks the contract is a defect (a version skew, a bug), which no retry
            # cures: a logged 500, never "retry later"; and it opens no door either way.
            raise StaffAdminContractBroken(f"staff-admin's /v1/me answer is not readable: {exc}") from exc


def _member(response: httpx.Response) -> StaffMember:
    if len(response.content) > MAX_ME_BYTES:
        raise ValueError("too large")
    body = response.json()
    if not isinstance(body, dict) or not isinstance(body.get("subject"), str):
        raise ValueError("no subject")
    if body.get("active") is not True:
        # staff-admin answers 403 for a deactivated employee; an answer saying otherwise with a
        # 200 must not open a door.
        raise ValueError("not active")
    names = body.get("permissions")
    if not isinstance(names, list):
        raise ValueError("no permissions")
    known = {p.value for p in StaffPermission}
    # A name this code does not know (a newer staff-admin) grants nothing here.
    permissions = frozenset(StaffPermission(n) for n in names if isinstance(n, str) and n in known)
    email = body.get("email")
    return StaffMember(body["subject"], email if isinstance(email, str) else None, permissions)


def require_staff(
    permission: StaffPermission,
    *,
    verifier: Callable[[Request], TokenVerifier] | None = None,
    directory: Callable[[Request], StaffDirectory] | None = None,
) -> Callable[[Request], Coroutine[Any, Any, StaffMember]]:
    """A FastAPI dependency: the employee, if they hold ``permission`` right now.

    The verifier and the directory default to ``app.state.verifier`` and
    ``app.state.staff_directory``, where the services keep them.
    """
    permission = StaffPermission(permission)

    async def dependency(request: Request) -> StaffMember:
        active = verifier(request) if verifier else request.app.state.verifier
        token = bearer_token(request)
        principal: Principal = await active.verify(token)
        # Who the caller is comes from the issuer that verified the token (core.auth), never
        # a claim; a customer (person or service account) is refused as staff are refused on
        # customer endpoints: 403 caller-not-allowed.
        if principal.kind != "staff" or principal.is_service_account:
            raise CallerNotAllowed(f"a {principal.caller} may not call a staff endpoint")
        staff = directory(request) if directory else request.app.state.staff_directory
        member = await staff.member(token)
        if member.subject != principal.subject:
            # staff-admin read the same token; a different subject is a defect, not a person.
            raise StaffAdminContractBroken("staff-admin answered for another subject than the token's")
        if permission not in member.permissions:
            raise PermissionMissing(
                f"this needs the permission {permission.value}", permission=permission.value
            )
        request.state.staff = member
        return member

    return dependency
