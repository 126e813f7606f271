"""wallet-api's staff endpoints that move no money (``/v1/staff/...``): each names the one
permission it needs (contracts.staff.require_staff: the staff issuer verified the token, staff-admin
says who the employee is now). Customer endpoints stay closed to staff (routes.verified_caller).

- ``customer.view``: ``GET /v1/staff/customers?wallet_number=|account_id=|email=``,
  ``GET /v1/staff/accounts/{id}``, ``GET /v1/staff/wallets/{id}/statement``.
- ``customer.contract``: ``POST /v1/staff/accounts/{id}/contract`` (the Contracted tier, on
  recorded evidence).
- Business accounts, ``promo.merchant_accept``: ``POST /v1/staff/business-accounts``,
  ``POST /v1/staff/business-accounts/{id}/members``. The issue names no permission for them and
  the list is fixed; ``promo.merchant_accept`` is the one about businesses and what they may do
  (accepting a business's promo programme), and opening a business or linking its integration
  moves no money. ``customer.view`` is reading by its name; ``staff.manage`` is about employees.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, BeforeValidator, Field, StrictStr

from hiwallet.contracts.public import LineOut, WalletOut
from hiwallet.contracts.staff import StaffMember, StaffPermission, require_staff
from hiwallet.core.text import PrintableText
from hiwallet.ledger import MAX_STATEMENT_PAGE
from hiwallet.wallet_api.domain import ACCOUNT_ID_PATTERN, WALLET_ID_PATTERN, path_id
from hiwallet.wallet_api.routes import (
    _COMMON,
    _PROBLEM,
    AccountOut,
    _bearer,
    _decimal,
    _In,
)
from hiwallet.wallet_api.staff_desk import StaffDesk

BUSINESS_PERMISSION = StaffPermission.PROMO_MERCHANT_ACCEPT

_STAFF_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_COMMON,
    403: {
        **_PROBLEM,
        "description": "Not an employee's token (caller-not-allowed), no active employee "
        "(staff-not-allowed), or the permission is missing (permission-missing)",
    },
    503: {**_PROBLEM, "description": "staff-admin (or a dependency) could not answer; retry"},
}

staff_router = APIRouter(prefix="/v1/staff", responses=_STAFF_RESPONSES, tags=["staff"])


def _staff(permission: StaffPermission) -> Any:
    check = require_staff(permission)

    async def dependency(
        request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> StaffMember:
        # ``_bearer`` only declares the security scheme in the OpenAPI document.
        return await check(request)

    return Depends(dependency)


Viewer = Annotated[StaffMember, _staff(StaffPermission.CUSTOMER_VIEW)]
BusinessClerk = Annotated[StaffMember, _staff(BUSINESS_PERMISSION)]
Contractor = Annotated[StaffMember, _staff(StaffPermission.CUSTOMER_CONTRACT)]


async def _desk(request: Request) -> StaffDesk:
    desk: StaffDesk = request.app.state.staff_desk
    return desk


DeskDep = Annotated[StaffDesk, Depends(_desk)]
# A malformed id is the 404 of a missing one (docs/wallet-api.md), checked in the endpoint, so
# after the employee's token and permission: no answer about ids to anyone else.
AccountIdPath = Annotated[str, Path(json_schema_extra={"pattern": ACCOUNT_ID_PATTERN})]
WalletIdPath = Annotated[str, Path(json_schema_extra={"pattern": WALLET_ID_PATTERN})]


class MemberOut(BaseModel):
    issuer: str
    subject: str
    added_by: str
    added_at: datetime


class StaffAccountOut(AccountOut):
    opened_by: str | None
    members: list[MemberOut]


class StaffAccountsOut(BaseModel):
    accounts: list[StaffAccountOut]


class StaffAccountBalancesOut(StaffAccountOut):
    wallets: list[WalletOut]  # type: ignore[assignment]  # with balances here


class StaffLineOut(LineOut):
    actor: str | None = Field(description="Who made the movement: staff:<sub>, customer:<sub>, client:…")


class StaffStatementOut(BaseModel):
    wallet_id: str
    account_id: str
    purse: Literal["cash", "promo"]
    lines: list[StaffLineOut]
    next_cursor: str | None


class BusinessIn(_In):
    name: Annotated[PrintableText, Field(min_length=1, max_length=200)]


class MemberIn(_In):
    client_id: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9._\-]{1,255}$")] | None = Field(
        default=None, description="A client of the customer realm (a merchant integration)."
    )
    subject: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9._:@\-]{1,255}$")] | None = Field(
        default=None,
        description="Instead of client_id: the identity's sub (an identity provider "
        "that does not derive a service account's sub from its client).",
    )


class ContractIn(_In):
    evidence: Literal["remote_identity_verification", "signed_agreement"] = Field(
        description="What the Contracted tier is set on: a remote identity verification or a "
        "signed agreement."
    )
    reference: Annotated[PrintableText, Field(min_length=1, max_length=200)] = Field(
        description="The evidence's own reference (the verification's id, the agreement's number)."
    )


class ContractOut(BaseModel):
    evidence: Literal["remote_identity_verification", "signed_agreement"]
    evidence_ref: str
    previous_tier: Literal["unknown", "unverified", "verified"]
    recorded_by: str = Field(description="The employee who recorded it: staff:<sub>.")
    recorded_at: datetime


class StaffContractedOut(StaffAccountOut):
    contract: ContractOut | None = Field(
        description="The record the tier was raised on; null for an account contracted before "
        "records were kept."
    )


@staff_router.get("/customers", response_model=StaffAccountsOut)
async def find_customers(
    who: Viewer,
    desk: DeskDep,
    wallet_number: Annotated[str | None, Query(max_length=64)] = None,
    account_id: Annotated[str | None, Query(max_length=200)] = None,
    email: Annotated[str | None, Query(max_length=320)] = None,
) -> Any:
    """Find a customer's accounts by exactly one of: a wallet number, an account id, an e-mail
    address (through the customer realm's admin API). Nothing found: an empty list."""
    return await desk.find(who.actor, wallet_number=wallet_number, account_id=account_id, email=email)


@staff_router.get("/accounts/{account_id}", response_model=StaffAccountBalancesOut)
async def staff_account(
    who: Viewer,
    desk: DeskDep,
    account_id: AccountIdPath,
) -> Any:
    """Any account: its members (who added them), wallets and balances; no membership needed."""
    return await desk.account(who.actor, path_id(account_id, "account"))


@staff_router.get("/wallets/{wallet_id}/statement", response_model=StaffStatementOut)
async def staff_statement(
    who: Viewer,
    desk: DeskDep,
    wallet_id: WalletIdPath,
    purse: Literal["cash", "promo"] = "cash",
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_STATEMENT_PAGE), BeforeValidator(_decimal)] = 50,
) -> Any:
    """Any wallet's movements, with the actor of each (an employee's: ``staff:<sub>``)."""
    return await desk.statement(
        who.actor, path_id(wallet_id, "wallet"), purse=purse, cursor=cursor, limit=limit
    )


