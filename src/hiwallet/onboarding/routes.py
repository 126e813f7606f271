"""onboarding's HTTP routes: they only translate between HTTP and the service.

Registration (no token; the front APIs pass it through):

- ``POST /v1/registrations`` {email} → 202 {registration_id, expires_at}
- ``POST /v1/registrations/{id}/resend`` → 202
- ``POST /v1/registrations/{id}/verify`` {code} → 200
- ``POST /v1/registrations/{id}/complete`` {password} → 201 (200 when repeated)

Verification (a customer's token):

- ``GET /v1/me``; ``POST /v1/me/phone`` {phone} → 202; ``POST /v1/me/phone/verify`` {code};
  ``POST /v1/me/identity`` {tckn, given_name, family_name, birth_date};
  ``POST /v1/me/consents`` {document, version}
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from hiwallet.contracts.onboarding_api import (
    REGISTRATION_PATTERN,
    CodeIn,
    CompletedOut,
    CompleteIn,
    ConsentIn,
    IdentityIn,
    MeOut,
    PhoneIn,
    PhoneSentOut,
    RegistrationIn,
    RegistrationOut,
    StatusOut,
)
from hiwallet.core.auth import CallerNotAllowed, Principal, bearer_token
from hiwallet.core.http import MALFORMED_BODY_ANSWER, PROBLEM_CONTENT_TYPE
from hiwallet.onboarding import errors
from hiwallet.onboarding.service import OnboardingService

_REGISTRATION = re.compile(REGISTRATION_PATTERN)

_PROBLEM: dict[str, Any] = {"content": {PROBLEM_CONTENT_TYPE: {}}}
_REGISTRATION_ANSWERS: dict[int | str, dict[str, Any]] = {
    **MALFORMED_BODY_ANSWER,
    404: {**_PROBLEM, "description": "No such registration, or it expired"},
    409: {**_PROBLEM, "description": "Not in the state this step needs"},
    422: {**_PROBLEM, "description": "Invalid input, a wrong or expired code"},
    429: {**_PROBLEM, "description": "Rate-limited (Retry-After) or too many attempts"},
    503: {**_PROBLEM, "description": "A dependency is not reachable; retry"},
}
_ME_ANSWERS: dict[int | str, dict[str, Any]] = {
    **MALFORMED_BODY_ANSWER,
    401: {**_PROBLEM, "description": "No valid access token"},
    403: {**_PROBLEM, "description": "Not a customer's token"},
    404: {**_PROBLEM, "description": "Not a customer registered through onboarding"},
    409: {**_PROBLEM, "description": "TCKN bound to another customer, or no code pending"},
    422: {**_PROBLEM, "description": "Invalid input, a wrong code, a refusal of the registry"},
    429: {**_PROBLEM, "description": "Rate-limited or too many attempts"},
    503: {**_PROBLEM, "description": "The registry or another dependency is not reachable; retry"},
}

_bearer = HTTPBearer(auto_error=False, bearerFormat="JWT", description="A customer's access token.")


def client_ip(request: Request) -> str:
    """The caller's address: the peer's, or, from a trusted proxy, the nearest address in
    X-Forwarded-For that is not one of the trusted proxies (entries to its left could be
    forged by the client)."""
    peer = request.client.host if request.client else "unknown"
    trusted: frozenset[str] = request.app.state.trusted_proxies
    if peer not in trusted:
        return peer
    forwarded = [h.strip() for h in request.headers.get("x-forwarded-for", "").split(",") if h.strip()]
    for hop in reversed(forwarded):
        if hop not in trusted:
            return hop[:64]
    return peer


async def _service(request: Request) -> OnboardingService:
    service: OnboardingService = request.app.state.service
    return service


async def _customer(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    """The customer's subject; staff and service-account tokens are refused."""
    principal: Principal = await request.app.state.verifier.verify(bearer_token(request))
    if principal.kind != "customer" or principal.is_service_account:
        raise CallerNotAllowed("only a customer's own token")
    return principal.subject


