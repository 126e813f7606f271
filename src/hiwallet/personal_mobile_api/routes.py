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

from fastapi import APIRouter

from hiwallet.contracts.front import (
    ACCOUNT,
    ACCOUNTS,
    GET_TRANSFER,
    MOVEMENTS,
    TRANSFER,
    WALLET_BALANCE,
    WITHDRAW,
    WITHDRAWAL,
    WITHDRAWALS_LIST,
)
from hiwallet.contracts.onboarding_api import (
    REGISTRATION_PATTERN,
    CompletedOut,
    MeOut,
    PhoneSentOut,
    RegistrationOut,
    StatusOut,
)
from hiwallet.contracts.public import LimitsOut, PromoBatchesOut
from hiwallet.core.edge.document import answers, path_param
from hiwallet.core.edge.routes import Forwarding
from hiwallet.core.http import LeanRoute

__all__ = ["ONBOARDING", "router"]

ONBOARDING = "onboarding"

_REGISTRATION = answers(400, 404, 409, 413, 422, 429, 503)

# Every route is lean (it takes the request alone): the ones without a path parameter are served
# on the hot lane (core.http.hot), the transfer first of all.
router = APIRouter(route_class=LeanRoute)


# --- registration (no token: limited per client address) --------------------------------------

_REGISTER = Forwarding(
    "POST",
    "/v1/registrations",
    ONBOARDING,
    anonymous=True,
    route={
        "status_code": 202,
        "response_model": RegistrationOut,
        "responses": _REGISTRATION,
        "tags": ["registration"],
    },
)
_REGISTER.declare(
    router,
    "register",
    description="Start a registration: a code is mailed to the address.",
    body="RegistrationIn",
)
# A step of a registration: the same path behind.
_STEP = Forwarding(
    "POST",
    "/v1/registrations/{registration_id}",
    ONBOARDING,
    anonymous=True,
    parameters=[path_param("registration_id", REGISTRATION_PATTERN)],
    route={"responses": _REGISTRATION, "tags": ["registration"]},
)
_STEP.declare(
    router,
    "resend",
    path="/v1/registrations/{registration_id}/resend",
    description="A new code, replacing the old one.",
    status_code=202,
    response_model=RegistrationOut,
)
_STEP.declare(
    router,
    "verify",
    path="/v1/registrations/{registration_id}/verify",
    description="The code from the e-mail: the address is verified.",
    response_model=StatusOut,
    body="CodeIn",
)
_STEP.declare(
    router,
    "complete",
    path="/v1/registrations/{registration_id}/complete",
    description="The password: the customer and their account are made; then log in.",
    status_code=201,
    response_model=CompletedOut,
    responses={**_REGISTRATION, 200: {"model": CompletedOut, "description": "Completed before"}},
    body="CompleteIn",
)


# --- me: verification and tier ------------------------------------------------------------------

_ME = Forwarding(
    "POST",
    "/v1/me",
    ONBOARDING,
    route={
        "response_model": MeOut,
        "responses": answers(400, 401, 403, 404, 409, 413, 422, 429, 503),
        "tags": ["me"],
    },
)
_ME.declare(
    router,
    "me",
    method="GET",
    description="What is verified, what was accepted, what remains, and the tier.",
)
_ME.declare(
    router,
    "send_phone_code",
    path="/v1/me/phone",
    description="A code by SMS to the number.",
    status_code=202,
    response_model=PhoneSentOut,
    body="PhoneIn",
)
_ME.declare(
    router,
    "verify_phone",
    path="/v1/me/phone/verify",
    description="The SMS code: the phone is verified.",
    body="CodeIn",
)
_ME.declare(
    router,
    "verify_identity",
    path="/v1/me/identity",
    description="The identity, checked against the population registry.",
    body="IdentityIn",
)
_ME.declare(
    router,
    "accept_consent",
    path="/v1/me/consents",
    description="The current version of the user agreement or the privacy notice, accepted.",
    body="ConsentIn",
)


# --- my accounts and wallets --------------------------------------------------------------------

ACCOUNTS.declare(router, "my_accounts", path="/v1/me/accounts", description="My accounts and their wallets.")
ACCOUNT.declare(router, "my_account", path="/v1/me/accounts/{account_id}")
ACCOUNT.declare(
    router,
    "my_limits",
    path="/v1/me/accounts/{account_id}/limits",
    target="/v1/accounts/{account_id}/limits",
    description="What my tier allows this month, per kind (transfers to people, payments to businesses) "
    "and\ncurrency, and what I used of it.",
    response_model=LimitsOut,
)
WALLET_BALANCE.declare(
    router, "wallet", description="The balance: cash, promo, held, and available (cash − held + promo)."
)
MOVEMENTS.declare(router, "movements")
WALLET_BALANCE.declare(
    router,
    "promos",
    path="/v1/wallets/{wallet_id}/promos",
    description="The wallet's promo batches, earliest expiry first.",
    response_model=PromoBatchesOut,
)


# --- money: send, pay, withdraw -----------------------------------------------------------------

TRANSFER.declare(
    router,
    "transfer",
    description="Send money to the wallet with this number: a person's (p2p) or a business's (a payment,\n"
    "with its fee; promo money is spent first). The answer's ``type`` says which.",
)
GET_TRANSFER.declare(router, "get_transfer", description="A transfer of one of my wallets.")
WITHDRAW.declare(
    router,
    "withdraw",
    description="Withdraw to a bank account: accepted (202) once kept; follow it at ``Location``.",
)
WITHDRAWAL.declare(router, "withdrawal", description="A withdrawal and its state.")
WITHDRAWALS_LIST.declare(router, "withdrawals")
