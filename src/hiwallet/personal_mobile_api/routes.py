"""personal-mobile-api's routes, in the customer's words. Each only says where it leads; the
door (core.edge) checks the token, the rate limit, forwards and answers.

| here | behind |
|---|---|
| POST /v1/registrations, …/{id}/resend, …/verify, …/complete (no token) | onboarding, same paths |
| GET /v1/me, POST /v1/me/phone, /v1/me/phone/verify, /v1/me/identity, /v1/me/consents | onboarding |
| GET /v1/me/accounts, GET /v1/me/accounts/{account_id} | wallet-api /v1/accounts… |
| GET /v1/me/accounts/{account_id}/limits | wallet-api /v1/accounts/{id}/limits |
| GET /v1/wallets/{wallet_id} | wallet-api, the balance |
| GET /v1/wallets/{wallet_id}/movements | wallet-api …/statement |
| GET /v1/wallets/{wallet_id}/promos | wallet-api, the promo batches |
| POST /v1/transfers (p2p, or a payment to a business), GET /v1/transfers/{id} | wallet-api, no legs |
| POST /v1/withdrawals, GET /v1/withdrawals/{id}, GET /v1/withdrawals?wallet= | withdrawal-orchestrator |
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

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
    PromoBatchesOut,
    TransferOut,
    WalletOut,
    WithdrawalOut,
    WithdrawalsOut,
    public_transfer,
)
from hiwallet.core.edge import door, query, segment
from hiwallet.core.edge.document import answers, idempotency_key, operation, path_param, query_param
from hiwallet.core.http import LeanRoute
from hiwallet.personal_mobile_api.models import (
    REGISTRATION_PATTERN,
    CompletedOut,
    LimitsOut,
    MeOut,
    PhoneSentOut,
    RegistrationOut,
    StatusOut,
)

__all__ = ["router"]

WALLET = "wallet-api"
ONBOARDING = "onboarding"
WITHDRAWALS = "withdrawal-orchestrator"

_TOKEN = answers(401, 403, 404, 429, 503)
_REGISTRATION = answers(400, 404, 409, 413, 422, 429, 503)
_ME = answers(400, 401, 403, 404, 409, 413, 422, 429, 503)
_MONEY = answers(400, 401, 403, 404, 409, 413, 422, 429, 503)
_REPLAYED = {
    "Idempotent-Replayed": {"description": "true when this is a stored answer", "schema": {"type": "string"}}
}

# Every route is lean (it takes the request alone): the ones without a path parameter are served
# on the hot lane (core.http.hot), the transfer first of all.
router = APIRouter(route_class=LeanRoute)

_registration = path_param("registration_id", REGISTRATION_PATTERN)
_account = path_param("account_id", ACCOUNT_ID_PATTERN)
_wallet = path_param("wallet_id", WALLET_ID_PATTERN)
_transfer = path_param("transfer_id", TRANSFER_ID_PATTERN)
_withdrawal = path_param("withdrawal_id", WITHDRAWAL_ID_PATTERN)
_key = idempotency_key(IDEMPOTENCY_KEY_PATTERN)


# --- registration (no token: limited per client address) --------------------------------------


@router.post(
    "/v1/registrations",
    status_code=202,
    response_model=RegistrationOut,
    responses=_REGISTRATION,
    openapi_extra=operation(body="RegistrationIn", anonymous=True),
    tags=["registration"],
)
async def register(request: Request) -> Response:
    """Start a registration: a code is mailed to the address."""
    return await door(request).forward(request, ONBOARDING, "/v1/registrations", anonymous=True)


async def _registration_step(request: Request, step: str) -> Response:
    registration = segment(request, "registration_id")
    return await door(request).forward(
        request, ONBOARDING, f"/v1/registrations/{registration}/{step}", anonymous=True
    )


@router.post(
    "/v1/registrations/{registration_id}/resend",
    status_code=202,
    response_model=RegistrationOut,
    responses=_REGISTRATION,
    openapi_extra=operation(parameters=[_registration], anonymous=True),
    tags=["registration"],
)
async def resend(request: Request) -> Response:
    """A new code, replacing the old one."""
    return await _registration_step(request, "resend")


@router.post(
    "/v1/registrations/{registration_id}/verify",
    response_model=StatusOut,
    responses=_REGISTRATION,
    openapi_extra=operation(parameters=[_registration], body="CodeIn", anonymous=True),
    tags=["registration"],
)
async def verify(request: Request) -> Response:
    """The code from the e-mail: the address is verified."""
    return await _registration_step(request, "verify")


@router.post(
    "/v1/registrations/{registration_id}/complete",
    status_code=201,
    response_model=CompletedOut,
    responses={**_REGISTRATION, 200: {"model": CompletedOut, "description": "Completed before"}},
    openapi_extra=operation(parameters=[_registration], body="CompleteIn", anonymous=True),
    tags=["registration"],
)
async def complete(request: Request) -> Response:
    """The password: the customer and their account are made; then log in."""
    return await _registration_step(request, "complete")


# --- me: verification and tier ------------------------------------------------------------------


@router.get("/v1/me", response_model=MeOut, responses=_ME, openapi_extra=operation(), tags=["me"])
async def me(request: Request) -> Response:
    """What is verified, what was accepted, what remains, and the tier."""
    return await door(request).forward(request, ONBOARDING, "/v1/me")


@router.post(
    "/v1/me/phone",
    status_code=202,
    response_model=PhoneSentOut,
    responses=_ME,
    openapi_extra=operation(body="PhoneIn"),
    tags=["me"],
)
async def send_phone_code(request: Request) -> Response:
    """A code by SMS to the number."""
    return await door(request).forward(request, ONBOARDING, "/v1/me/phone")


@router.post(
    "/v1/me/phone/verify",
    response_model=MeOut,
    responses=_ME,
    openapi_extra=operation(body="CodeIn"),
    tags=["me"],
)
async def verify_phone(request: Request) -> Response:
    """The SMS code: the phone is verified."""
    return await door(request).forward(request, ONBOARDING, "/v1/me/phone/verify")


@router.post(
    "/v1/me/identity",
    response_model=MeOut,
    responses=_ME,
    openapi_extra=operation(body="IdentityIn"),
    tags=["me"],
)
async def verify_identity(request: Request) -> Response:
    """The identity, checked against the population registry."""
    return await door(request).forward(request, ONBOARDING, "/v1/me/identity")


@router.post(
    "/v1/me/consents",
    response_model=MeOut,
    responses=_ME,
    openapi_extra=operation(body="ConsentIn"),
    tags=["me"],
)
async def accept_consent(request: Request) -> Response:
    """The current version of the user agreement or the privacy notice, accepted."""
    return await door(request).forward(request, ONBOARDING, "/v1/me/consents")


# --- my accounts and wallets --------------------------------------------------------------------


@router.get(
    "/v1/me/accounts",
    response_model=AccountsOut,
    responses=_TOKEN,
    openapi_extra=operation(),
    tags=["accounts"],
)
async def my_accounts(request: Request) -> Response:
    """My accounts and their wallets."""
    return await door(request).forward(request, WALLET, "/v1/accounts")


@router.get(
    "/v1/me/accounts/{account_id}",
    response_model=AccountOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_account]),
    tags=["accounts"],
)
async def my_account(request: Request) -> Response:
    return await door(request).forward(request, WALLET, f"/v1/accounts/{segment(request, 'account_id')}")


@router.get(
    "/v1/me/accounts/{account_id}/limits",
    response_model=LimitsOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_account]),
    tags=["accounts"],
)
async def my_limits(request: Request) -> Response:
    """What my tier allows this month, per kind (transfers to people, payments to businesses) and
    currency, and what I used of it."""
    return await door(request).forward(
        request, WALLET, f"/v1/accounts/{segment(request, 'account_id')}/limits"
    )


@router.get(
    "/v1/wallets/{wallet_id}",
    response_model=WalletOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_wallet]),
    tags=["wallets"],
)
async def wallet(request: Request) -> Response:
    """The balance: cash, promo, held, and available (cash − held + promo)."""
    return await door(request).forward(request, WALLET, f"/v1/wallets/{segment(request, 'wallet_id')}")


@router.get(
    "/v1/wallets/{wallet_id}/movements",
    response_model=MovementsOut,
    responses=answers(401, 403, 404, 422, 429, 503),
    openapi_extra=operation(
        parameters=[
            _wallet,
            query_param("purse", {"enum": ["cash", "promo"], "type": "string", "default": "cash"}),
            query_param("cursor", {"type": "string", "pattern": r"^[0-9]{1,18}$"}),
            query_param(
                "limit", {"type": "integer", "minimum": 1, "maximum": MAX_STATEMENT_PAGE, "default": 50}
            ),
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


@router.get(
    "/v1/wallets/{wallet_id}/promos",
    response_model=PromoBatchesOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_wallet]),
    tags=["wallets"],
)
async def promos(request: Request) -> Response:
    """The wallet's promo batches, earliest expiry first."""
    return await door(request).forward(request, WALLET, f"/v1/wallets/{segment(request, 'wallet_id')}/promos")


