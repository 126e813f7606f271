"""The front door's token check: a front API accepts only a token issued for it.

The token must be signed by the trusted issuer (the customer realm), its audience must name
both the front API itself and the internal services' shared audience (which verify it again),
and the caller must be of the kind this front API serves: a person on a personal front API, a
client's service account on a merchants' one.

401 (``WWW-Authenticate: Bearer error="invalid_token"``) for a token that is not for this door:
another issuer (a staff token), another audience (a merchant's token on the personal API, a
customer's token on the merchants' one), expired, malformed. The client should get another
token. 403 ``caller-not-allowed`` only for a token that IS for this door (both audiences) but
of the wrong kind of caller (a service account on a personal API, a person on the merchants'
one): the token is good, this caller simply may not use it here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from fastapi import Request

from hiwallet.core.auth import (
    CallerNotAllowed,
    Principal,
    TokenVerifier,
    TrustedIssuer,
    WrongAudience,
    bearer_token,
)

__all__ = ["CallerKind", "FrontTokens"]

# Who a front API serves: people (personal) or clients acting as themselves (merchants).
CallerKind = Literal["person", "service_account"]


class FrontTokens:
    """Verifies a request's bearer token for the front API ``audience``."""

    def __init__(
        self,
        issuer_base: str,
        realm: str,
        audience: str,
        internal_audience: str,
        caller: CallerKind,
        *,
        verifier: TokenVerifier | None = None,
    ) -> None:
        self.audience = audience
        self.internal_audience = internal_audience
        self.caller = caller
        self._own = verifier is None
        # The issuer's audience is the front API's own name; the internal one is checked here.
        # The verifier caches what it verified, keyed by the whole token until it expires.
        self.verifier = verifier or TokenVerifier(self.issuers(issuer_base, realm, audience))

    @staticmethod
    def issuers(issuer_base: str, realm: str, audience: str) -> Sequence[TrustedIssuer]:
        return [TrustedIssuer.keycloak(issuer_base, realm, "customer", audience)]

    async def aclose(self) -> None:
        if self._own:
            await self.verifier.aclose()

    async def verify(self, request: Request) -> Principal:
        principal = await self.verifier.verify(bearer_token(request))
        aud = principal.claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if self.internal_audience not in audiences:
            raise WrongAudience(f"the token's audience does not include {self.internal_audience!r}")
        if (self.caller == "service_account") != principal.is_service_account:
            wanted = "a client's service account" if self.caller == "service_account" else "a person"
            raise CallerNotAllowed(f"this front API serves {wanted}")
        return principal
