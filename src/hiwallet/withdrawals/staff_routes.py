"""withdrawal-orchestrator's staff endpoints, ``withdrawal.review`` (contracts.staff.require_staff:
the staff issuer verified the token, staff-admin says who the employee is now, no cache):

- ``GET /v1/staff/withdrawals?status=under_review``: the withdrawals waiting for a review, oldest
  first, with a cursor;
- ``POST /v1/staff/withdrawals/{id}/release`` and ``/cancel`` (Idempotency-Key required): what
  ``hiwallet withdrawals release|cancel`` does, with the employee (``staff:<sub>``) as the actor
  in the saga's history, ``reviewed_by``, and, for a cancel, the ledger's reversal entry.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from hiwallet.contracts.public import WithdrawalOut
from hiwallet.contracts.staff import StaffMember, StaffPermission, require_staff
from hiwallet.withdrawals import errors
from hiwallet.withdrawals.routes import (
    _COMMON,
    _IDEMPOTENCY_HEADER,
    _PROBLEM,
    _SAGA,
    MAX_PAGE,
    SAGA_PATTERN,
    _bearer,
    _service,
)
from hiwallet.withdrawals.service import WithdrawalService, view

_STAFF_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_COMMON,
    403: {
        **_PROBLEM,
        "description": "Not an employee's token (caller-not-allowed), no active employee "
        "(staff-not-allowed), or the permission is missing (permission-missing)",
    },
    409: {**_PROBLEM, "description": "Not under review any more, or the key's first request still runs"},
    503: {**_PROBLEM, "description": "staff-admin or the database could not answer; retry (same key)"},
}

staff_router = APIRouter(prefix="/v1/staff", responses=_STAFF_RESPONSES, tags=["staff"])
_review = require_staff(StaffPermission.WITHDRAWAL_REVIEW)


async def _reviewer(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> StaffMember:
    # ``_bearer`` only declares the security scheme in the OpenAPI document.
    return await _review(request)


ReviewerDep = Annotated[StaffMember, Depends(_reviewer)]
ServiceDep = Annotated[WithdrawalService, Depends(_service)]


class RequestedBy(BaseModel):
    issuer: str
    subject: str


class ReviewItemOut(WithdrawalOut):
    requested_by: RequestedBy


class ReviewQueueOut(BaseModel):
    status: Literal["under_review"]
    withdrawals: list[ReviewItemOut]
    next_cursor: str | None


@staff_router.get("/withdrawals", response_model=ReviewQueueOut)
async def review_queue(
    who: ReviewerDep,
    svc: ServiceDep,
    status: Literal["under_review"],
    cursor: Annotated[str | None, Query(pattern=SAGA_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
) -> Any:
    """The withdrawals waiting for a review (above the review threshold), oldest first; pass
    ``next_cursor`` back for more."""
    rows, next_cursor = await svc.under_review_page(cursor, limit)
    items = [
        {
            **view(r),
            "requested_by": {"issuer": r["requested_by_issuer"], "subject": r["requested_by_subject"]},
        }
        for r in rows
    ]
    return {"status": status, "withdrawals": items, "next_cursor": next_cursor}


def _requester(row: Any) -> dict[str, str]:
    return {"issuer": row["requested_by_issuer"], "subject": row["requested_by_subject"]}


async def _decide(decision: str, withdrawal_id: str, request: Request, who: StaffMember) -> Response:
    if not _SAGA.fullmatch(withdrawal_id):
        raise errors.SagaNotFound(f"no withdrawal {withdrawal_id[:64]}")
    principal_scope = f"staff#{who.subject}"  # the employee's keys, apart from any customer's
    answer = await request.app.state.service.review(
        decision, withdrawal_id, who.actor, principal_scope, request.headers.get("idempotency-key")
    )
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return JSONResponse(answer.body, status_code=answer.status, headers=headers)


@staff_router.post(
    "/withdrawals/{withdrawal_id}/release", response_model=WithdrawalOut, openapi_extra=_IDEMPOTENCY_HEADER
)
async def release(withdrawal_id: str, request: Request, who: ReviewerDep) -> Response:
    """Send a withdrawal under review to the bank; the employee is recorded as the reviewer."""
    return await _decide("release", withdrawal_id, request, who)


@staff_router.post(
    "/withdrawals/{withdrawal_id}/cancel", response_model=WithdrawalOut, openapi_extra=_IDEMPOTENCY_HEADER
)
async def cancel(withdrawal_id: str, request: Request, who: ReviewerDep) -> Response:
    """Refuse a withdrawal under review: the debit (fee included) is reversed in the ledger with
    the employee as the actor."""
    return await _decide("cancel", withdrawal_id, request, who)
