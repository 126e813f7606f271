"""wallet-api's HTTP routes: they only translate between HTTP and the service."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr
from starlette.convertors import Convertor, register_url_convertor

from hiwallet.contracts import public
from hiwallet.contracts.currency import Currency, declare_currencies
from hiwallet.contracts.public import MAX_AMOUNT_MINOR as PUBLIC_MAX_AMOUNT_MINOR
from hiwallet.contracts.public import (
    PROGRAMME_ID_PATTERN,
    BalanceHistoryOut,
    LineOut,
    PostedTransfer,
    Problem,
    ProgrammeIn,
    ProgrammeOut,
    ProgrammesOut,
    PromoBatchesOut,
    RefundIn,
    TransferIn,
    WalletOut,
    WalletOverviewOut,
    WalletRefOut,
)
from hiwallet.core.auth import CallerNotAllowed, bearer_token
from hiwallet.core.http import (
    PROBLEM_CONTENT_TYPE,
    FastJSONResponse,
    LeanRoute,
    document_models,
    json_body,
    json_body_openapi,
    query_params,
)
from hiwallet.core.http.idempotency import IDEMPOTENCY_KEY_PATTERN
from hiwallet.ledger import MAX_AMOUNT_MINOR, MAX_BALANCE_DAYS, MAX_STATEMENT_PAGE
from hiwallet.wallet_api.domain import (
    ACCOUNT_ID_PATTERN,
    TRANSFER_ID_PATTERN,
    WALLET_ID_PATTERN,
    Caller,
    Tier,
    path_id,
)
from hiwallet.wallet_api.idempotency import Answer
from hiwallet.wallet_api.service import WalletService

# ---------------------------------------------------------------------------------------------
# Models: what goes in and comes out, as the OpenAPI document shows it
# ---------------------------------------------------------------------------------------------


# The ledger's bound is the one the shapes (contracts.public's, the front APIs' too) document:
# refused at start if they drift apart, not as a 500 in a transfer.
if MAX_AMOUNT_MINOR != PUBLIC_MAX_AMOUNT_MINOR:
    raise RuntimeError(f"the ledger's MAX_AMOUNT_MINOR {MAX_AMOUNT_MINOR} is not the contract's")


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpenPersonalIn(_In):
    subject: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9._:@\-]{1,255}$")] = Field(
        description="The customer's user id (the `sub` of their tokens) in the customer realm."
    )


class TierIn(_In):
    tier: Tier


class OpenWalletIn(_In):
    # The document's enum of currencies is the service's own setting (``document``); a code of
    # the right shape that is not supported is 422 ``unsupported-currency`` with the supported ones.
    currency: Currency


class PromoIn(public.PromoIn):
    # contracts.public's, the programme described with where it comes from (wallet-api's document
    # says more than business-api's); the field keeps its place.
    programme: Annotated[
        StrictStr,
        Field(
            pattern=PROGRAMME_ID_PATTERN,
            description="An accepted promo programme of the granting business (POST /v1/promo-programmes).",
        ),
    ]


class AccountOut(BaseModel):
    id: str
    kind: Literal["personal", "business"]
    tier: Tier | None
    name: str | None
    created_at: datetime
    wallets: list[WalletRefOut]


class AccountsOut(BaseModel):
    accounts: list[AccountOut]


class StatementOut(BaseModel):
    wallet_id: str
    purse: Literal["cash", "promo"]
    lines: list[LineOut]
    next_cursor: str | None


class LegOut(BaseModel):
    account: str
    wallet: str | None
    purse: Literal["cash", "promo"] | None
    role: str
    amount: int
    currency: str


class TransferOut(PostedTransfer):
    # contracts.public's, with the ledger legs (a client's view drops them); ``expires_at`` last.
    legs: list[LegOut]
    expires_at: datetime | None = None


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
            "description": "A unique key per operation (a UUID): 1 to 255 visible ASCII characters, bare or "
            'quoted ("…", an sf-string, the same key). The same key with the same body answers the '
            "first answer for 48 hours; with another body 422; while the first runs 409.",
            "schema": {
                "type": "string",
                "minLength": 1,
                "maxLength": 257,
                "pattern": IDEMPOTENCY_KEY_PATTERN,
            },
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
        raise CallerNotAllowed("staff tokens are not accepted on customer endpoints")
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


# ---------------------------------------------------------------------------------------------
# Ids in paths
# ---------------------------------------------------------------------------------------------
# An id in a path that is malformed names nothing: 404 ``not-found``, the very answer of a
# missing one (docs/wallet-api.md, the 404 rule), saying nothing of the id's form (a path
# parameter with a pattern answered 422 with the pattern). Each id is read by a dependency that
# first needs the caller, so a request without a valid token is 401 before its path is looked
# at. The document still states the form, as a schema (``pattern``).


async def _account_id(
    account_id: Annotated[str, Path(json_schema_extra={"pattern": ACCOUNT_ID_PATTERN})], _who: CallerDep
) -> str:
    return path_id(account_id, "account")


async def _wallet_id(
    wallet_id: Annotated[str, Path(json_schema_extra={"pattern": WALLET_ID_PATTERN})], _who: CallerDep
) -> str:
    return path_id(wallet_id, "wallet")


async def _transfer_id(
    transfer_id: Annotated[str, Path(json_schema_extra={"pattern": TRANSFER_ID_PATTERN})], _who: CallerDep
) -> str:
    return path_id(transfer_id, "transfer")


AccountIdPath = Annotated[str, Depends(_account_id)]
WalletIdPath = Annotated[str, Depends(_wallet_id)]
TransferIdPath = Annotated[str, Depends(_transfer_id)]


class _NotPersonal(Convertor[str]):
    """An account id's segment: any but ``personal``, which names the route beside it
    (``POST /v1/accounts/personal``). Without it, ``GET /v1/accounts/personal`` was taken for
    an account id (then 422 with the pattern, now it would be 404); it is a method that path
    does not have: 405, with ``Allow``."""

    regex = r"(?!personal$)[^/]+"  # "$": the whole path ends there (/accounts/personal/tier is an id)

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


# Starlette's registry is global: the name is ours alone.
register_url_convertor("hiwallet_account_id", _NotPersonal())
ACCOUNT = "{account_id:hiwallet_account_id}"


def _decimal(value: object) -> object:
    # A number in a query is its digits: pydantic's own reading of a string also takes " 5\n",
    # "+5", "5.0" and "5_0" (fifty), none of them what the document's integer says.
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("Input should be a whole number written in digits")
    return value


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
# The hot routes: the money-moving ones and the hot reads. Their endpoints take the request alone
# and FastAPI calls them without its request handler (core.http.LeanRoute); the app serves them
# on the hot lane (core.http.hot). Included first, so they are also matched first.
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


@router.put(f"/accounts/{ACCOUNT}/tier", response_model=AccountOut, tags=["accounts"])
async def raise_tier(account_id: AccountIdPath, body: TierIn, who: CallerDep, svc: ServiceDep) -> Any:
    """Raise a personal account's tier (it only goes up) to unverified or verified. Onboarding's
    client only; Contracted is 403 ``contract-required`` (staff raise it on evidence)."""
    return await svc.raise_tier(who, account_id, body.tier)


@router.get("/accounts", response_model=AccountsOut, tags=["accounts"])
async def list_accounts(who: CallerDep, svc: ServiceDep) -> Any:
    """The accounts the caller is a member of."""
    return {"accounts": await svc.accounts(who)}


@router.get(f"/accounts/{ACCOUNT}", response_model=AccountOut, tags=["accounts"])
async def get_account(account_id: AccountIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    return await svc.account(who, account_id)


@router.post(
    f"/accounts/{ACCOUNT}/wallets",
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


def _read_answer(view: dict[str, Any]) -> Response:
    """A hot read's answer as the service built it, rendered by orjson. The service's views are
    built field for field as the route's response model (JSON's own types, times as ts() writes
    them, which is how the model would write them again), so the model's validation and
    re-serialisation of every answer is skipped: for a statement page of 50 lines they took about
    210 µs of CPU (the model's validation 115, the standard library's JSON 97) where orjson takes
    7 µs (measured in a loop), a sixth of wallet-api's CPU per page (bench/read_bench.py). The
    document keeps the models, and tests/wallet_api/test_contract.py holds the answers to them."""
    return FastJSONResponse(view)


# The hot reads (issue 26): lean routes on the hot lane (core.http.hot, a path with one id
# segment), so a read skips the stack's middleware, the router's matching and FastAPI's
# dependency solving. Each reads what the plain routes' dependencies and parameters read, in
# their order and with their answers: the caller (401 first), the wallet id (404 for a malformed
# one, saying nothing of its form), the query (422 naming each field, ``query_params``). The
# document says what the parameters said (``_read_openapi``; tests/wallet_api/test_contract.py
# holds the answers to it).
_WALLET_ID_PARAMETER: dict[str, Any] = {
    "name": "wallet_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": WALLET_ID_PATTERN, "title": "Wallet Id"},
}


# Frozen: query_params keeps a frozen model's answer for the next request with the same query.
class _StatementQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    purse: Literal["cash", "promo"] = "cash"
    cursor: Annotated[str | None, Field(pattern=r"^[0-9]{1,18}$")] = None
    limit: Annotated[int, Field(ge=1, le=MAX_STATEMENT_PAGE), BeforeValidator(_decimal)] = 50


class _DaysQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    days: Annotated[int, Field(ge=1, le=MAX_BALANCE_DAYS), BeforeValidator(_decimal)] = 30


def _read_openapi(query: type[BaseModel] | None = None) -> dict[str, Any]:
    """A hot read's parameters and security, as FastAPI documented its dependencies and
    parameters: the wallet id, then each field of ``query`` (its schema as pydantic writes it,
    without a ``default`` of null, as FastAPI leaves it out)."""
    parameters = [_WALLET_ID_PARAMETER]
    if query is not None:
        properties = query.model_json_schema()["properties"]
        for name in query.model_fields:
            schema = {k: v for k, v in properties[name].items() if not (k == "default" and v is None)}
            parameters.append({"name": name, "in": "query", "required": False, "schema": schema})
    return {"parameters": parameters, "security": [{"HTTPBearer": []}]}


async def _read_wallet_id(request: Request) -> tuple[Caller, str]:
    who = await verified_caller(request)
    return who, path_id(request.path_params["wallet_id"], "wallet")


@lean_router.get(
    "/wallets/{wallet_id}", response_model=WalletOut, openapi_extra=_read_openapi(), tags=["wallets"]
)
async def get_wallet(request: Request) -> Response:
    """Balances: cash, promo, held, and available (cash − held + promo)."""
    who, wallet_id = await _read_wallet_id(request)
    return _read_answer(await service_of(request).wallet(who, wallet_id))


@lean_router.get(
    "/wallets/{wallet_id}/statement",
    response_model=StatementOut,
    openapi_extra=_read_openapi(_StatementQuery),
    tags=["wallets"],
)
async def statement(request: Request) -> Response:
    """The movements of the wallet's cash (or promo) in order; pass ``next_cursor`` back for more."""
    who, wallet_id = await _read_wallet_id(request)
    query = query_params(request, _StatementQuery)
    return _read_answer(
        await service_of(request).statement(
            who, wallet_id, purse=query.purse, cursor=query.cursor, limit=query.limit
        )
    )


