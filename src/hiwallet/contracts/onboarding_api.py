"""onboarding's public shapes: the registration (no token) and the customer's verification
(``/v1/me``), as onboarding takes and answers them and personal-mobile-api documents them (the
front API forwards the body as it came; services do not import each other, both import these).
One definition, so a request the front API documents as valid is one onboarding takes.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictStr

from hiwallet.core.text import EMAIL_PATTERN, PrintableText

__all__ = [
    "PHONE_PATTERN",
    "REGISTRATION_PATTERN",
    "TCKN_PATTERN",
    "CodeIn",
    "CompleteIn",
    "CompletedOut",
    "ConsentIn",
    "ConsentOut",
    "IdentityIn",
    "MeOut",
    "PhoneIn",
    "PhoneSentOut",
    "RegistrationIn",
    "RegistrationOut",
    "StatusOut",
]

REGISTRATION_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
# What normalize_phone (onboarding's service.py) takes, exactly: E.164 (+ or 00), or a Turkish
# mobile number as people write it (05xx …, 5xx …, 90 5xx …), digits apart as people space them
# (a space, a dot, a hyphen, parentheses). A Turkish number (+90) is a mobile one (5xx: an SMS
# reaches only those); E.164 has 8 to 15 digits.
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
# The T.C. identity number: 11 digits, the first not 0 (its check digits are onboarding's
# refusal, ``tckn-invalid``).
TCKN_PATTERN = r"^[1-9][0-9]{10}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegistrationIn(_In):
    email: Annotated[StrictStr, Field(max_length=254, pattern=EMAIL_PATTERN)]


class CodeIn(_In):
    code: Annotated[StrictStr, Field(pattern=r"^[0-9]{6}$", description="The 6 digits sent.")]


class CompleteIn(_In):
    # SecretStr: never in a repr, a log line or a validation error.
    password: Annotated[SecretStr, Field(min_length=10, max_length=256)]


class PhoneIn(_In):
    phone: Annotated[
        StrictStr,
        Field(min_length=8, max_length=32, pattern=PHONE_PATTERN, description="E.164, or 05xx … in Turkey"),
    ]


class IdentityIn(_In):
    tckn: Annotated[
        StrictStr,
        Field(min_length=11, max_length=11, pattern=TCKN_PATTERN, description="The T.C. identity number"),
    ]
    given_name: Annotated[PrintableText, Field(min_length=1, max_length=100)]
    family_name: Annotated[PrintableText, Field(min_length=1, max_length=100)]
    # between 1900 and today: onboarding's refusal (birth-date-invalid), the document cannot say it
    birth_date: date


class ConsentIn(_In):
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