# --- money: send, pay, withdraw -----------------------------------------------------------------


@router.post(
    "/v1/transfers",
    status_code=201,
    response_model=TransferOut,
    responses={**_MONEY, 201: {"headers": _REPLAYED}},
    openapi_extra=operation(parameters=[_key], body="TransferIn"),
    tags=["money"],
)
async def transfer(request: Request) -> Response:
    """Send money to the wallet with this number: a person's (p2p) or a business's (a payment,
    with its fee; promo money is spent first). The answer's ``type`` says which."""
    return await door(request).forward(request, WALLET, "/v1/transfers", reshape=public_transfer)


@router.get(
    "/v1/transfers/{transfer_id}",
    response_model=TransferOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_transfer]),
    tags=["money"],
)
async def get_transfer(request: Request) -> Response:
    """A transfer of one of my wallets."""
    return await door(request).forward(
        request, WALLET, f"/v1/transfers/{segment(request, 'transfer_id')}", reshape=public_transfer
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
    """Withdraw to a bank account: accepted (202) once kept; follow it at ``Location``."""
    return await door(request).forward(request, WITHDRAWALS, "/v1/withdrawals")


@router.get(
    "/v1/withdrawals/{withdrawal_id}",
    response_model=WithdrawalOut,
    responses=_TOKEN,
    openapi_extra=operation(parameters=[_withdrawal]),
    tags=["money"],
)
async def withdrawal(request: Request) -> Response:
    """A withdrawal and its state."""
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
