"""wallet-api's staff endpoints that move money or decide who may. Each names the one
permission it needs (contracts.staff.require_staff: a staff-realm token, then staff-admin's GET /v1/me
asked live); a customer token is refused as staff are on customer endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import AwareDatetime, BaseModel, Field

from hiwallet.contracts.currency import Currency
from hiwallet.contracts.public import Amount, Name, ProgrammeOut, ProgrammesOut, Reference, WalletId
from hiwallet.contracts.staff import StaffMember, StaffPermission
from hiwallet.core.text import PrintableText
from hiwallet.wallet_api.idempotency import Answer
from hiwallet.wallet_api.routes import (
    _IDEMPOTENCY_HEADER,
    _REPLAYED,
    ServiceDep,
    TransferOut,
    _answer,
    _In,
)

# one way for every staff endpoint: the dependency naming the permission, the 403/503 answers
from hiwallet.wallet_api.staff_routes import _STAFF_RESPONSES, _staff

__all__ = ["staff_money_router"]

PromoStaff = Annotated[StaffMember, _staff(StaffPermission.PROMO_STAFF)]
CampaignsView = Annotated[StaffMember, _staff(StaffPermission.CAMPAIGNS_VIEW)]
CampaignsManage = Annotated[StaffMember, _staff(StaffPermission.CAMPAIGNS_MANAGE)]
MerchantAccept = Annotated[StaffMember, _staff(StaffPermission.PROMO_MERCHANT_ACCEPT)]
Goodwill = Annotated[StaffMember, _staff(StaffPermission.CREDIT_GOODWILL)]
Invoices = Annotated[StaffMember, _staff(StaffPermission.FINANCE_INVOICES)]
Cursor = Annotated[str | None, Query(pattern=r"^[0-9a-f\-]{36}$")]
Limit = Annotated[int, Query(ge=1, le=200)]


def _key(request: Request) -> str | None:
    return request.headers.get("idempotency-key")


class StaffPromoIn(_In):
    wallet: WalletId
    amount_minor: Amount
    currency: Currency = "TRY"
    expires_at: AwareDatetime
    reference: Reference | None = None


class CampaignIn(_In):
    name: Name
    currency: Currency = "TRY"
    budget_minor: Amount
    ends_at: AwareDatetime = Field(description="No grant under the campaign after it.")


class CampaignGrantIn(_In):
    wallet: WalletId
    amount_minor: Amount
    expires_at: AwareDatetime
    reference: Reference | None = None


class CampaignOut(BaseModel):
    id: str
    name: str
    currency: str
    budget_minor: int
    remaining_minor: int
    ends_at: datetime
    created_by: str
    created_at: datetime


class CampaignsOut(BaseModel):
    campaigns: list[CampaignOut]
    next_cursor: str | None


class CampaignGrantOut(TransferOut):
    campaign: str
    campaign_remaining_minor: int


class DecisionIn(_In):
    reason: Annotated[PrintableText, Field(min_length=1, max_length=500)] | None = None


class GoodwillIn(_In):
    wallet: WalletId
    amount_minor: Amount
    reason: Annotated[PrintableText, Field(min_length=1, max_length=500)]


class GoodwillOut(BaseModel):
    id: str
    wallet: str
    amount_minor: int
    currency: str
    reason: str
    status: Literal["pending", "posted"]
    requested_by: str
    requested_at: datetime
    approved_by: str | None
    approved_at: datetime | None
    transaction_id: str | None


class GoodwillListOut(BaseModel):
    goodwill_credits: list[GoodwillOut]
    next_cursor: str | None


class InvoiceIn(_In):
    provider: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_\-]{0,30}$", description="stripe, bank …")]
    invoice_number: Annotated[
        str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._/\-]*$")
    ]
    amount_minor: Amount
    currency: Currency = "TRY"
    period: Annotated[
        str | None,
        Field(
            pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])$",
            description="The month the invoice bills, YYYY-MM (default: last month); reconciliation "
            "finds a month of gross-model payouts with no invoice late.",
        ),
    ] = None


class InvoiceOut(BaseModel):
    transaction_id: str
    provider: str
    invoice_number: str
    amount_minor: int
    currency: str
    period: str
    posted_at: datetime


staff_money_router = APIRouter(prefix="/v1/staff", responses=_STAFF_RESPONSES, tags=["staff"])
_MONEY: dict[str, Any] = {"openapi_extra": _IDEMPOTENCY_HEADER}


def _out(answer: Answer) -> Response:
    return _answer(answer)


@staff_money_router.post(
    "/promos", response_model=TransferOut, status_code=201, responses={201: {"headers": _REPLAYED}}, **_MONEY
)
async def staff_promo(body: StaffPromoIn, request: Request, member: PromoStaff, svc: ServiceDep) -> Response:
    """Platform-funded promo to a customer's wallet (promo_expense −, customer promo +); what is
    left at expiry goes to promo_breakage. Capped per employee and day."""
    answer = await svc.staff.grant_promo(
        member,
        _key(request),
        wallet=body.wallet,
        amount=body.amount_minor,
        currency=body.currency,
        expires_at=body.expires_at,
        reference=body.reference,
    )
    return _out(answer)


@staff_money_router.post(
    "/campaigns",
    response_model=CampaignOut,
    status_code=201,
    responses={201: {"headers": _REPLAYED}},
    **_MONEY,
)
async def create_campaign(
    body: CampaignIn, request: Request, member: CampaignsManage, svc: ServiceDep
) -> Response:
    """A campaign with a budget that grants under it never overspend. Under the key once: a
    double submission answers the first campaign."""
    answer = await svc.staff.create_campaign(
        member,
        _key(request),
        name=body.name,
        currency=body.currency,
        budget=body.budget_minor,
        ends_at=body.ends_at,
    )
    return _out(answer)


@staff_money_router.get("/campaigns", response_model=CampaignsOut)
async def campaigns(_member: CampaignsView, svc: ServiceDep, cursor: Cursor = None, limit: Limit = 50) -> Any:
    """Campaigns, newest first; pass ``next_cursor`` back for more."""
    return await svc.staff.campaigns(cursor=cursor, limit=limit)


@staff_money_router.get("/campaigns/{campaign_id}", response_model=CampaignOut)
async def campaign(campaign_id: str, _member: CampaignsView, svc: ServiceDep) -> Any:
    return await svc.staff.campaign(campaign_id)


@staff_money_router.post(
    "/campaigns/{campaign_id}/grants",
    response_model=CampaignGrantOut,
    status_code=201,
    responses={201: {"headers": _REPLAYED}},
    **_MONEY,
)
async def campaign_grant(
    campaign_id: str, body: CampaignGrantIn, request: Request, member: CampaignsManage, svc: ServiceDep
) -> Response:
    """Grant promo under the campaign, taken from its budget in the same transaction."""
    answer = await svc.staff.campaign_grant(
        member,
        _key(request),
        campaign_id,
        wallet=body.wallet,
        amount=body.amount_minor,
        expires_at=body.expires_at,
        reference=body.reference,
    )
    return _out(answer)


@staff_money_router.get("/promo-programmes", response_model=ProgrammesOut)
async def programmes(
    _member: MerchantAccept,
    svc: ServiceDep,
    status: Literal["proposed", "accepted", "refused"] | None = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> Any:
    """Businesses' promo programmes (``status=proposed``: the ones waiting for a decision)."""
    return await svc.staff.programmes(status=status, cursor=cursor, limit=limit)


