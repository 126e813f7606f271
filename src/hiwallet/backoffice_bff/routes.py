"""backoffice-bff's pages: they only translate between the browser and the internal services.

Every page asks staff-admin ``GET /v1/me`` with the employee's token (never cached: a role
taken away holds from the next page, and a 403 from any service is followed by a page whose
menu is asked again). The menu and every button are drawn from those permissions; a request
for what is not held — a forged POST included — is checked here against them too and answered
with the 403 page (the service behind checks again with the same token)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote, urlencode
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from hiwallet.backoffice_bff.errors import ActionRefused, NotAllowed, NothingHere
from hiwallet.backoffice_bff.upstream import STAFF_ADMIN, WALLET, WITHDRAWALS, Upstreams
from hiwallet.contracts.staff import ME_PATH, StaffPermission, staff_actor
from hiwallet.core.bff import BffSessions, Session, safe_return_path
from hiwallet.core.pages import LOCALE_COOKIE, LOCALES, Pages

__all__ = ["MENU", "Pager", "SignInNeeded", "Staff", "router", "signed_in_again", "staff"]

router = APIRouter(include_in_schema=False)

P = StaffPermission
# (permission, path, label): the menu, in this order; a label is a message of the catalogue.
MENU: tuple[tuple[str, str, str], ...] = (
    (P.CUSTOMER_VIEW.value, "/customers", "Customers"),
    (P.WITHDRAWAL_REVIEW.value, "/withdrawals", "Withdrawal review"),
    (P.CREDIT_GOODWILL.value, "/goodwill", "Goodwill credits"),
    (P.PROMO_STAFF.value, "/promo", "Staff promo"),
    (P.CAMPAIGNS_VIEW.value, "/campaigns", "Campaigns"),
    (P.PROMO_MERCHANT_ACCEPT.value, "/programmes", "Promo programmes"),
    (P.STAFF_MANAGE.value, "/employees", "Employees"),
    (P.STAFF_MANAGE.value, "/invitations", "Invitations"),
    (P.STAFF_MANAGE.value, "/audit", "Audit log"),
    (P.FINANCE_RECONCILIATION.value, "/reconciliation", "Reconciliation"),
)
_SEARCH_KEYS = ("email", "wallet_number", "account_id")
_DECISIONS = ("release", "cancel")
_MAX_FIELD = 320  # a form's text field: an e-mail address at most
_LOCALE_MAX_AGE_S = 365 * 24 * 3600
# The staff's time zone: a campaign's last day ends at midnight there.
_TIME_ZONE = ZoneInfo("Europe/Istanbul")
# An upstream's cursor is short (a uuid, a sequence number); one far longer is not one of theirs.
_CURSOR_MAX = 100
# How many pages back "previous" remembers (the link carries them; beyond, it goes to the first).
_TRAIL_MAX = 20
_FIRST = "~"  # the first page in a trail (it has no cursor); no upstream cursor holds "~"


class SignInNeeded(Exception):
    """No session (or the provider refused to renew it): to the login, then back here."""


@dataclass
class Staff:
    session: Session
    me: dict[str, Any]

    @property
    def permissions(self) -> set[str]:
        return set(self.me.get("permissions", []))

    def menu(self) -> list[tuple[str, str]]:
        return [(path, label) for perm, path, label in MENU if perm in self.permissions]


@dataclass(frozen=True)
class Pager:
    """Next and previous over an upstream's cursor, with no script and no state here: the
    upstreams page forwards only (``next_cursor``), so the links carry the cursors of the pages
    before this one (``trail``, at most :data:`_TRAIL_MAX`: further back, previous is the first
    page). The upstream checks the cursor; one it refuses is the refusal page."""

    cursor: str | None
    trail: tuple[str, ...]

    @classmethod
    def of(cls, request: Request) -> Pager:
        cursor = request.query_params.get("cursor", "")[:_CURSOR_MAX] or None
        raw = request.query_params.get("trail", "")[: (_CURSOR_MAX + 1) * _TRAIL_MAX]
        trail = tuple(t for t in raw.split(".") if t)[-_TRAIL_MAX:] if cursor else ()
        return cls(cursor, trail)

    def params(self) -> dict[str, str | int]:
        return {"cursor": self.cursor} if self.cursor else {}

    def links(self, path: str, next_cursor: Any, keep: dict[str, str] | None = None) -> dict[str, str | None]:
        kept = {k: v for k, v in (keep or {}).items() if v}
        after: str | None = None
        if isinstance(next_cursor, str | int) and str(next_cursor):
            trail = (*self.trail, self.cursor or _FIRST)[-_TRAIL_MAX:]
            after = path + "?" + urlencode({**kept, "cursor": str(next_cursor), "trail": ".".join(trail)})
        before: str | None = None
        if self.cursor:
            back = self.trail[-1] if self.trail else _FIRST
            query = dict(kept)
            if back != _FIRST:
                query |= {"cursor": back, "trail": ".".join(self.trail[:-1])}
            before = path + ("?" + urlencode(query) if query else "")
        return {"next": after, "prev": before}


def _page_size(request: Request) -> int:
    size: int = request.app.state.page_size
    return size


def _sessions(request: Request) -> BffSessions:
    sessions: BffSessions = request.app.state.sessions
    return sessions


def _up(request: Request) -> Upstreams:
    upstreams: Upstreams = request.app.state.upstreams
    return upstreams


def _pages(request: Request) -> Pages:
    pages: Pages = request.app.state.pages
    return pages


async def staff(request: Request, need: str | None = None) -> Staff:
    """The signed-in employee and what they may do now; ``need`` not held -> the 403 page."""
    session = await _sessions(request).current(request)
    if session is None:
        raise SignInNeeded
    try:
        me = await _up(request).call(STAFF_ADMIN, "GET", ME_PATH, session.access_token)
    except NotAllowed:
        # Signed in on the staff realm but no active employee (never invited, deactivated): the
        # 403 page, with no menu but the sign-out button.
        request.state.staff = Staff(session, {})
        raise
    who = Staff(session, me if isinstance(me, dict) else {})
    request.state.staff = who  # the error pages draw the menu too
    if need is not None and need not in who.permissions:
        raise NotAllowed(f"this needs the permission {need}", permission=need)
    return who


async def _posted(request: Request, need: str) -> tuple[Staff, dict[str, str]]:
    """A POST: the session, the CSRF token and Origin (core.bff), then the permission."""
    session = await _sessions(request).current(request)
    if session is None:
        raise SignInNeeded
    form = await request.form()
    fields = {k: v[:_MAX_FIELD] for k, v in form.items() if isinstance(v, str)}
    _sessions(request).check_csrf(request, session, fields.get("csrf"))
    return await staff(request, need), fields


def render(request: Request, template: str, who: Staff | None, status: int = 200, **context: Any) -> Response:
    return _pages(request).render(
        request,
        template,
        {
            "who": who,
            "menu": who.menu() if who else [],
            "csrf": who.session.csrf if who else None,
            "path": request.url.path,
            "here": _here(request),
            **context,
        },
        status=status,
    )


def _here(request: Request) -> str:
    query = request.url.query
    return request.url.path + ("?" + query if query else "")


def _at(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


# -- sign-in, sign-out, language -------------------------------------------------------------


@router.get("/login")
async def login(request: Request) -> Response:
    locale = _pages(request).locale_of(request)
    return _sessions(request).begin_login(safe_return_path(request.query_params.get("next")), locale)


@router.get("/auth/callback")
async def callback(request: Request) -> Response:
    return await _sessions(request).finish_login(request)


@router.post("/logout")
async def logout(request: Request) -> Response:
    session = await _sessions(request).current(request)
    if session is None:
        return RedirectResponse("/", status_code=303)
    form = await request.form()
    token = form.get("csrf")
    _sessions(request).check_csrf(request, session, token if isinstance(token, str) else None)
    return await _sessions(request).logout(request, then="/signed-out")


@router.get("/signed-out")
async def signed_out(request: Request) -> Response:
    return render(request, "signed_out.html", None)


@router.get("/language/{locale}")
async def language(request: Request, locale: str) -> Response:
    """The switch (a link, no script): remembered in a cookie, back to the page it was on."""
    back = RedirectResponse(safe_return_path(request.query_params.get("next")), status_code=303)
    if locale in LOCALES:
        secure = request.app.state.sessions.cookies.secure
        back.set_cookie(
            LOCALE_COOKIE, locale, max_age=_LOCALE_MAX_AGE_S, httponly=True, samesite="lax", secure=secure
        )
    return back


# -- home ------------------------------------------------------------------------------------


@router.get("/")
async def home(request: Request) -> Response:
    who = await staff(request)
    return render(request, "home.html", who)


# -- customer.view ---------------------------------------------------------------------------


@router.get("/customers")
async def customers(request: Request) -> Response:
    who = await staff(request, P.CUSTOMER_VIEW.value)
    by = request.query_params.get("by", "email")
    query = request.query_params.get("q", "").strip()[:_MAX_FIELD]
    found: list[dict[str, Any]] | None = None
    if by in _SEARCH_KEYS and query:
        answer = await _up(request).call(
            WALLET, "GET", "/v1/staff/customers", who.session.access_token, params={by: query}
        )
        found = answer.get("accounts", [])
    return render(request, "customers.html", who, by=by, q=query, found=found)


@router.get("/customers/{account_id}")
async def customer(request: Request, account_id: str) -> Response:
    who = await staff(request, P.CUSTOMER_VIEW.value)
    return await _customer_page(request, who, account_id[:_MAX_FIELD])


_EVIDENCE = ("remote_identity_verification", "signed_agreement")


@router.post("/customers/{account_id}/contract")
async def contract(request: Request, account_id: str) -> Response:
    """Raise a personal account to the Contracted tier on its evidence (wallet-api ``POST
    /v1/staff/accounts/{id}/contract``, ``customer.contract``); a refusal is drawn on the form."""
    who, fields = await _posted(request, P.CUSTOMER_CONTRACT.value)
    account_id = account_id[:_MAX_FIELD]
    entered = {"evidence": fields.get("evidence", ""), "reference": fields.get("reference", "").strip()[:200]}
    path = f"/v1/staff/accounts/{quote(account_id, safe='')}/contract"
    try:
        await _up(request).call(WALLET, "POST", path, who.session.access_token, json=entered)
    except ActionRefused as refusal:
        if P.CUSTOMER_VIEW.value not in who.permissions:
            raise  # no record to draw the form on: the refusal's page
        return await _customer_page(
            request, who, account_id, refusal.said, contract_refused=refusal, entered=entered
        )
    if P.CUSTOMER_VIEW.value not in who.permissions:
        return RedirectResponse("/?contracted=1", status_code=303)
    return RedirectResponse(f"/customers/{quote(account_id, safe='')}?done=contracted", status_code=303)


async def _customer_page(
    request: Request, who: Staff, account_id: str, status: int = 200,
    contract_refused: ActionRefused | None = None, entered: dict[str, str] | None = None,
) -> Response:  # fmt: skip
    token = who.session.access_token
    account = await _up(request).call(
        WALLET, "GET", f"/v1/staff/accounts/{quote(account_id, safe='')}", token
    )
    statements = []
    for wallet in account.get("wallets", [])[:10]:
        statement = await _up(request).call(
            WALLET, "GET", f"/v1/staff/wallets/{quote(wallet['id'], safe='')}/statement", token,
            params={"limit": 20},
        )  # fmt: skip
        lines = [{**line, "posted_at": _at(line.get("posted_at"))} for line in statement.get("lines", [])]
        statements.append({"wallet": wallet, "lines": lines})
    refused = None
    if contract_refused is not None:
        fields = set(contract_refused.fields)
        refused = {
            "evidence": "evidence" in fields,
            "reference": "reference" in fields,
            "kind": contract_refused.kind,
            "detail": None if fields else (contract_refused.detail or contract_refused.title),
        }
    return render(
        request,
        "customer.html",
        who,
        status=status,
        account=account,
        statements=statements,
        may_contract=P.CUSTOMER_CONTRACT.value in who.permissions
        and account.get("kind") == "personal"
        and account.get("tier") != "contracted",
        evidence=_EVIDENCE,
        refused=refused,
        entered=entered or {},
        done=request.query_params.get("done") == "contracted",
    )


# -- withdrawal.review -----------------------------------------------------------------------


async def _queue(request: Request, who: Staff, cursor: str | None = None, limit: int = 50) -> dict[str, Any]:
    params: dict[str, str | int] = {"status": "under_review", "limit": limit}
    if cursor:
        params["cursor"] = cursor
    answer: dict[str, Any] = await _up(request).call(
        WITHDRAWALS, "GET", "/v1/staff/withdrawals", who.session.access_token, params=params
    )
    for item in answer.get("withdrawals", []):
        item["created"] = _at(item.get("created_at"))
    return answer


@router.get("/withdrawals")
async def withdrawals(request: Request) -> Response:
    who = await staff(request, P.WITHDRAWAL_REVIEW.value)
    pager = Pager.of(request)
    queue = await _queue(request, who, pager.cursor, _page_size(request))
    done = request.query_params.get("done")
    return render(
        request,
        "withdrawals.html",
        who,
        queue=queue,
        done=done if done in _DECISIONS else None,
        pages=pager.links("/withdrawals", queue.get("next_cursor")),
    )


@router.get("/withdrawals/{withdrawal_id}/{decision}")
async def confirm(request: Request, withdrawal_id: str, decision: str) -> Response:
    """The confirmation step: what will happen to which withdrawal, and one key for the form."""
    who = await staff(request, P.WITHDRAWAL_REVIEW.value)
    if decision not in _DECISIONS:
        raise NothingHere("no such decision")
    queue = await _queue(request, who)
    item = next((w for w in queue.get("withdrawals", []) if w.get("id") == withdrawal_id), None)
    if item is None:
        raise NothingHere("this withdrawal is not waiting for a review")
    # One Idempotency-Key per form: a double click releases once.
    key = secrets.token_urlsafe(24)
    return render(request, "confirm.html", who, item=item, decision=decision, key=key)


@router.post("/withdrawals/{withdrawal_id}/{decision}")
async def decide(request: Request, withdrawal_id: str, decision: str) -> Response:
    who, fields = await _posted(request, P.WITHDRAWAL_REVIEW.value)
    if decision not in _DECISIONS:
        raise NothingHere("no such decision")
    key = fields.get("key") or secrets.token_urlsafe(24)
    await _up(request).call(
        WITHDRAWALS,
        "POST",
        f"/v1/staff/withdrawals/{quote(withdrawal_id, safe='')}/{decision}",
        who.session.access_token,
        headers={"Idempotency-Key": key[:64]},
    )
    return RedirectResponse(f"/withdrawals?done={decision}", status_code=303)


# -- staff.manage ----------------------------------------------------------------------------


@router.get("/employees")
async def employees(request: Request) -> Response:
    who = await staff(request, P.STAFF_MANAGE.value)
    token = who.session.access_token
    pager = Pager.of(request)
    params: dict[str, str | int] = {"limit": _page_size(request), **pager.params()}
    answer = await _up(request).call(STAFF_ADMIN, "GET", "/v1/employees", token, params=params)
    roles = await _up(request).call(STAFF_ADMIN, "GET", "/v1/roles", token)
    names = {r["id"]: r["name"] for r in _roles(roles)}
    done = request.query_params.get("done")
    return render(
        request,
        "employees.html",
        who,
        employees=answer.get("employees", []),
        role_names=names,
        roles=_roles(roles),
        done=done if done in (*_EMPLOYEE_ACTIONS, "roles") else None,
        pages=pager.links("/employees", answer.get("next_cursor")),
    )


_EMPLOYEE_ACTIONS = ("deactivate", "reactivate")
# staff-admin's refusals of a change of roles that the page explains in its own words.
_ROLE_REFUSALS = ("last-staff-manager", "unknown-role", "self-escalation")


async def _roles_form(
    request: Request, who: Staff, subject: str, status: int = 200, refused: str | None = None,
    detail: str | None = None, chosen: list[str] | None = None,
) -> Response:  # fmt: skip
    token = who.session.access_token
    employee = await _up(request).call(STAFF_ADMIN, "GET", f"/v1/employees/{quote(subject, safe='')}", token)
    roles = _roles(await _up(request).call(STAFF_ADMIN, "GET", "/v1/roles", token))
    held = chosen if chosen is not None else list(employee.get("role_ids", []))
    return render(
        request,
        "employee_roles.html",
        who,
        status=status,
        employee=employee,
        roles=roles,
        held=set(held),
        own=subject == who.session.subject,
        refused=refused,
        detail=detail,
    )


@router.get("/employees/{subject}/roles")
async def employee_roles(request: Request, subject: str) -> Response:
    """The roles of one employee as checkboxes (staff-admin ``PUT /v1/employees/{sub}/roles``)."""
    who = await staff(request, P.STAFF_MANAGE.value)
    return await _roles_form(request, who, subject[:_MAX_FIELD])


@router.post("/employees/{subject}/roles")
async def change_roles(request: Request, subject: str) -> Response:
    """Replace the employee's roles; staff-admin's refusal (the last holder of staff.manage, a
    role gone, one's own roles) is drawn on the form, the choice kept, with its status."""
    who, _ = await _posted(request, P.STAFF_MANAGE.value)
    subject = subject[:_MAX_FIELD]
    form = await request.form()
    role_ids = [v[:100] for v in form.getlist("role_id") if isinstance(v, str)][:64]
    path = f"/v1/employees/{quote(subject, safe='')}/roles"
    try:
        await _up(request).call(
            STAFF_ADMIN, "PUT", path, who.session.access_token, json={"role_ids": role_ids}
        )
    except ActionRefused as refusal:
        kind = refusal.kind if refusal.kind in _ROLE_REFUSALS else "other"
        return await _roles_form(request, who, subject, refusal.said, kind, refusal.detail, chosen=role_ids)
    except NotAllowed as refusal:
        if refusal.kind != "self-escalation":
            raise  # the permission itself is gone: the 403 page
        return await _roles_form(request, who, subject, 403, refusal.kind, refusal.detail, chosen=role_ids)
    return RedirectResponse("/employees?done=roles", status_code=303)


@router.post("/employees/{subject}/{action}")
async def employee_action(request: Request, subject: str, action: str) -> Response:
    who, _ = await _posted(request, P.STAFF_MANAGE.value)
    if action not in _EMPLOYEE_ACTIONS:
        raise NothingHere("no such action")
    path = f"/v1/employees/{quote(subject, safe='')}/{action}"
    await _up(request).call(STAFF_ADMIN, "POST", path, who.session.access_token)
    return RedirectResponse(f"/employees?done={action}", status_code=303)


def _roles(answer: Any) -> list[dict[str, Any]]:
    items = answer.get("roles", []) if isinstance(answer, dict) else answer
    return [r for r in items if isinstance(r, dict)]


@router.get("/invitations")
async def invitations(request: Request) -> Response:
    who = await staff(request, P.STAFF_MANAGE.value)
    token = who.session.access_token
    pager = Pager.of(request)
    params: dict[str, str | int] = {"limit": _page_size(request), **pager.params()}
    answer = await _up(request).call(STAFF_ADMIN, "GET", "/v1/invitations", token, params=params)
    roles = _roles(await _up(request).call(STAFF_ADMIN, "GET", "/v1/roles", token))
    sent = request.query_params.get("sent") == "1"
    return render(
        request,
        "invitations.html",
        who,
        invitations=answer.get("invitations", []),
        roles=roles,
        sent=sent,
        pages=pager.links("/invitations", answer.get("next_cursor")),
    )


@router.post("/invitations")
async def invite(request: Request) -> Response:
    who, fields = await _posted(request, P.STAFF_MANAGE.value)
    form = await request.form()
    role_ids = [v[:100] for v in form.getlist("role_id") if isinstance(v, str)][:64]
    body: dict[str, Any] = {"email": fields.get("email", "").strip(), "role_ids": role_ids}
    if fields.get("name", "").strip():
        body["name"] = fields["name"].strip()[:100]
    await _up(request).call(STAFF_ADMIN, "POST", "/v1/invitations", who.session.access_token, json=body)
    return RedirectResponse("/invitations?sent=1", status_code=303)


@router.post("/invitations/{invitation_id}/revoke")
async def revoke(request: Request, invitation_id: str) -> Response:
    who, _ = await _posted(request, P.STAFF_MANAGE.value)
    path = f"/v1/invitations/{quote(invitation_id, safe='')}/revoke"
    await _up(request).call(STAFF_ADMIN, "POST", path, who.session.access_token)
    return RedirectResponse("/invitations", status_code=303)


_AUDIT_FILTERS = ("actor", "action", "target", "since", "until")


@router.get("/audit")
async def audit(request: Request) -> Response:
    who = await staff(request, P.STAFF_MANAGE.value)
    filters = {k: request.query_params.get(k, "").strip()[:300] for k in _AUDIT_FILTERS}
    pager = Pager.of(request)
    params: dict[str, str | int] = {k: v for k, v in filters.items() if v}
    params |= {"limit": _page_size(request), **pager.params()}
    answer = await _up(request).call(STAFF_ADMIN, "GET", "/v1/audit", who.session.access_token, params=params)
    entries = [{**e, "when": _at(e.get("at"))} for e in answer.get("entries", answer.get("audit", []))]
    pages = pager.links("/audit", answer.get("next_cursor"), filters)
    return render(request, "audit.html", who, entries=entries, filters=filters, pages=pages)


# -- staff money (wallet-api) ------------------------------------------------------------------


async def _campaigns_page(
    request: Request, who: Staff, status: int = 200, errors: dict[str, bool] | None = None,
    refused: str | None = None, entered: dict[str, str] | None = None, key: str | None = None,
) -> Response:  # fmt: skip
    pager = Pager.of(request) if request.method == "GET" else Pager(None, ())
    params: dict[str, str | int] = {"limit": _page_size(request), **pager.params()}
    answer = await _up(request).call(
        WALLET, "GET", "/v1/staff/campaigns", who.session.access_token, params=params
    )
    items = [{**c, "ends": _at(c.get("ends_at"))} for c in answer.get("campaigns", [])]
    done = request.query_params.get("done") == "1"
    return render(
        request,
        "campaigns.html",
        who,
        status=status,
        campaigns=items,
        pages=pager.links("/campaigns", answer.get("next_cursor")),
        may_create=P.CAMPAIGNS_MANAGE.value in who.permissions,
        errors=errors or {},
        refused=refused,
        entered=entered or {},
        done=done,
        tomorrow=(datetime.now(_TIME_ZONE).date() + timedelta(days=1)).isoformat(),
        # One Idempotency-Key per form: a double click or a resubmission makes one campaign.
        key=key or secrets.token_urlsafe(24),
    )


@router.get("/campaigns")
async def campaigns(request: Request) -> Response:
    who = await staff(request, P.CAMPAIGNS_VIEW.value)
    return await _campaigns_page(request, who)


# wallet-api's body members -> the form's fields
_CAMPAIGN_FIELDS = {"name": "name", "budget_minor": "budget", "ends_at": "ends"}


@router.post("/campaigns")
async def create_campaign(request: Request) -> Response:
    """A promo campaign (wallet-api ``POST /v1/staff/campaigns``, ``campaigns.manage``): wallet-api
    validates; a refusal draws the form again with what was entered and each field's error."""
    who, fields = await _posted(request, P.CAMPAIGNS_MANAGE.value)
    entered = {k: fields.get(k, "").strip()[:140] for k in ("name", "budget", "ends")}
    key = (fields.get("key") or secrets.token_urlsafe(24))[:64]
    body = {
        "name": entered["name"],
        "budget_minor": _minor(entered["budget"]),
        "ends_at": _end_of_day(entered["ends"]),
    }
    try:
        await _up(request).call(
            WALLET,
            "POST",
            "/v1/staff/campaigns",
            who.session.access_token,
            json=body,
            headers={"Idempotency-Key": key},
        )
    except ActionRefused as refusal:
        errors = {_CAMPAIGN_FIELDS[f]: True for f in refusal.fields if f in _CAMPAIGN_FIELDS}
        refused = None if errors else (refusal.detail or refusal.title)
        status = 422 if errors else refusal.said
        # A refusal is not stored under the key, so the corrected form keeps it (sent again while
        # the first still runs, it then replays that one); a key already used for another
        # campaign (a form from the back button, changed) gets a new one.
        again = None if refusal.kind == "idempotency-key-reused" else key
        return await _campaigns_page(request, who, status, errors, refused, entered, again)
    return RedirectResponse("/campaigns?done=1", status_code=303)


def _end_of_day(text: str) -> str:
    """``2026-12-31`` (the date field) -> the last second of that day in Istanbul; anything else
    is sent as written, for wallet-api to refuse (its refusal is the form's)."""
    try:
        day = date.fromisoformat(text)
    except ValueError:
        return text
    return datetime.combine(day, time(23, 59, 59), _TIME_ZONE).isoformat()


@router.get("/programmes")
async def programmes(request: Request) -> Response:
    who = await staff(request, P.PROMO_MERCHANT_ACCEPT.value)
    pager = Pager.of(request)
    answer = await _up(request).call(
        WALLET,
        "GET",
        "/v1/staff/promo-programmes",
        who.session.access_token,
        params={"status": "proposed", "limit": _page_size(request), **pager.params()},
    )
    items = [{**p, "expires": _at(p.get("expires_at"))} for p in answer.get("programmes", [])]
    done = request.query_params.get("done")
    return render(
        request,
        "programmes.html",
        who,
        programmes=items,
        done=done if done in ("accept", "refuse") else None,
        pages=pager.links("/programmes", answer.get("next_cursor")),
    )


@router.post("/programmes/{programme_id}/{decision}")
async def decide_programme(request: Request, programme_id: str, decision: str) -> Response:
    who, fields = await _posted(request, P.PROMO_MERCHANT_ACCEPT.value)
    if decision not in ("accept", "refuse"):
        raise NothingHere("no such decision")
    reason = fields.get("reason", "").strip()[:500]
    await _up(request).call(
        WALLET,
        "POST",
        f"/v1/staff/promo-programmes/{quote(programme_id, safe='')}/{decision}",
        who.session.access_token,
        json={"reason": reason} if reason else {},
    )
    return RedirectResponse(f"/programmes?done={decision}", status_code=303)


@router.get("/goodwill")
async def goodwill(request: Request) -> Response:
    who = await staff(request, P.CREDIT_GOODWILL.value)
    pager = Pager.of(request)
    answer = await _up(request).call(
        WALLET,
        "GET",
        "/v1/staff/goodwill-credits",
        who.session.access_token,
        params={"status": "pending", "limit": _page_size(request), **pager.params()},
    )
    items = [{**g, "requested": _at(g.get("requested_at"))} for g in answer.get("goodwill_credits", [])]
    done = request.query_params.get("done")
    return render(
        request,
        "goodwill.html",
        who,
        pending=items,
        mine=staff_actor(who.session.subject),
        key=secrets.token_urlsafe(24),
        done=done if done in ("posted", "pending", "approved") else None,
        pages=pager.links("/goodwill", answer.get("next_cursor")),
    )


@router.post("/goodwill")
async def request_goodwill(request: Request) -> Response:
    who, fields = await _posted(request, P.CREDIT_GOODWILL.value)
    amount_minor = _minor(fields.get("amount", ""))
    body = {
        "wallet": fields.get("wallet", "").strip(),
        "amount_minor": amount_minor,
        "reason": fields.get("reason", "").strip()[:500],
    }
    answer = await _up(request).call(
        WALLET,
        "POST",
        "/v1/staff/goodwill-credits",
        who.session.access_token,
        json=body,
        headers={"Idempotency-Key": (fields.get("key") or secrets.token_urlsafe(24))[:64]},
    )
    status = answer.get("status") if isinstance(answer, dict) else None
    return RedirectResponse(
        f"/goodwill?done={'posted' if status == 'posted' else 'pending'}", status_code=303
    )


@router.post("/goodwill/{credit_id}/approve")
async def approve_goodwill(request: Request, credit_id: str) -> Response:
    who, _ = await _posted(request, P.CREDIT_GOODWILL.value)
    await _up(request).call(
        WALLET,
        "POST",
        f"/v1/staff/goodwill-credits/{quote(credit_id, safe='')}/approve",
        who.session.access_token,
    )
    return RedirectResponse("/goodwill?done=approved", status_code=303)


_PROMO_DAYS = (7, 30, 90)


@router.get("/promo")
async def promo(request: Request) -> Response:
    who = await staff(request, P.PROMO_STAFF.value)
    done = request.query_params.get("done") == "1"
    return render(request, "promo.html", who, key=secrets.token_urlsafe(24), days=_PROMO_DAYS, done=done)


@router.post("/promo")
async def grant_promo(request: Request) -> Response:
    who, fields = await _posted(request, P.PROMO_STAFF.value)
    days = int(fields["days"]) if fields.get("days", "").isdigit() else 0
    if days not in _PROMO_DAYS:
        days = _PROMO_DAYS[1]
    body: dict[str, Any] = {
        "wallet": fields.get("wallet", "").strip(),
        "amount_minor": _minor(fields.get("amount", "")),
        "expires_at": (datetime.now(UTC) + timedelta(days=days)).isoformat(),
    }
    if fields.get("reference", "").strip():
        body["reference"] = fields["reference"].strip()[:140]
    await _up(request).call(
        WALLET,
        "POST",
        "/v1/staff/promos",
        who.session.access_token,
        json=body,
        headers={"Idempotency-Key": (fields.get("key") or secrets.token_urlsafe(24))[:64]},
    )
    return RedirectResponse("/promo?done=1", status_code=303)


def _minor(text: str) -> int:
    """``"1.234,56"`` or ``"1234.56"`` (TRY, two decimals) -> 123456; anything else -> 0, which
    wallet-api refuses (the page shows its refusal)."""
    cleaned = text.strip().replace(" ", "")
    if "," in cleaned:  # the Turkish way: dots group, the comma is the decimal mark
        cleaned = cleaned.replace(".", "").replace(",", ".")
    try:
        amount = Decimal(cleaned)
    except InvalidOperation:
        return 0
    minor = amount * 100
    if not amount.is_finite() or minor != minor.to_integral_value() or not 0 < minor < 10**15:
        return 0
    return int(minor)


def signed_in_again(request: Request) -> Response:
    """Where a page without a session sends the browser (a GET comes back to itself)."""
    back = _here(request) if request.method == "GET" else "/"
    return RedirectResponse("/login?next=" + quote(back, safe=""), status_code=303)


# -- finance.reconciliation (wallet-api) -------------------------------------------------------

_FINDING_STATUSES = ("open", "resolved")
_NOTE_MAX = 2000


async def _findings_page(
    request: Request, who: Staff, status: int = 200, refused: dict[str, Any] | None = None
) -> Response:
    shown = request.query_params.get("status", "open")
    shown = shown if shown in _FINDING_STATUSES else "open"
    pager = Pager.of(request) if request.method == "GET" else Pager(None, ())
    params: dict[str, str | int] = {"status": shown, "limit": _page_size(request), **pager.params()}
    answer = await _up(request).call(
        WALLET, "GET", "/v1/staff/reconciliation/findings", who.session.access_token, params=params
    )
    items = [
        {
            **f,
            "found": _at(f.get("found_at")),
            "seen": _at(f.get("last_seen_at")),
            "resolved": _at(f.get("resolved_at")),
        }
        for f in answer.get("findings", [])
    ]
    return render(
        request,
        "reconciliation.html",
        who,
        status=status,
        findings=items,
        shown=shown,
        refused=refused,
        done=request.query_params.get("done") == "resolved",
        pages=pager.links("/reconciliation", answer.get("next_cursor"), {"status": shown}),
    )


@router.get("/reconciliation")
async def reconciliation(request: Request) -> Response:
    """The books' checks' findings, open or resolved, newest first (``finance.reconciliation``)."""
    who = await staff(request, P.FINANCE_RECONCILIATION.value)
    return await _findings_page(request, who)


@router.post("/reconciliation/{finding_id}/resolve")
async def resolve_finding(request: Request, finding_id: str) -> Response:
    """Resolve an open finding with a note (once: wallet-api refuses a second, 409)."""
    who, _ = await _posted(request, P.FINANCE_RECONCILIATION.value)
    form = await request.form()
    raw = form.get("note")
    # the note may be longer than a form's other fields (wallet-api keeps up to 2000 characters)
    note = raw.strip()[:_NOTE_MAX] if isinstance(raw, str) else ""
    path = f"/v1/staff/reconciliation/findings/{quote(finding_id[:_MAX_FIELD], safe='')}/resolve"
    try:
        await _up(request).call(WALLET, "POST", path, who.session.access_token, json={"note": note})
    except ActionRefused as refusal:
        refused = {"id": finding_id, "kind": refusal.kind, "note": "note" in refusal.fields}
        return await _findings_page(request, who, refusal.said, refused)
    return RedirectResponse("/reconciliation?done=resolved", status_code=303)
