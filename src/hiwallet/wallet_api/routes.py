"""wallet-api's HTTP routes: they only translate between HTTP and the service."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, StrictStr

from hiwallet.core.auth import bearer_token
from hiwallet.core.http import PROBLEM_CONTENT_TYPE, FastJSONResponse, LeanRoute, json_body, json_body_openapi
from hiwallet.ledger import MAX_AMOUNT_MINOR, MAX_STATEMENT_PAGE
from hiwallet.wallet_api import errors
from hiwallet.wallet_api.domain import (
    ACCOUNT_ID_PATTERN,
    TRANSFER_ID_PATTERN,
    WALLET_ID_PATTERN,
    WALLET_NUMBER_PATTERN,
    Caller,
    Tier,
)
from hiwallet.wallet_api.service import Answer, WalletService

# ---------------------------------------------------------------------------------------------
# Models: what goes in and comes out, as the OpenAPI document shows it
# ---------------------------------------------------------------------------------------------

Amount = Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT_MINOR, description="Minor units (kuruş, cents).")]
Currency = Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code.")]
Reference = Annotated[StrictStr, Field(min_length=1, max_length=140)]
WalletId = Annotated[StrictStr, Field(pattern=WALLET_ID_PATTERN)]
WalletNumber = Annotated[
    StrictStr, Field(pattern=WALLET_NUMBER_PATTERN, description="16 digits, the last a Luhn check digit.")
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpenPersonalIn(_In):
    subject: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9._:@\-]{1,255}$")] = Field(
        description="The customer's user id (the `sub` of their tokens) in the customer realm."
    )


class TierIn(_In):
    tier: Tier


class OpenWalletIn(_In):
    currency: Currency


class TransferIn(_In):
    from_wallet: WalletId
    to_wallet_number: WalletNumber
    amount: Amount
    currency: Currency = "TRY"
    reference: Reference | None = None


class PromoIn(_In):
    from_wallet: WalletId
    to_wallet_number: WalletNumber
    amount: Amount
    currency: Currency = "TRY"
    expires_at: AwareDatetime
    reference: Reference | None = None


class RefundIn(_In):
    reference: Reference | None = None


class WalletRefOut(BaseModel):
    id: str
    number: str
    currency: str


class AccountOut(BaseModel):
    id: str
    kind: Literal["personal", "business"]
    tier: Tier | None
    name: str | None
    created_at: datetime
    wallets: list[WalletRefOut]


class AccountsOut(BaseModel):
    accounts: list[AccountOut]


class WalletOut(WalletRefOut):
    account_id: str
    cash: int
    promo: int
    held: int
    available: int


class LineOut(BaseModel):
    transaction_id: str
    type: str
    reference: str
    amount: int
    currency: str
    balance_after: int
    version: int
    posted_at: datetime


class StatementOut(BaseModel):
    wallet_id: str
    purse: Literal["cash", "promo"]
    lines: list[LineOut]
    next_cursor: str | None


class PromoBatchOut(BaseModel):
    id: str
    funded_by: str
    amount: int
    remaining: int
    expires_at: datetime
    grant_transaction_id: str


class PromoBatchesOut(BaseModel):
    wallet_id: str
    batches: list[PromoBatchOut]


class LegOut(BaseModel):
    account: str
    wallet: str | None
    purse: Literal["cash", "promo"] | None
    role: str
    amount: int
    currency: str


class TransferOut(BaseModel):
    id: str
    type: str
    status: Literal["posted"]
    from_wallet: str | None
    to_wallet: str | None
    amount: int
    currency: str
    fee: int
    promo_used: int
    reference: str
    refund_of: str | None
    posted_at: datetime
    legs: list[LegOut]
    expires_at: datetime | None = None


class Problem(BaseModel):
    """RFC 9457 problem details; extra members carry what a client needs (e.g. ``balance``)."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


