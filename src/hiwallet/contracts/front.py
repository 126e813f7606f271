"""The routes both front APIs serve (personal-mobile-api and business-api: services do not import
each other), declared once: their accounts, wallets, transfers and withdrawals, forwarded to
wallet-api and the withdrawal orchestrator, with the shapes of :mod:`hiwallet.contracts.public`.
Each front API declares them on its router under its own names and words
(:meth:`Forwarding.declare`: its path, its description).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from hiwallet.contracts.currency import declare_currencies
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
    Problem,
    TransferIn,
    TransferOut,
    WalletOut,
    WithdrawalIn,
    WithdrawalOut,
    WithdrawalsOut,
    public_transfer,
)
from hiwallet.core.edge.document import answers, document_security, idempotency_key, path_param, query_param
from hiwallet.core.edge.routes import Forwarding, reading
from hiwallet.core.http import document_models

__all__ = [
    "ACCOUNT",
    "ACCOUNTS",
    "GET_TRANSFER",
    "IDEMPOTENT",
    "KEY",
    "LISTED",
    "MONEY",
    "MOVEMENTS",
    "PAGE",
    "TRANSFER",
    "TRANSFER_PARAM",
    "WALLET",
    "WALLET_BALANCE",
    "WALLET_PARAM",
    "WITHDRAW",
    "WITHDRAWAL",
    "WITHDRAWALS",
    "WITHDRAWALS_LIST",
    "front_document",
]

WALLET = "wallet-api"
WITHDRAWALS = "withdrawal-orchestrator"

# What a route answers besides its 2xx (a read with a token: core.edge.routes.READ): a listing
# (its query checked), money.
LISTED = answers(401, 403, 404, 422, 429, 503)
MONEY = answers(400, 401, 403, 404, 409, 413, 422, 429, 503)
# A 201 of an operation under an Idempotency-Key (the stored answer, replayed).
IDEMPOTENT = {
    **MONEY,
    201: {
        "headers": {
            "Idempotent-Replayed": {
                "description": "true when this is a stored answer",
                "schema": {"type": "string"},
            }
        }
    },
}

WALLET_PARAM = path_param("wallet_id", WALLET_ID_PATTERN)
TRANSFER_PARAM = path_param("transfer_id", TRANSFER_ID_PATTERN)
_ACCOUNT = path_param("account_id", ACCOUNT_ID_PATTERN)
_WITHDRAWAL = path_param("withdrawal_id", WITHDRAWAL_ID_PATTERN)
KEY = idempotency_key(IDEMPOTENCY_KEY_PATTERN)
# A statement's page: the cursor is the last line's version.
PAGE = (
    query_param("cursor", {"type": "string", "pattern": r"^[0-9]{1,18}$"}),
    query_param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_STATEMENT_PAGE, "default": 50}),
)

# A front API may serve them at other paths (its ``path``): the target stays.
ACCOUNTS = reading("/v1/accounts", WALLET, AccountsOut, "accounts", target="/v1/accounts")
_ACCOUNT_PATH = "/v1/accounts/{account_id}"
ACCOUNT = reading(_ACCOUNT_PATH, WALLET, AccountOut, "accounts", target=_ACCOUNT_PATH, parameters=[_ACCOUNT])
WALLET_BALANCE = reading("/v1/wallets/{wallet_id}", WALLET, WalletOut, "wallets", parameters=[WALLET_PARAM])
MOVEMENTS = Forwarding(
    "GET",
    "/v1/wallets/{wallet_id}/movements",
    WALLET,
    target="/v1/wallets/{wallet_id}/statement",
    description="The wallet's movements in order; pass ``next_cursor`` back as ``cursor`` for more.",
    params=("purse", "cursor", "limit"),
    parameters=[
        WALLET_PARAM,
        query_param("purse", {"enum": ["cash", "promo"], "type": "string", "default": "cash"}),
        *PAGE,
    ],
    route={"response_model": MovementsOut, "responses": LISTED, "tags": ["wallets"]},
)
TRANSFER = Forwarding(
    "POST",
    "/v1/transfers",
    WALLET,
    reshape=public_transfer,
    parameters=[KEY],
    body="TransferIn",
    route={"status_code": 201, "response_model": TransferOut, "responses": IDEMPOTENT, "tags": ["money"]},
)
GET_TRANSFER = reading(
    "/v1/transfers/{transfer_id}",
    WALLET,
    TransferOut,
    "money",
    parameters=[TRANSFER_PARAM],
    reshape=public_transfer,
)
WITHDRAW = Forwarding(
    "POST",
    "/v1/withdrawals",
    WITHDRAWALS,
    parameters=[KEY],
    body="WithdrawalIn",
    route={
        "status_code": 202,
        "response_model": WithdrawalOut,
        "responses": {**MONEY, 202: {"headers": {"Location": {"schema": {"type": "string"}}}}},
        "tags": ["money"],
    },
)
WITHDRAWAL = reading(
    "/v1/withdrawals/{withdrawal_id}", WITHDRAWALS, WithdrawalOut, "money", parameters=[_WITHDRAWAL]
)
WITHDRAWALS_LIST = Forwarding(
    "GET",
    "/v1/withdrawals",
    WITHDRAWALS,
    description="A wallet's withdrawals, newest first; pass ``next_cursor`` back for more.",
    params=("wallet", "cursor", "limit"),
    parameters=[
        query_param("wallet", {"type": "string", "pattern": WITHDRAWAL_WALLET_PATTERN}, required=True),
        query_param("cursor", {"type": "string", "pattern": WITHDRAWAL_ID_PATTERN}),
        query_param("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
    ],
    route={"response_model": WithdrawalsOut, "responses": LISTED, "tags": ["money"]},
)


def front_document(
    currencies: Sequence[str], security: str, *models: type[BaseModel]
) -> Callable[[FastAPI], None]:
    """A front API's document (``front_spec``'s ``openapi``): the problem, the bodies of a
    transfer and a withdrawal and ``models`` among its components (its lean routes name them),
    its bearer scheme (``security`` describes the token), and ``currencies`` as the enum of every
    currency (the deployment's setting, as the services behind it)."""

    def openapi(app: FastAPI) -> None:
        document_models(app, Problem, TransferIn, WithdrawalIn, *models)
        document_security(app, security)
        generate = app.openapi

        def with_currencies() -> dict[str, Any]:
            schema = generate()
            declare_currencies(schema, currencies)
            return schema

        app.openapi = with_currencies  # type: ignore[method-assign]

    return openapi
