"""Reconciliation and the daily summary over HTTP (hiwallet.reconciliation; docs/wallet-api.md).

Staff, ``finance.reconciliation``:
- ``GET /v1/staff/reconciliation/findings?status=open|resolved&kind=&cursor=&limit=``, and
  ``GET /v1/staff/reconciliation/findings/{id}``: what the books' checks found, newest first.
- ``POST /v1/staff/reconciliation/findings/{id}/resolve`` ``{"note"}``: resolved by the employee
  of the token, with the note; once (409 ``finding-resolved`` after).
- ``POST /v1/staff/reconciliation/runs``: a round now, in this process, under the jobs' lock
  (409 ``reconciliation-running`` when one runs elsewhere); its report.
- ``GET /v1/staff/daily-summary?from=&to=&account_id=&format=json|csv``: every business's days
  and the totals (``account_id`` empty), or one business's.

A business, for itself (a member of the account; business-api forwards it):
``GET /v1/accounts/{account_id}/daily-summary?from=&to=&format=``.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, BeforeValidator, Field

from hiwallet.contracts.staff import StaffMember, StaffPermission
from hiwallet.core.text import PrintableText
from hiwallet.reconciliation import (
    MAX_DAYS,
    MAX_PAGE,
    FindingAlreadyResolved,
    FindingNotFound,
    Reconciler,
    ReconciliationBusy,
    SummaryRow,
    finding,
    list_findings,
    read_summary,
    resolve_finding,
    run_now,
    summary_csv,
)
from hiwallet.wallet_api import errors
from hiwallet.wallet_api.access import own_account
from hiwallet.wallet_api.domain import AccountKind
from hiwallet.wallet_api.retry import answered
from hiwallet.wallet_api.routes import _COMMON, ACCOUNT, AccountIdPath, CallerDep, ServiceDep, _decimal, _In
from hiwallet.wallet_api.staff_routes import _STAFF_RESPONSES, _staff

__all__ = ["reconciliation_router"]

Finance = Annotated[StaffMember, _staff(StaffPermission.FINANCE_RECONCILIATION)]
_FINDING_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
DEFAULT_DAYS = 31
CSV_TYPE = "text/csv; charset=utf-8"


class FindingOut(BaseModel):
    id: str
    kind: str
    subject: str = Field(description="What it is about: an account, a top-up's transaction, a payout …")
    details: dict[str, Any]
    found_at: datetime
    last_seen_at: datetime = Field(description="When a check last found it again")
    status: Literal["open", "resolved"]
    resolved_by: str | None = Field(description="staff:<sub>, or system:reconciliation (not found again)")
    resolution_note: str | None
    resolved_at: datetime | None


class FindingsOut(BaseModel):
    findings: list[FindingOut]
    next_cursor: str | None


class ResolveIn(_In):
    note: Annotated[PrintableText, Field(min_length=1, max_length=2000)]


class RoundOut(BaseModel):
    found: dict[str, int] = Field(description="Discrepancies found this round, by kind")
    new: int = Field(description="Of which were not open already")
    resolved: int = Field(description="Open findings this round did not find again, closed")
    finished_at: datetime | None


class SummaryRowOut(BaseModel):
    day: date
    currency: str
    account_id: str | None = Field(description="The business account; null: every wallet together")
    transactions: int
    volume_in_minor: int
    volume_out_minor: int
    fees_minor: int
    computed_at: datetime


class SummaryOut(BaseModel):
    days: list[SummaryRowOut]


reconciliation_router = APIRouter(prefix="/v1", tags=["reconciliation"])


def _finding_id(finding_id: str) -> str:
    # a malformed id names nothing: the 404 of a missing one (docs/wallet-api.md)
    if not _FINDING_ID.fullmatch(finding_id):
        raise errors.NotFound("no such finding")
    return finding_id


@reconciliation_router.get(
    "/staff/reconciliation/findings", response_model=FindingsOut, responses=_STAFF_RESPONSES
)
async def findings(
    _who: Finance,
    svc: ServiceDep,
    status: Literal["open", "resolved"] = "open",
    kind: Annotated[str | None, Query(pattern=r"^[a-z][a-z0-9_]{0,62}$")] = None,
    cursor: Annotated[str | None, Query(max_length=80)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE), BeforeValidator(_decimal)] = 50,
) -> Any:
    """Findings by status (and kind), newest first; pass ``next_cursor`` back for more."""
    try:
        page = await answered(list_findings(svc.pool, status=status, kind=kind, cursor=cursor, limit=limit))
    except ValueError as exc:
        raise errors.InvalidRequest(str(exc)) from None
    return {"findings": [f.as_json() for f in page.findings], "next_cursor": page.next_cursor}


@reconciliation_router.get(
    "/staff/reconciliation/findings/{finding_id}", response_model=FindingOut, responses=_STAFF_RESPONSES
)
async def one_finding(_who: Finance, svc: ServiceDep, finding_id: str) -> Any:
    try:
        return (await answered(finding(svc.pool, _finding_id(finding_id)))).as_json()
    except FindingNotFound:
        raise errors.NotFound("no such finding") from None


@reconciliation_router.post(
    "/staff/reconciliation/findings/{finding_id}/resolve",
    response_model=FindingOut,
    responses=_STAFF_RESPONSES,
)
async def resolve(who: Finance, svc: ServiceDep, finding_id: str, body: ResolveIn) -> Any:
    """Resolve an open finding: the employee of the token, and why. Once: after, 409."""
    try:
        done = await answered(
            resolve_finding(svc.pool, _finding_id(finding_id), by=who.actor, note=body.note)
        )
    except FindingNotFound:
        raise errors.NotFound("no such finding") from None
    except FindingAlreadyResolved as exc:
        raise errors.FindingResolved(str(exc), resolved_by=exc.resolved_by) from None
    except ValueError as exc:
        raise errors.InvalidRequest(str(exc)) from None
    return done.as_json()


@reconciliation_router.post("/staff/reconciliation/runs", response_model=RoundOut, responses=_STAFF_RESPONSES)
async def run(_who: Finance, request: Request) -> Any:
    """A reconciliation round now (as the job's, under its lock): its report."""
    reconciler: Reconciler = request.app.state.reconciler
    try:
        report = await run_now(reconciler, request.app.state.reconciliation_connect)
    except ReconciliationBusy as exc:
        raise errors.ReconciliationRunning(str(exc)) from None
    return report.as_json()


def _range(first: date | None, last: date | None) -> tuple[date, date]:
    last = last or datetime.now(UTC).date()
    first = first or last - timedelta(days=DEFAULT_DAYS - 1)
    if last < first or (last - first).days >= MAX_DAYS:
        raise errors.InvalidRequest(f"from must not be after to, and at most {MAX_DAYS} days at once")
    return first, last


def _answer(rows: list[SummaryRow], fmt: str, request: Request) -> Any:
    if fmt == "csv" or (fmt == "" and "text/csv" in request.headers.get("accept", "")):
        return Response(summary_csv(rows), media_type=CSV_TYPE)
    return {"days": [r.as_json() for r in rows]}


_CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}, "description": "JSON, or CSV"}
}
From = Annotated[date | None, Query(alias="from")]
To = Annotated[date | None, Query(alias="to")]
Format = Annotated[Literal["", "json", "csv"], Query(alias="format")]


