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

from hiwallet.business_api.models import DailySummaryOut, PaymentsOut
from hiwallet.contracts.front import (
    ACCOUNT,
    ACCOUNTS,
    GET_TRANSFER,
    KEY,
    LISTED,
    MOVEMENTS,
    PAGE,
    TRANSFER,
    TRANSFER_PARAM,
    WALLET,
    WALLET_BALANCE,
    WALLET_PARAM,
    WITHDRAW,
    WITHDRAWAL,
    WITHDRAWALS_LIST,
)
from hiwallet.contracts.public import PROGRAMME_ID_PATTERN, ProgrammeOut, ProgrammesOut
from hiwallet.core.edge import door, query, segment
from hiwallet.core.edge.document import answers, operation, path_param, query_param
from hiwallet.core.edge.routes import reading
from hiwallet.core.http import LeanRoute, NotFound

__all__ = ["router"]

router = APIRouter(route_class=LeanRoute)

ACCOUNTS.declare(
    router, "accounts", description="The business accounts this client is linked to, and their wallets."
)
ACCOUNT.declare(router, "account")
ACCOUNT.declare(
    router,
    "daily_summary",
    path="/v1/accounts/{account_id}/daily-summary",
    target="/v1/accounts/{account_id}/daily-summary",
    description="The business's days (UTC, the last 31 unless ``from``/``to`` say): its transactions, what\n"
    "came in and went out, the fees taken in them; ``format=csv`` for CSV. Refreshed every hour.",
    params=("from", "to", "format"),
    parameters=[
        *ACCOUNT.parameters,
        query_param("from", {"type": "string", "format": "date"}),
        query_param("to", {"type": "string", "format": "date"}),
        query_param("format", {"enum": ["json", "csv"], "type": "string", "default": "json"}),
    ],
    response_model=DailySummaryOut,
    responses={
        **LISTED,
        200: {"content": {"text/csv": {"schema": {"type": "string"}}}, "description": "JSON, or CSV"},
    },
)
WALLET_BALANCE.declare(router, "wallet", description="The balance: cash, promo, held, and available.")
MOVEMENTS.declare(router, "movements")


_KINDS = {"payment": ("payment",), "refund": ("refund",), "all": ("payment", "refund")}


@router.get(
    "/v1/wallets/{wallet_id}/payments",
    response_model=PaymentsOut,
    responses=LISTED,
    openapi_extra=operation(
        parameters=[
            WALLET_PARAM,
            query_param("kind", {"enum": list(_KINDS), "type": "string", "default": "payment"}),
            *PAGE,
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


TRANSFER.declare(
    router,
    "transfer",
    description="Pay a person (B2P) or another business (B2B) from one of the business's wallets.",
)
GET_TRANSFER.declare(router, "get_transfer")
TRANSFER.declare(
    router,
    "refund",
    path="/v1/transfers/{transfer_id}/refund",
    description="Refund a payment the business received: all of it, once.",
    parameters=[TRANSFER_PARAM, KEY],
    body="RefundIn",
)
TRANSFER.declare(
    router,
    "grant_promo",
    path="/v1/promos",
    description="Give promo money to a customer's wallet under an accepted programme.",
    body="PromoIn",
    tags=["promos"],
)

_PROGRAMMES = reading("/v1/promo-programmes", WALLET, ProgrammesOut, "promos")
_PROGRAMMES.declare(
    router,
    "propose_programme",
    method="POST",
    description="Propose a promo programme; grants under it once staff accept it.",
    body="ProgrammeIn",
    status_code=201,
    response_model=ProgrammeOut,
    responses=answers(400, 401, 403, 404, 413, 422, 429, 503),
)
_PROGRAMMES.declare(router, "programmes", description="The business's promo programmes, newest first.")
_PROGRAMMES.declare(
    router,
    "programme",
    path="/v1/promo-programmes/{programme_id}",
    parameters=[path_param("programme_id", PROGRAMME_ID_PATTERN)],
    response_model=ProgrammeOut,
)

WITHDRAW.declare(
    router,
    "withdraw",
    description="Withdraw to the business's bank account: accepted (202) once kept; "
    "follow it at ``Location``.",
)
WITHDRAWAL.declare(router, "withdrawal")
WITHDRAWALS_LIST.declare(router, "withdrawals")
