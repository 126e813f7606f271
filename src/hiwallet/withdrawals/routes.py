"""withdrawal-orchestrator's HTTP routes: they only translate between HTTP and the service.

- ``POST /v1/withdrawals`` (Idempotency-Key required): 202, the saga initiated; nothing has
  moved yet, the rest happens through the queues.
- ``GET /v1/withdrawals/{id}``: the requester sees their withdrawal; any other caller only if
  wallet-api says they are a member of its wallet; else 404, as for a missing one.
- ``GET /v1/withdrawals?wallet=…``: a wallet's withdrawals for its members, newest first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from hiwallet.contracts.currency import declare_currencies
from hiwallet.contracts.public import (
    WITHDRAWAL_ID_PATTERN,
    WITHDRAWAL_WALLET_PATTERN,
    WithdrawalIn,
    WithdrawalOut,
    WithdrawalsOut,
)
from hiwallet.contracts.withdrawals import Requester
from hiwallet.core.auth import CallerNotAllowed, Principal, bearer_token
from hiwallet.core.http import PROBLEM_CONTENT_TYPE, LeanRoute, document_models, json_body, json_body_openapi
from hiwallet.core.http.idempotency import IDEMPOTENCY_KEY_PATTERN
from hiwallet.withdrawals import errors
from hiwallet.withdrawals.service import WithdrawalService, view
from hiwallet.withdrawals.visibility import WalletDirectory

# As the saga's messages bound a wallet id (contracts.withdrawals); a UUIDv7 for a withdrawal.
WALLET_PATTERN = WITHDRAWAL_WALLET_PATTERN
SAGA_PATTERN = WITHDRAWAL_ID_PATTERN
_SAGA = re.compile(SAGA_PATTERN)
MAX_PAGE = 100


_PROBLEM: dict[str, Any] = {"content": {PROBLEM_CONTENT_TYPE: {}}}
_COMMON: dict[int | str, dict[str, Any]] = {
    400: {**_PROBLEM, "description": "A missing or malformed Idempotency-Key"},
    401: {**_PROBLEM, "description": "No valid access token"},
    403: {**_PROBLEM, "description": "This kind of caller may not do this"},
    404: {**_PROBLEM, "description": "Not found, or not the caller's"},
    409: {**_PROBLEM, "description": "The first request with this key is still running"},
    413: {**_PROBLEM, "description": "Body too large"},
    422: {**_PROBLEM, "description": "Invalid input (IBAN, amount, currency) or the key reused"},
    503: {**_PROBLEM, "description": "A dependency is not reachable; retry (with the same key)"},
}
_IDEMPOTENCY_HEADER = {
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": True,
            "description": "A unique key per withdrawal (a UUID): 1 to 255 visible ASCII characters. The "
            "same key with the same body answers the first answer; with another body 422; while the "
            "first runs 409.",
            "schema": {
                "type": "string",
                "minLength": 1,
                "maxLength": 257,
                "pattern": IDEMPOTENCY_KEY_PATTERN,
            },
        }
    ]
}

_bearer = HTTPBearer(
    auto_error=False, bearerFormat="JWT", description="An access token with audience hiwallet-api."
)


async def verified_caller(request: Request) -> Principal:
    """The verified caller: customer-realm tokens only (a staff token is refused here)."""
    principal: Principal = await request.app.state.verifier.verify(bearer_token(request))
    if principal.kind != "customer":
        raise CallerNotAllowed("staff tokens are not accepted on customer endpoints")
    return principal


async def _caller(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    # ``_bearer`` only declares the security scheme in the OpenAPI document.
    return await verified_caller(request)


async def _service(request: Request) -> WithdrawalService:
    service: WithdrawalService = request.app.state.service
    return service


async def _directory(request: Request) -> WalletDirectory:
    directory: WalletDirectory = request.app.state.directory
    return directory


CallerDep = Annotated[Principal, Depends(_caller)]
ServiceDep = Annotated[WithdrawalService, Depends(_service)]
DirectoryDep = Annotated[WalletDirectory, Depends(_directory)]


def _actor(principal: Principal) -> str:
    if principal.is_service_account:
        return f"client:{principal.azp}:{principal.subject}"[:200]
    return f"customer:{principal.subject}"[:200]


router = APIRouter(prefix="/v1", responses=_COMMON, tags=["withdrawals"])
# The request, the saga's one HTTP call per withdrawal: its endpoint takes the request alone and
# is served on the hot lane (core.http.LeanRoute; FastAPI's dependency solving, body parsing and
# stack cost wallet-api a fifth of its CPU per transfer). Included first, so matched first.
lean_router = APIRouter(prefix="/v1", responses=_COMMON, tags=["withdrawals"], route_class=LeanRoute)


@lean_router.post(
    "/withdrawals",
    response_model=WithdrawalOut,
    status_code=202,
    responses={202: {"headers": {"Location": {"schema": {"type": "string"}}}}},
    openapi_extra={
        **_IDEMPOTENCY_HEADER,
        **json_body_openapi(WithdrawalIn),
        "security": [{"HTTPBearer": []}],
    },
)
async def request_withdrawal(request: Request) -> Response:
    """Withdraw money from a wallet to a bank account. Accepted (202) once the request is
    kept: the wallet is debited, the bank paid and the outcome known later (GET it)."""
    who = await verified_caller(request)
    body = await json_body(request, WithdrawalIn)
    svc: WithdrawalService = request.app.state.service
    answer = await svc.request(
        Requester(issuer=who.issuer, subject=who.subject),
        _actor(who),
        request.headers.get("idempotency-key"),
        wallet=body.wallet,
        amount_minor=body.amount_minor,
        currency=body.currency,
        destination_iban=body.destination_iban,
    )
    headers = {"Location": f"/v1/withdrawals/{answer.saga_id}"}
    if answer.replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(answer.body, status_code=answer.status, headers=headers)


@router.get("/withdrawals/{withdrawal_id}", response_model=WithdrawalOut)
async def get_withdrawal(
    withdrawal_id: str, request: Request, who: CallerDep, svc: ServiceDep, directory: DirectoryDep
) -> Any:
    """A withdrawal and its state, for its requester and the members of its wallet."""
    if not _SAGA.fullmatch(withdrawal_id):
        raise errors.NotFound("no such withdrawal")
    saga = await svc.saga(withdrawal_id)
    if saga is None:
        raise errors.NotFound("no such withdrawal")
    requester = saga["requested_by_issuer"] == who.issuer and saga["requested_by_subject"] == who.subject
    if not requester and not await directory.is_member(saga["wallet"], bearer_token(request)):
        raise errors.NotFound("no such withdrawal")
    return view(saga)


@router.get("/withdrawals", response_model=WithdrawalsOut)
async def list_withdrawals(
    request: Request,
    who: CallerDep,
    svc: ServiceDep,
    directory: DirectoryDep,
    wallet: Annotated[str, Query(pattern=WALLET_PATTERN)],
    cursor: Annotated[str | None, Query(pattern=SAGA_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
) -> Any:
    """A wallet's withdrawals, newest first, for its members; pass ``next_cursor`` back for more."""
    if not await directory.is_member(wallet, bearer_token(request)):
        raise errors.NotFound("no such wallet")
    rows, next_cursor = await svc.of_wallet(wallet, cursor, limit)
    return {"wallet": wallet, "withdrawals": [view(r) for r in rows], "next_cursor": next_cursor}


def document(app: FastAPI, currencies: Sequence[str]) -> None:
    """Complete the app's OpenAPI document: the request's model (its route reads its own body)
    and the currencies this service takes (its setting, the one source: a document made from
    the code alone would admit any three letters), as wallet-api's document does."""
    document_models(app, WithdrawalIn)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()  # built once, and kept by document_models' hook
            declare_currencies(schema, currencies)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