@reconciliation_router.get(
    "/staff/daily-summary", response_model=SummaryOut, responses={**_STAFF_RESPONSES, **_CSV}
)
async def staff_summary(
    _who: Finance,
    svc: ServiceDep,
    request: Request,
    first: From = None,
    last: To = None,
    account_id: Annotated[str | None, Query(max_length=120)] = None,
    fmt: Format = "",
) -> Any:
    """Days (UTC, default the last 31) of every business and the totals (``account_id`` null),
    or of one business; ``format=csv`` (or ``Accept: text/csv``) for CSV."""
    first, last = _range(first, last)
    rows = await answered(read_summary(svc.pool, first, last, account_id=account_id))
    return _answer(rows, fmt, request)


@reconciliation_router.get(
    f"/accounts/{ACCOUNT}/daily-summary",
    response_model=SummaryOut,
    responses={**_COMMON, **_CSV},
    tags=["accounts"],
)
async def account_summary(
    account_id: AccountIdPath,
    who: CallerDep,
    svc: ServiceDep,
    request: Request,
    first: From = None,
    last: To = None,
    fmt: Format = "",
) -> Any:
    """A business's own days (UTC, default the last 31): its transactions, what came in and
    went out, the fees taken in them."""
    account = await own_account(svc.pool, who, account_id)
    if account.kind is not AccountKind.BUSINESS:
        raise errors.NotABusiness("only a business account has a daily summary")
    first, last = _range(first, last)
    rows = await answered(read_summary(svc.pool, first, last, account_id=account.id))
    return _answer(rows, fmt, request)
