"""onboarding's error tree: every refusal it answers is a :class:`ProblemError` here, so the
HTTP answer of each is decided in this one file. The front APIs forward these as they are:
the slugs are stable. No refusal carries the personal data it refused."""

from __future__ import annotations

from hiwallet.contracts import problems
from hiwallet.core import http
from hiwallet.core.http import ProblemError


class RegistrationNotFound(http.NotFound):
    """Missing or expired: the same answer."""

    slug = "registration-not-found"
    title = "No such registration, or it has expired"


class RateLimited(http.TooManyRequests):
    """Too many registrations or codes from one address or for one e-mail (the platform's one
    rate-limited type, as the front APIs answer it)."""


class CodeInvalid(ProblemError):
    status = 422
    slug = "code-invalid"
    title = "The code is not right"


class CodeExpired(ProblemError):
    status = 422
    slug = "code-expired"
    title = "The code has expired; ask for a new one"


class TooManyAttempts(ProblemError):
    status = 429
    slug = "too-many-attempts"
    title = "Too many wrong codes; ask for a new one"


class CodeUsed(ProblemError):
    status = 409
    slug = "code-used"
    title = "This step is done already"


class EmailNotVerified(ProblemError):
    status = 409
    slug = "email-not-verified"
    title = "The e-mail address is not verified yet"


class EmailRegistered(ProblemError):
    """Only after the address was verified by its code: its owner may know."""

    status = 409
    slug = "email-registered"
    title = "This address has an account already; log in instead"


class PasswordRefused(ProblemError):
    status = 422
    slug = "password-refused"
    title = "The password is not accepted"


class CustomerNotFound(http.NotFound):
    slug = "customer-not-found"
    title = "No customer registered through onboarding has this identity"


class PhoneInvalid(ProblemError):
    status = 422
    slug = "phone-invalid"
    title = "The phone number is not valid"


class PhoneCodeMissing(ProblemError):
    status = 409
    slug = "phone-code-missing"
    title = "No phone number is being verified; send one first"


class TcknInvalid(ProblemError):
    status = 422
    slug = "tckn-invalid"
    title = "The identity number is not valid"


class BirthDateInvalid(ProblemError):
    """A date the document cannot bound (a JSON Schema ``date`` has no minimum): a refusal of
    the domain, as a wrong check digit is, not of the request's form."""

    status = 422
    slug = "birth-date-invalid"
    title = "The birth date must be between 1900-01-01 and today"


class IdentityMismatch(ProblemError):
    """The registry did not confirm the identity. KPS answers only true or false, so a number
    it does not know, details that do not match and a deceased person are one refusal."""

    status = 422
    slug = "identity-mismatch"
    title = "The population registry did not confirm these details"


class TcknTaken(ProblemError):
    status = 409
    slug = "tckn-taken"
    title = "This identity number belongs to another customer"


class IdentityAlreadyVerified(ProblemError):
    status = 409
    slug = "identity-already-verified"
    title = "This customer's identity is verified already, with another number"


class RegistryUnavailable(http.ServiceUnavailable):
    slug = "registry-unavailable"
    title = "The population registry is not reachable; try again later"


class ConsentVersionInvalid(ProblemError):
    status = 422
    slug = "consent-version-invalid"
    title = "This is not the document's current version"


DependencyUnavailable = problems.DependencyUnavailable


class FaultInjected(Exception):
    """The test fault hook (HIWALLET_ONBOARDING_FAULT_AFTER_USER_CREATED=raise)."""
