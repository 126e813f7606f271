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
from datetime import date
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictStr

from hiwallet.core.auth import CallerNotAllowed, Principal, bearer_token
from hiwallet.core.http import MALFORMED_BODY_ANSWER, PROBLEM_CONTENT_TYPE
from hiwallet.core.text import EMAIL_PATTERN, PrintableText
from hiwallet.onboarding import errors
from hiwallet.onboarding.service import OnboardingService

REGISTRATION_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
_REGISTRATION = re.compile(REGISTRATION_PATTERN)
# What normalize_phone (service.py) takes, exactly: E.164 (+ or 00), or a Turkish mobile number
# as people write it (05xx …, 5xx …, 90 5xx …), digits apart as people space them (a space,
# a dot, a hyphen, parentheses). A Turkish
# number (+90) is a mobile one (5xx: an SMS reaches only those); E.164 has 8 to 15 digits.
_SEP = r"[ ().-]{0,2}"  # "(0532) 123 45 67": two at most between digits
_DIGIT = rf"[0-9]{_SEP}"
_TURKISH_MOBILE = rf"5{_SEP}(?:{_DIGIT}){{9}}"
PHONE_PATTERN = (
    rf"^{_SEP}(?:"
    rf"(?:\+|0{_SEP}0){_SEP}(?:9{_SEP}0{_SEP}{_TURKISH_MOBILE}"
    rf"|[1-8]{_SEP}(?:{_DIGIT}){{7,14}}|9{_SEP}[1-9]{_SEP}(?:{_DIGIT}){{6,13}})"
    rf"|(?:0{_SEP}|9{_SEP}0{_SEP})?{_TURKISH_MOBILE}"
    r")$"
)
# The T.C. identity number: 11 digits, the first not 0 (its check digits are the service's
# refusal, ``tckn-invalid``).
TCKN_PATTERN = r"^[1-9][0-9]{10}$"


class RegistrationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: Annotated[StrictStr, Field(max_length=254, pattern=EMAIL_PATTERN)]


class CodeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: Annotated[StrictStr, Field(pattern=r"^[0-9]{6}$", description="The 6 digits sent.")]


class CompleteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # SecretStr: never in a repr, a log line or a validation error.
    password: Annotated[SecretStr, Field(min_length=10, max_length=256)]


class PhoneIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    phone: Annotated[
        StrictStr,
        Field(min_length=8, max_length=32, pattern=PHONE_PATTERN, description="E.164, or 05xx … in Turkey"),
    ]


class IdentityIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tckn: Annotated[
        StrictStr,
        Field(min_length=11, max_length=11, pattern=TCKN_PATTERN, description="The T.C. identity number"),
    ]
    given_name: Annotated[PrintableText, Field(min_length=1, max_length=100)]
    family_name: Annotated[PrintableText, Field(min_length=1, max_length=100)]
    # between 1900 and today: the service's refusal (birth-date-invalid), the document cannot say it
    birth_date: date


class ConsentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    document: Literal["user_agreement", "privacy_notice"]
    version: Annotated[PrintableText, Field(min_length=1, max_length=40)]


class RegistrationOut(BaseModel):
    registration_id: str
    expires_at: str


class StatusOut(BaseModel):
    registration_id: str
    status: str


class CompletedOut(StatusOut):
    account_id: str
    login_url: str


class ConsentOut(BaseModel):
    document: str
    version: str
    accepted_at: str


class MeOut(BaseModel):
    tier: str
    account_id: str | None
    phone_verified: bool
    phone: str | None = Field(description="Masked: the country code and the last two digits.")
    identity_verified: bool
    consents: list[ConsentOut]
    remaining: list[str]


class PhoneSentOut(BaseModel):
    phone: str
    expires_at: str


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
