"""The identity service's one error tree.

Every error is a :class:`~hiwallet.core.http.ProblemError`, answered as problem+json, except
:class:`OAuthError` and its children: on the OAuth endpoints clients (python-keycloak among
them) expect RFC 6749's ``{"error": ..., "error_description": ...}``, so the app maps those to
that shape in one handler.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hiwallet.core.http import ProblemError, ServiceUnavailable


class IdentityError(ProblemError):
    slug = "identity-error"
    title = "Identity error"


class OAuthError(IdentityError):
    """An RFC 6749 §5.2 error. ``error`` is the OAuth code; the description is for humans."""

    error: ClassVar[str] = "invalid_request"
    slug = "oauth-error"

    def oauth_body(self) -> dict[str, Any]:
        return {"error": self.error, "error_description": self.detail or self.title}


class InvalidRequest(OAuthError):
    error = "invalid_request"
    title = "Invalid request"


class InvalidClient(OAuthError):
    status = 401
    error = "invalid_client"
    title = "Invalid client or invalid client credentials"


class InvalidGrant(OAuthError):
    error = "invalid_grant"
    title = "Invalid grant"


class InvalidUserCredentials(InvalidGrant):
    """Keycloak answers wrong direct-grant credentials with 401 (and ``invalid_grant``)."""

    status = 401


class UnauthorizedClient(OAuthError):
    error = "unauthorized_client"
    title = "The client may not use this grant"


class UnsupportedGrantType(OAuthError):
    error = "unsupported_grant_type"
    title = "Unsupported grant type"


class InvalidScope(OAuthError):
    error = "invalid_scope"
    title = "Invalid scopes"


class InvalidToken(OAuthError):
    """A bearer token presented to userinfo is not valid (RFC 6750 §3.1)."""

    status = 401
    error = "invalid_token"
    title = "Token verification failed"


class AdminUnauthorized(IdentityError):
    status = 401
    slug = "admin-unauthorized"
    title = "A service account token is required"


class AdminForbidden(IdentityError):
    status = 403
    slug = "admin-forbidden"
    title = "The caller lacks the realm-management role this needs"


class UserNotFound(IdentityError):
    status = 404
    slug = "user-not-found"
    title = "User not found"


class UserExists(IdentityError):
    status = 409
    slug = "user-exists"
    title = "User exists with same username or email"


class InvalidUser(IdentityError):
    status = 400
    slug = "invalid-user"
    title = "The user representation is not valid"


class LoginPageError(IdentityError):
    """The login page cannot go on (unknown client, bad redirect URI, expired flow).

    Shown as a page, never as a redirect: a redirect to an unverified URI is an open redirect.
    """

    status = 400
    slug = "login-error"
    title = "We could not sign you in"


class PasswordHashingBusy(IdentityError, ServiceUnavailable):
    """No password-hashing slot became free in time (``argon2_max_concurrent_hashes``, each
    holding ``argon2_memory_kib``): nothing was done, a retry is welcome (``Retry-After``)."""

    status = 503
    slug = "password-hashing-busy"
    title = "Too many sign-ins at once; try again in a moment"