@staff_money_router.get("/promo-programmes/{programme_id}", response_model=ProgrammeOut)
async def programme(programme_id: str, _member: MerchantAccept, svc: ServiceDep) -> Any:
    return await svc.staff.programme(programme_id)


@staff_money_router.post("/promo-programmes/{programme_id}/accept", response_model=ProgrammeOut)
async def accept_programme(
    programme_id: str, body: DecisionIn, member: MerchantAccept, svc: ServiceDep
) -> Any:
    """Accept, once: the business may then grant under it."""
    return await svc.staff.decide_programme(member, programme_id, accept=True, reason=body.reason)


@staff_money_router.post("/promo-programmes/{programme_id}/refuse", response_model=ProgrammeOut)
async def refuse_programme(
    programme_id: str, body: DecisionIn, member: MerchantAccept, svc: ServiceDep
) -> Any:
    """Refuse, once: nothing is ever granted under it."""
    return await svc.staff.decide_programme(member, programme_id, accept=False, reason=body.reason)


@staff_money_router.post(
    "/goodwill-credits",
    response_model=GoodwillOut,
    status_code=201,
    responses={
        201: {"headers": _REPLAYED, "description": "Posted (at or below the approval threshold)"},
        202: {
            "model": GoodwillOut,
            "description": "Pending: above the threshold, a second employee approves",
        },
    },
    **_MONEY,
)
async def goodwill(body: GoodwillIn, request: Request, member: Goodwill, svc: ServiceDep) -> Response:
    """Credit a customer's cash from the platform's goodwill expense, with a reason."""
    answer = await svc.staff.request_goodwill(
        member, _key(request), wallet=body.wallet, amount=body.amount_minor, reason=body.reason
    )
    return _out(answer)


@staff_money_router.get("/goodwill-credits", response_model=GoodwillListOut)
async def goodwill_credits(
    _member: Goodwill,
    svc: ServiceDep,
    status: Literal["pending", "posted"] | None = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> Any:
    return await svc.staff.goodwill_credits(status=status, cursor=cursor, limit=limit)


@staff_money_router.get("/goodwill-credits/{credit_id}", response_model=GoodwillOut)
async def goodwill_credit(credit_id: str, _member: Goodwill, svc: ServiceDep) -> Any:
    return await svc.staff.goodwill(credit_id)


@staff_money_router.post("/goodwill-credits/{credit_id}/approve", response_model=GoodwillOut)
async def approve_goodwill(credit_id: str, member: Goodwill, svc: ServiceDep) -> Any:
    """The second employee's approval posts a pending credit; never the requester's own."""
    return await svc.staff.approve_goodwill(member, credit_id)


@staff_money_router.post(
    "/provider-invoices",
    response_model=InvoiceOut,
    status_code=201,
    responses={201: {"headers": _REPLAYED}},
    **_MONEY,
)
async def provider_invoice(body: InvoiceIn, request: Request, member: Invoices, svc: ServiceDep) -> Response:
    """A provider's invoice paid from our bank account: provider_expense −amount, nostro +amount.
    One posting per (provider, invoice number), whoever enters it; another amount under the
    same number is 409 ``invoice-entered-otherwise``."""
    answer = await svc.staff.enter_invoice(
        member,
        _key(request),
        provider=body.provider,
        invoice_number=body.invoice_number,
        amount=body.amount_minor,
        currency=body.currency,
        period=body.period,
    )
    return _out(answer)
