"""What every BFF needs, knowing no business word: sealed cookies (:mod:`.seal`), its OpenID
Connect client (:mod:`.oidc`), sessions with refresh, logout and the CSRF check (:mod:`.session`)
the pages' security headers (:mod:`.headers`) and the error page of an unexpected error
(:mod:`.errors`). docs/architecture.md, "The BFFs"."""

from hiwallet.core.bff.errors import ErrorPage
from hiwallet.core.bff.headers import SecurityHeaders, content_security_policy
from hiwallet.core.bff.oidc import GrantRefused, OidcClient, OidcClientConfig, SignInUnavailable, Tokens
from hiwallet.core.bff.seal import KEY_BYTES, Sealer, SealError, parse_key_ring
from hiwallet.core.bff.session import (
    BffSessions,
    CsrfRefused,
    Session,
    SessionCookies,
    is_local_http,
    safe_return_path,
)

__all__ = [
    "KEY_BYTES",
    "BffSessions",
    "CsrfRefused",
    "ErrorPage",
    "GrantRefused",
    "OidcClient",
    "OidcClientConfig",
    "SealError",
    "Sealer",
    "SecurityHeaders",
    "Session",
    "SessionCookies",
    "SignInUnavailable",
    "Tokens",
    "content_security_policy",
    "is_local_http",
    "parse_key_ring",
    "safe_return_path",
]
