r"""business-api's routes, for merchants' systems (a client's service account is the caller).
Each only says where it leads; the door (core.edge) checks the token, the rate limit, forwards
and answers.

| here | behind (wallet-api unless said) |
|---|---|
| GET /v1/accounts, GET /v1/accounts/{account_id} | /v1/accounts… (the accounts the client is linked to) |
| GET /v1/accounts/{account_id}/daily-summary?from=&to=&format=json\|csv | the same: the business's days |
| GET /v1/wallets/{wallet_id} | the balance |
| GET /v1/wallets/{wallet_id}/movements | …/statement |
| GET /v1/wallets/{wallet_id}/payments?kind= | …/statement, only payments received (or refunds) |
| POST /v1/transfers (B2P, B2B), GET /v1/transfers/{id} | /v1/transfers…, without the ledger legs |
| POST /v1/transfers/{id}/refund | the refund of a payment received |
| POST /v1/promos; GET, POST /v1/promo-programmes; GET …/{id} | promo grants, programmes |
| POST /v1/withdrawals, GET /v1/withdrawals/{id}, GET /v1/withdrawals?wallet= | withdrawal-orchestrator |
| /v1/webhook-endpoints…, /v1/webhook-deliveries… | webhooks.py |
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from hiwallet.business_api.models import (
    PROGRAMME_ID_PATTERN,
    DailySummaryOut,
    PaymentsOut,
    ProgrammeOut,
    ProgrammesOut,
)
from hiwallet.contracts.public import (
    ACCOUNT_ID_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    MAX_STATEMENT_PAGE,
    TRANSFER_ID_PATTERN,
    WALLET_ID_PATTERN,
    WITHDRAWAL_ID_PATTERN,
    WITHDRAWAL_WALLET_PATTERN,
    AccountOut,
    AccountsOut,
    MovementsOut,
    TransferOut,
    WalletOut,
    WithdrawalOut,
    WithdrawalsOut,
    public_transfer,
)
from hiwallet.core.edge import door, query, segment
from hiwallet.core.edge.document import answers, idempotency_key, operation, path_param, query_param
from hiwallet.core.http import LeanRoute, NotFound

__all__ = ["router"]

WALLET = "wallet-api"
WITHDRAWALS = "withdrawal-orchestrator"

_TOKEN = answers(401, 403, 404, 429, 503)
_MONEY = answers(400, 401, 403, 404, 409, 413, 422, 429, 503)
_REPLAYED = {
    "Idempotent-Replayed": {"description": "true when this is a stored answer", "schema": {"type": "string"}}
}

router = APIRouter(route_class=LeanRoute)

_account = path_param("account_id", ACCOUNT_ID_PATTERN)
_wallet = path_param("wallet_id", WALLET_ID_PATTERN)
_transfer = path_param("transfer_id", TRANSFER_ID_PATTERN)
_withdrawal = path_param("withdrawal_id", WITHDRAWAL_ID_PATTERN)
_programme = path_param("programme_id", PROGRAMME_ID_PATTERN)
_key = idempotency_key(IDEMPOTENCY_KEY_PATTERN)
_page = [
    query_param("cursor", {"type": "string", "pattern": r"^[0-9]{1,18}$"}),
    query_param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_STATEMENT_PAGE, "default": 50}),
]


@router.get(
    "/v1/accounts", response_model=AccountsOut, responses=_TOKEN, openapi_extra=operation(), tags=["accounts"]
)
async def accounts(request: Request) -> Response:
    """The business accounts this client is linked to, and their wallets."""
    return await door(request).forward(request, WALLET, "/v1/accounts")


@router.get(
    "/v1/accounts/{account_id}",
    response_model=AccountOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_account]),
    tags=["accounts"],
)
async def account(request: Request) -> Response:
    return await door(request).forward(request, WALLET, f"/v1/accounts/{segment(request, 'account_id')}")


@router.get(
    "/v1/accounts/{account_id}/daily-summary",
    response_model=DailySummaryOut,
    responses={
        **answers(401, 403, 404, 422, 429, 503),
        200: {"content": {"text/csv": {"schema": {"type": "string"}}}, "description": "JSON, or CSV"},
    },
    openapi_extra=operation(
        parameters=[
            _account,
            query_param("from", {"type": "string", "format": "date"}),
            query_param("to", {"type": "string", "format": "date"}),
            query_param("format", {"enum": ["json", "csv"], "type": "string", "default": "json"}),
        ]
    ),
    tags=["accounts"],
)
async def daily_summary(request: Request) -> Response:
    """The business's days (UTC, the last 31 unless ``from``/``to`` say): its transactions, what
    came in and went out, the fees taken in them; ``format=csv`` for CSV. Refreshed every hour."""
    return await door(request).forward(
        request,
        WALLET,
        f"/v1/accounts/{segment(request, 'account_id')}/daily-summary",
        params=query(request, "from", "to", "format"),
    )


@router.get(
    "/v1/wallets/{wallet_id}",
    response_model=WalletOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_wallet]),
    tags=["wallets"],
)
async def wallet(request: Request) -> Response:
    """The balance: cash, promo, held, and available."""
    return await door(request).forward(request, WALLET, f"/v1/wallets/{segment(request, 'wallet_id')}")


@router.get(
    "/v1/wallets/{wallet_id}/movements",
    response_model=MovementsOut,
    responses=answers(401, 403, 404, 422, 429, 503),
    openapi_extra=operation(
        parameters=[
            _wallet,
            query_param("purse", {"enum": ["cash", "promo"], "type": "string", "default": "cash"}),
            *_page,
        ]
    ),
    tags=["wallets"],
)
async def movements(request: Request) -> Response:
    """The wallet's movements in order; pass ``next_cursor`` back as ``cursor`` for more."""
    return await door(request).forward(
        request,
        WALLET,
        f"/v1/wallets/{segment(request, 'wallet_id')}/statement",
        params=query(request, "purse", "cursor", "limit"),
    )