_PROBLEM = {
    "model": Problem,
    "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
}
_COMMON: dict[int | str, dict[str, Any]] = {
    400: {**_PROBLEM, "description": "Bad request (e.g. a missing or malformed Idempotency-Key)"},
    401: {**_PROBLEM, "description": "No valid access token"},
    403: {**_PROBLEM, "description": "This caller (staff, a non-onboarding client) or tier may not do this"},
    404: {**_PROBLEM, "description": "Not found, or not the caller's"},
    409: {**_PROBLEM, "description": "In conflict (request with this key still running, refunded, tier)"},
    413: {**_PROBLEM, "description": "Body too large"},
    422: {**_PROBLEM, "description": "Refused: invalid input, funds, limits, tier, key reused"},
    503: {**_PROBLEM, "description": "A dependency is not reachable; retry with the same key"},
}
_IDEMPOTENCY_HEADER = {
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": True,
            "description": "A unique key per operation (a UUID). The same key with the same body answers the "
            "first answer for 48 hours; with another body 422; while the first runs 409.",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        }
    ]
}
_REPLAYED = {
    "Idempotent-Replayed": {"description": "true when this is a stored answer", "schema": {"type": "string"}}
}

# ---------------------------------------------------------------------------------------------
# The caller
# ---------------------------------------------------------------------------------------------

_bearer = HTTPBearer(
    auto_error=False, bearerFormat="JWT", description="An access token with audience hiwallet-api."
)


async def verified_caller(request: Request) -> Caller:
    """The verified caller. Customer-realm tokens only: a staff token is refused on every
    customer endpoint (staff endpoints come with the staff side)."""
    principal = await request.app.state.verifier.verify(bearer_token(request))
    if principal.kind != "customer":
        raise errors.StaffNotAllowed("staff tokens are not accepted on customer endpoints")
    return Caller(principal.issuer, principal.subject, principal.azp, principal.is_service_account)