@staff_router.post("/business-accounts", response_model=StaffAccountOut, status_code=201)
async def open_business(who: BusinessClerk, desk: DeskDep, body: BusinessIn) -> JSONResponse:
    """Open a business account with a TRY wallet (``hiwallet business open`` over HTTP)."""
    return JSONResponse(await desk.open_business(who.actor, body.name), status_code=201)


@staff_router.post("/business-accounts/{account_id}/members", response_model=StaffAccountOut)
async def link_business(who: BusinessClerk, desk: DeskDep, account_id: AccountIdPath, body: MemberIn) -> Any:
    """Make a merchant integration (its service account) a member of a business account
    (``hiwallet business link`` over HTTP). Linking it again changes nothing."""
    return await desk.link(
        who.actor, path_id(account_id, "account"), client_id=body.client_id, subject=body.subject
    )


@staff_router.post("/accounts/{account_id}/contract", response_model=StaffContractedOut)
async def contract_account(
    who: Contractor, desk: DeskDep, account_id: AccountIdPath, body: ContractIn
) -> Any:
    """Raise a personal account to the Contracted tier, recording the evidence (which kind, its
    reference) and the employee. Once: an account contracted already is answered as it is, with
    its record; a business account is 422 ``not-a-personal-account``."""
    return await desk.contract(who.actor, path_id(account_id, "account"), body.evidence, body.reference)