_KINDS = {"payment": ("payment",), "refund": ("refund",), "all": ("payment", "refund")}


@router.get(
    "/v1/wallets/{wallet_id}/payments",
    response_model=PaymentsOut,
    responses=answers(401, 403, 404, 422, 429, 503),
    openapi_extra=operation(
        parameters=[
            _wallet,
            query_param("kind", {"enum": list(_KINDS), "type": "string", "default": "payment"}),
            *_page,
        ]
    ),
    tags=["wallets"],
)
async def payments(request: Request) -> Response:
    """Payments received by the wallet (``kind=payment``, the default), their refunds
    (``refund``) or both (``all``), oldest first, with a cursor. Each line's
    ``transaction_id`` is the payment to refund (POST /v1/transfers/{transaction_id}/refund)."""
    kind = request.query_params.get("kind", "payment")
    types = _KINDS.get(kind)
    if types is None:
        raise NotFound("no such kind of payment line; one of payment, refund, all")

    def only(body: Any) -> Any:
        lines = [line for line in body.get("lines", ()) if line.get("type") in types]
        return {
            "wallet_id": body.get("wallet_id"),
            "kind": kind,
            "lines": lines,
            "next_cursor": body.get("next_cursor"),
        }

    return await door(request).forward(
        request,
        WALLET,
        f"/v1/wallets/{segment(request, 'wallet_id')}/statement",
        params=query(request, "cursor", "limit"),
        reshape=only,
    )


@router.post(
    "/v1/transfers",
    status_code=201,
    response_model=TransferOut,
    responses={**_MONEY, 201: {"headers": _REPLAYED}},
    openapi_extra=operation(parameters=[_key], body="TransferIn"),
    tags=["money"],
)
async def transfer(request: Request) -> Response:
    """Pay a person (B2P) or another business (B2B) from one of the business's wallets."""
    return await door(request).forward(request, WALLET, "/v1/transfers", reshape=public_transfer)