def _registration_id(registration_id: str) -> str:
    if not _REGISTRATION.fullmatch(registration_id):
        raise errors.RegistrationNotFound()
    return registration_id


ServiceDep = Annotated[OnboardingService, Depends(_service)]
CustomerDep = Annotated[str, Depends(_customer)]
RegistrationId = Annotated[str, Depends(_registration_id)]

router = APIRouter(prefix="/v1")


@router.post(
    "/registrations",
    status_code=202,
    response_model=RegistrationOut,
    responses=_REGISTRATION_ANSWERS,
    tags=["registration"],
)
async def register(body: RegistrationIn, request: Request, svc: ServiceDep) -> Any:
    """Start a registration: a code is mailed to the address. The answer is the same whether or
    not the address has an account (its owner is told so by mail instead)."""
    return await svc.register(body.email, client_ip(request))


@router.post(
    "/registrations/{registration_id}/resend",
    status_code=202,
    response_model=RegistrationOut,
    responses=_REGISTRATION_ANSWERS,
    tags=["registration"],
)
async def resend(registration_id: RegistrationId, request: Request, svc: ServiceDep) -> Any:
    """A new code, replacing the old one."""
    return await svc.resend(registration_id, client_ip(request))


@router.post(
    "/registrations/{registration_id}/verify",
    response_model=StatusOut,
    responses=_REGISTRATION_ANSWERS,
    tags=["registration"],
)
async def verify(registration_id: RegistrationId, body: CodeIn, request: Request, svc: ServiceDep) -> Any:
    """The code from the e-mail: the address is verified."""
    return await svc.verify(registration_id, body.code, client_ip(request))


@router.post(
    "/registrations/{registration_id}/complete",
    status_code=201,
    response_model=CompletedOut,
    responses={**_REGISTRATION_ANSWERS, 200: {"model": CompletedOut, "description": "Completed before"}},
    tags=["registration"],
)
async def complete(
    registration_id: RegistrationId, body: CompleteIn, request: Request, svc: ServiceDep
) -> JSONResponse:
    """The password: the user is created and the personal account opened; then log in at
    ``login_url``. Repeated (a lost answer, a crash half-way), it finishes what is left."""
    done = await svc.complete(registration_id, body.password.get_secret_value(), client_ip(request))
    return JSONResponse(done.body, status_code=201 if done.created else 200)


@router.get("/me", response_model=MeOut, responses=_ME_ANSWERS, tags=["verification"])
async def me(sub: CustomerDep, svc: ServiceDep) -> Any:
    """What is verified, what was accepted, what remains, and the tier."""
    return await svc.me(sub)


@router.post(
    "/me/phone", status_code=202, response_model=PhoneSentOut, responses=_ME_ANSWERS, tags=["verification"]
)
async def send_phone_code(body: PhoneIn, sub: CustomerDep, svc: ServiceDep) -> Any:
    """A code by SMS to the number."""
    return await svc.send_phone_code(sub, body.phone)


@router.post("/me/phone/verify", response_model=MeOut, responses=_ME_ANSWERS, tags=["verification"])
async def verify_phone(body: CodeIn, sub: CustomerDep, svc: ServiceDep) -> Any:
    """The SMS code: the phone is verified."""
    return await svc.verify_phone(sub, body.code)


@router.post("/me/identity", response_model=MeOut, responses=_ME_ANSWERS, tags=["verification"])
async def verify_identity(body: IdentityIn, sub: CustomerDep, svc: ServiceDep) -> Any:
    """The identity, checked against the population registry."""
    return await svc.verify_identity(sub, body.tckn, body.given_name, body.family_name, body.birth_date)


@router.post("/me/consents", response_model=MeOut, responses=_ME_ANSWERS, tags=["verification"])
async def accept_consent(body: ConsentIn, sub: CustomerDep, svc: ServiceDep) -> Any:
    """The current version of the user agreement or the privacy notice, accepted."""
    return await svc.accept_consent(sub, body.document, body.version)