@router.get("/wallets/{wallet_id}/balances", response_model=BalanceHistoryOut, tags=["wallets"])
async def balance_history(
    wallet_id: WalletIdPath,
    who: CallerDep,
    svc: ServiceDep,
    days: Annotated[int, Query(ge=1, le=MAX_BALANCE_DAYS), BeforeValidator(_decimal)] = 30,
) -> Any:
    """The wallet's cash at the end of each of its last ``days`` UTC days, oldest first, today
    last (so far today): a chart's points."""
    return await svc.balance_history(who, wallet_id, days=days)


@lean_router.get(
    "/wallets/{wallet_id}/overview",
    response_model=WalletOverviewOut,
    openapi_extra=_read_openapi(_DaysQuery),
    tags=["wallets"],
)
async def wallet_overview(request: Request) -> Response:
    """The wallet's balances (as GET /v1/wallets/{wallet_id}), its live promo batches (as
    /promos) and its cash at the end of each of its last ``days`` UTC days (as /balances), in one
    answer: a home page's per wallet, one call where three were."""
    who, wallet_id = await _read_wallet_id(request)
    days = query_params(request, _DaysQuery).days
    return _read_answer(await service_of(request).overview(who, wallet_id, days=days))


@router.get("/wallets/{wallet_id}/promos", response_model=PromoBatchesOut, tags=["promos"])
async def promo_batches(wallet_id: WalletIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    """The wallet's live promo batches (not yet expired), earliest expiry first."""
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
    """A business gives promo money to a customer's wallet under an accepted promo programme
    (its budget and amount per customer); what is left at expiry returns to the business."""
    who = await verified_caller(request)
    body = await json_body(request, PromoIn)
    answer = await service_of(request).promo_grant(
        who,
        _idempotency_key(request),
        from_wallet=body.from_wallet,
        to_wallet_number=body.to_wallet_number,
        amount=body.amount,
        currency=body.currency,
        programme=body.programme,
        expires_at=body.expires_at,
        reference=body.reference,
    )
    return _answer(answer)


@router.post("/promo-programmes", response_model=ProgrammeOut, status_code=201, tags=["promos"])
async def propose_programme(body: ProgrammeIn, who: CallerDep, svc: ServiceDep) -> JSONResponse:
    """A business proposes a promo programme; it grants promo under it once staff accept it."""
    view = await svc.propose_programme(
        who,
        from_wallet=body.from_wallet,
        name=body.name,
        amount_per_customer=body.amount_per_customer,
        budget=body.budget_minor,
        expires_at=body.expires_at,
    )
    return JSONResponse(view, status_code=201)


@router.get("/promo-programmes", response_model=ProgrammesOut, tags=["promos"])
async def my_programmes(who: CallerDep, svc: ServiceDep) -> Any:
    """The promo programmes of the caller's businesses, newest first."""
    return await svc.programmes_of(who)


@router.get("/promo-programmes/{programme_id}", response_model=ProgrammeOut, tags=["promos"])
async def my_programme(programme_id: str, who: CallerDep, svc: ServiceDep) -> Any:
    return await svc.programme_of(who, programme_id)


# ---------------------------------------------------------------------------------------------
# The OpenAPI document: what the routes say, and what only the running service knows
# ---------------------------------------------------------------------------------------------

_TRANSFER = "/v1/transfers/{transfer_id}"
_WALLET_OF = {"wallet_id": "$response.body#/id"}
_FIRST_WALLET = {"wallet_id": "$response.body#/wallets/0/id"}
# Links (OpenAPI 3.1 §4.8.20): where an answer's ids lead. Clients and Schemathesis' stateful
# phase follow them (tests/wallet_api/test_contract.py). (path, method, status) → name → target.
_LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("/v1/accounts", "get", "200"): {
        "GetAccount": ("/v1/accounts/{account_id}", "get", {"account_id": "$response.body#/accounts/0/id"}),
        "GetWallet": (
            "/v1/wallets/{wallet_id}",
            "get",
            {"wallet_id": "$response.body#/accounts/0/wallets/0/id"},
        ),
    },
    ("/v1/accounts/{account_id}", "get", "200"): {
        "GetWallet": ("/v1/wallets/{wallet_id}", "get", _FIRST_WALLET),
        "OpenWallet": ("/v1/accounts/{account_id}/wallets", "post", {"account_id": "$response.body#/id"}),
        "GetLimits": ("/v1/accounts/{account_id}/limits", "get", {"account_id": "$response.body#/id"}),
    },
    **{
        ("/v1/accounts/{account_id}/wallets", "post", status): {
            "GetWallet": ("/v1/wallets/{wallet_id}", "get", _WALLET_OF)
        }
        for status in ("200", "201")
    },
    ("/v1/wallets/{wallet_id}", "get", "200"): {
        "GetStatement": ("/v1/wallets/{wallet_id}/statement", "get", _WALLET_OF),
        "GetPromos": ("/v1/wallets/{wallet_id}/promos", "get", _WALLET_OF),
        "GetBalances": ("/v1/wallets/{wallet_id}/balances", "get", _WALLET_OF),
        "GetOverview": ("/v1/wallets/{wallet_id}/overview", "get", _WALLET_OF),
    },
    ("/v1/transfers", "post", "201"): {
        "GetTransfer": (_TRANSFER, "get", {"transfer_id": "$response.body#/id"}),
        "Refund": (f"{_TRANSFER}/refund", "post", {"transfer_id": "$response.body#/id"}),
    },
    ("/v1/transfers/{transfer_id}", "get", "200"): {
        "Refund": (f"{_TRANSFER}/refund", "post", {"transfer_id": "$response.body#/id"}),
    },
    ("/v1/transfers/{transfer_id}/refund", "post", "201"): {
        "GetRefund": (_TRANSFER, "get", {"transfer_id": "$response.body#/id"}),
    },
    ("/v1/promos", "post", "201"): {
        "GetGrant": (_TRANSFER, "get", {"transfer_id": "$response.body#/id"}),
    },
    ("/v1/promo-programmes", "post", "201"): {
        "GetProgramme": (
            "/v1/promo-programmes/{programme_id}",
            "get",
            {"programme_id": "$response.body#/id"},
        ),
    },
}


def _add_links(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    for (path, method, status), links in _LINKS.items():
        response = paths[path][method]["responses"][status]
        response["links"] = {
            name: {"operationId": paths[to][to_method]["operationId"], "parameters": parameters}
            for name, (to, to_method, parameters) in links.items()
        }


def document(app: FastAPI, currencies: Sequence[str]) -> None:
    """Complete the app's OpenAPI document: the models referred to by hand (problem+json
    answers, the bodies of the routes that read their own), the currencies this service
    supports (its setting, the one source: a document made from the code alone would admit
    any three letters), and the links between answers and the operations their ids lead to."""
    document_models(app, Problem, TransferIn, RefundIn, PromoIn)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()  # built once, and kept by document_models' hook
            declare_currencies(schema, currencies)
            _add_links(schema)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