async def caller(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    # ``_bearer`` only declares the security scheme in the OpenAPI document.
    return await verified_caller(request)


def service_of(request: Request) -> WalletService:
    svc: WalletService = request.app.state.service
    return svc


async def service(request: Request) -> WalletService:
    # async on purpose: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop
    # (and two context switches) on every request for one attribute read.
    return service_of(request)


CallerDep = Annotated[Caller, Depends(caller)]
ServiceDep = Annotated[WalletService, Depends(service)]
AccountIdPath = Annotated[str, Path(pattern=ACCOUNT_ID_PATTERN)]
WalletIdPath = Annotated[str, Path(pattern=WALLET_ID_PATTERN)]
TransferIdPath = Annotated[str, Path(pattern=TRANSFER_ID_PATTERN)]


def _answer(answer: Answer) -> Response:
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return FastJSONResponse(answer.body, status_code=answer.status, headers=headers)


def _moves_money(model: type[BaseModel], *, reads_caller: bool = True) -> dict[str, Any]:
    """The document of a money-moving route. These routes read the body and the key themselves
    (``json_body``), and the lean ones the caller too (``verified_caller``): FastAPI's
    dependency solving and body parsing cost a fifth of wallet-api's CPU per transfer (bench/).
    Their answers are the same; the OpenAPI document says by hand what the parameters said."""
    security: dict[str, Any] = {"security": [{"HTTPBearer": []}]} if reads_caller else {}
    return {**_IDEMPOTENCY_HEADER, **json_body_openapi(model), **security}


def _idempotency_key(request: Request) -> str | None:
    return request.headers.get("idempotency-key")


router = APIRouter(prefix="/v1", responses=_COMMON)
# The hot money-moving routes, without path parameters: their endpoints take the request alone
# and FastAPI calls them without its request handler (core.http.LeanRoute). Included first, so
# they are also matched first.
lean_router = APIRouter(prefix="/v1", responses=_COMMON, route_class=LeanRoute)


@router.post(
    "/accounts/personal",
    response_model=AccountOut,
    status_code=201,
    responses={200: {"model": AccountOut, "description": "The person's account existed already"}},
    tags=["accounts"],
)
async def open_personal(body: OpenPersonalIn, who: CallerDep, svc: ServiceDep) -> JSONResponse:
    """Open a personal account (tier unknown) with a TRY wallet. Onboarding's client only; the
    customer named becomes its member. One per person: asked again, it answers the account."""
    view, created = await svc.open_personal(who, body.subject)
    return JSONResponse(view, status_code=201 if created else 200)


@router.put("/accounts/{account_id}/tier", response_model=AccountOut, tags=["accounts"])
async def raise_tier(account_id: AccountIdPath, body: TierIn, who: CallerDep, svc: ServiceDep) -> Any:
    """Raise a personal account's tier (it only goes up). Onboarding's client only."""
    return await svc.raise_tier(who, account_id, body.tier)


@router.get("/accounts", response_model=AccountsOut, tags=["accounts"])
async def list_accounts(who: CallerDep, svc: ServiceDep) -> Any:
    """The accounts the caller is a member of."""
    return {"accounts": await svc.accounts(who)}


@router.get("/accounts/{account_id}", response_model=AccountOut, tags=["accounts"])
async def get_account(account_id: AccountIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    return await svc.account(who, account_id)


@router.post(
    "/accounts/{account_id}/wallets",
    response_model=WalletOut,
    status_code=201,
    responses={200: {"model": WalletOut, "description": "The account's wallet of that currency existed"}},
    tags=["wallets"],
)
async def open_wallet(
    account_id: AccountIdPath, body: OpenWalletIn, who: CallerDep, svc: ServiceDep
) -> JSONResponse:
    """Open the account's wallet of another currency (one per currency)."""
    view, created = await svc.open_wallet(who, account_id, body.currency)
    return JSONResponse(view, status_code=201 if created else 200)


@router.get("/wallets/{wallet_id}", response_model=WalletOut, tags=["wallets"])
async def get_wallet(wallet_id: WalletIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    """Balances: cash, promo, held, and available (cash − held + promo)."""
    return await svc.wallet(who, wallet_id)


@router.get("/wallets/{wallet_id}/statement", response_model=StatementOut, tags=["wallets"])
async def statement(
    wallet_id: WalletIdPath,
    who: CallerDep,
    svc: ServiceDep,
    purse: Literal["cash", "promo"] = "cash",
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_STATEMENT_PAGE)] = 50,
) -> Any:
    """The movements of the wallet's cash (or promo) in order; pass ``next_cursor`` back for more."""
    return await svc.statement(who, wallet_id, purse=purse, cursor=cursor, limit=limit)


@router.get("/wallets/{wallet_id}/promos", response_model=PromoBatchesOut, tags=["promos"])
async def promo_batches(wallet_id: WalletIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    """The wallet's promo batches, earliest expiry first."""
    return await svc.promos(who, wallet_id)


@lean_router.post(
    "/transfers",
    response_model=TransferOut,
    status_code=201,
    responses={201: {"headers": _REPLAYED}},
    openapi_extra=_moves_money(TransferIn),
    tags=["transfers"],
)
async def transfer(request: Request) -> Response:
    """Move money to the wallet with this number: p2p (personal to personal), payment (personal to
    business, with the fee; promo is spent first), B2P or B2B (from a business)."""
    who = await verified_caller(request)
    body = await json_body(request, TransferIn)
    answer = await service_of(request).transfer(
        who,
        _idempotency_key(request),
        from_wallet=body.from_wallet,
        to_wallet_number=body.to_wallet_number,
        amount=body.amount,
        currency=body.currency,
        reference=body.reference,
    )
    return _answer(answer)


@router.get("/transfers/{transfer_id}", response_model=TransferOut, tags=["transfers"])
async def get_transfer(transfer_id: TransferIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    """A transfer with its legs, for a member of any wallet in it."""
    return await svc.transfer_of(who, transfer_id)


@router.post(
    "/transfers/{transfer_id}/refund",
    response_model=TransferOut,
    status_code=201,
    responses={201: {"headers": _REPLAYED}},
    openapi_extra=_moves_money(RefundIn, reads_caller=False),
    tags=["transfers"],
)
async def refund(transfer_id: TransferIdPath, request: Request, who: CallerDep, svc: ServiceDep) -> Response:
    """Refund a payment the caller's business received: every leg negated, once."""
    # The caller as a dependency, as on the other routes with path parameters: a request with
    # no valid token is 401 before its path is looked at.
    body = await json_body(request, RefundIn)
    return _answer(await svc.refund(who, _idempotency_key(request), transfer_id, body.reference))


@lean_router.post(
    "/promos",
    response_model=TransferOut,
    status_code=201,
    responses={201: {"headers": _REPLAYED}},
    openapi_extra=_moves_money(PromoIn),
    tags=["promos"],
)
async def grant_promo(request: Request) -> Response:
    """A business gives promo money to a customer's wallet; what is left at expiry returns."""
    who = await verified_caller(request)
    body = await json_body(request, PromoIn)
    answer = await service_of(request).promo_grant(
        who,
        _idempotency_key(request),
        from_wallet=body.from_wallet,
        to_wallet_number=body.to_wallet_number,
        amount=body.amount,
        currency=body.currency,
        expires_at=body.expires_at,
        reference=body.reference,
    )
    return _answer(answer)