@router.get(
    "/v1/transfers/{transfer_id}",
    response_model=TransferOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_transfer]),
    tags=["money"],
)
async def get_transfer(request: Request) -> Response:
    return await door(request).forward(
        request, WALLET, f"/v1/transfers/{segment(request, 'transfer_id')}", reshape=public_transfer
    )


@router.post(
    "/v1/transfers/{transfer_id}/refund",
    status_code=201,
    response_model=TransferOut,
    responses={**_MONEY, 201: {"headers": _REPLAYED}},
    openapi_extra=operation(parameters=[_transfer, _key], body="RefundIn"),
    tags=["money"],
)
async def refund(request: Request) -> Response:
    """Refund a payment the business received: all of it, once."""
    return await door(request).forward(
        request, WALLET, f"/v1/transfers/{segment(request, 'transfer_id')}/refund", reshape=public_transfer
    )


@router.post(
    "/v1/promos",
    status_code=201,
    response_model=TransferOut,
    responses={**_MONEY, 201: {"headers": _REPLAYED}},
    openapi_extra=operation(parameters=[_key], body="PromoIn"),
    tags=["promos"],
)
async def grant_promo(request: Request) -> Response:
    """Give promo money to a customer's wallet under an accepted programme."""
    return await door(request).forward(request, WALLET, "/v1/promos", reshape=public_transfer)


@router.post(
    "/v1/promo-programmes",
    status_code=201,
    response_model=ProgrammeOut,
    responses=answers(400, 401, 403, 404, 413, 422, 429, 503),
    openapi_extra=operation(body="ProgrammeIn"),
    tags=["promos"],
)
async def propose_programme(request: Request) -> Response:
    """Propose a promo programme; grants under it once staff accept it."""
    return await door(request).forward(request, WALLET, "/v1/promo-programmes")


@router.get(
    "/v1/promo-programmes",
    response_model=ProgrammesOut,
    responses=_TOKEN,
    openapi_extra=operation(),
    tags=["promos"],
)
async def programmes(request: Request) -> Response:
    """The business's promo programmes, newest first."""
    return await door(request).forward(request, WALLET, "/v1/promo-programmes")


@router.get(
    "/v1/promo-programmes/{programme_id}",
    response_model=ProgrammeOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_programme]),
    tags=["promos"],
)
async def programme(request: Request) -> Response:
    return await door(request).forward(
        request, WALLET, f"/v1/promo-programmes/{segment(request, 'programme_id')}"
    )


@router.post(
    "/v1/withdrawals",
    status_code=202,
    response_model=WithdrawalOut,
    responses={**_MONEY, 202: {"headers": {"Location": {"schema": {"type": "string"}}}}},
    openapi_extra=operation(parameters=[_key], body="WithdrawalIn"),
    tags=["money"],
)
async def withdraw(request: Request) -> Response:
    """Withdraw to the business's bank account: accepted (202) once kept; follow it at ``Location``."""
    return await door(request).forward(request, WITHDRAWALS, "/v1/withdrawals")


@router.get(
    "/v1/withdrawals/{withdrawal_id}",
    response_model=WithdrawalOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_withdrawal]),
    tags=["money"],
)
async def withdrawal(request: Request) -> Response:
    return await door(request).forward(
        request, WITHDRAWALS, f"/v1/withdrawals/{segment(request, 'withdrawal_id')}"
    )


@router.get(
    "/v1/withdrawals",
    response_model=WithdrawalsOut,
    responses=answers(401, 403, 404, 422, 429, 503),
    openapi_extra=operation(
        parameters=[
            query_param("wallet", {"type": "string", "pattern": WITHDRAWAL_WALLET_PATTERN}, required=True),
            query_param("cursor", {"type": "string", "pattern": WITHDRAWAL_ID_PATTERN}),
            query_param("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
        ]
    ),
    tags=["money"],
)
async def withdrawals(request: Request) -> Response:
    """A wallet's withdrawals, newest first; pass ``next_cursor`` back for more."""
    return await door(request).forward(
        request, WITHDRAWALS, "/v1/withdrawals", params=query(request, "wallet", "cursor", "limit")
    )
