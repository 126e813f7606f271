"""A BFF's OpenID Connect client: the authorization-code flow with PKCE, by its own confidential
client (RFC 6749 §4.1, RFC 7636, OpenID Connect Core §3.1), refresh and logout.

The endpoints are Keycloak's paths under the issuer (as python-keycloak and every Keycloak
client assume). The browser is sent to ``browser_issuer`` (the address a person's browser
reaches), the back channel talks to ``issuer``; both are the same on one machine.

The ID token is taken from the token endpoint over the back channel, authenticated by the
client's secret: OpenID Connect Core §3.1.3.7 (6) lets such a client rely on that channel
instead of the token's signature; its issuer, audience and ``nonce`` are still checked, the
nonce binding it to the login this browser started."""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import structlog
from pydantic import SecretStr

from hiwallet.core.http import ServiceUnavailable, Unauthorized

__all__ = [
    "GrantRefused",
    "OidcClient",
    "OidcClientConfig",
    "SignInUnavailable",
    "Tokens",
]

log = structlog.get_logger(__name__)

# The identity provider away for this long is told to the person as "try again shortly".
RETRY_AFTER_S = 5


class SignInUnavailable(ServiceUnavailable):
    """The identity provider did not answer, or answered with a server error: retry later."""

    slug = "sign-in-unavailable"
    title = "Sign-in is not available right now"

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, headers={"Retry-After": str(RETRY_AFTER_S)})


class GrantRefused(Unauthorized):
    """The provider refused the code or the refresh token (expired, used, session ended): the
    person signs in again."""

    slug = "sign-in-required"
    title = "Please sign in again"


@dataclass(frozen=True)
class OidcClientConfig:
    issuer: str
    client_id: str
    client_secret: SecretStr
    redirect_uri: str
    browser_issuer: str | None = None
    scope: str = "openid"
    timeout_s: float = 5.0


@dataclass(frozen=True)
class Tokens:
    access_token: str
    access_expires_at: float  # epoch seconds
    refresh_token: str
    refresh_expires_at: float
    subject: str


def _claims_unverified(jwt: str) -> dict[str, Any]:
    """A JWT's payload, not verified (see the module's note on the back channel)."""
    try:
        payload = jwt.split(".")[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise GrantRefused("the provider's token is not a JWT") from exc
    if not isinstance(claims, dict):
        raise GrantRefused("the provider's token is not a JWT")
    return claims


class OidcClient:
    def __init__(self, config: OidcClientConfig, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._own = http is None
        self._http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s), limits=httpx.Limits(max_connections=20)
        )
        self._base = f"{config.issuer.rstrip('/')}/protocol/openid-connect"
        browser = (config.browser_issuer or config.issuer).rstrip("/")
        self._browser_base = f"{browser}/protocol/openid-connect"

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    def authorization_url(self, *, state: str, nonce: str, code_challenge: str, locale: str | None) -> str:
        query = {
            "client_id": self.config.client_id,
            "redirect_uri": self.config.redirect_uri,
            "response_type": "code",
            "scope": self.config.scope,
            "state": state,
            "nonce": nonce,
            "code_challenge": code_challenge,
            "code_challenge_method": "S256",
        }
        if locale:
            query["ui_locales"] = locale
        return f"{self._browser_base}/auth?{urlencode(query)}"

    async def _token(self, form: dict[str, str]) -> dict[str, Any]:
        auth = (self.config.client_id, self.config.client_secret.get_secret_value())
        try:
            response = await self._http.post(f"{self._base}/token", data=form, auth=auth)
        except httpx.HTTPError as exc:
            log.warning("identity provider unreachable", error=type(exc).__name__)
            raise SignInUnavailable("the identity provider did not answer") from exc
        if response.status_code >= 500:
            log.warning("identity provider failed", status=response.status_code)
            raise SignInUnavailable("the identity provider failed")
        if response.status_code != 200:
            try:
                error = str(response.json().get("error", "?"))
            except ValueError:
                error = "?"
            log.info("grant refused", status=response.status_code, oauth_error=error)
            raise GrantRefused(f"the identity provider refused the grant ({error})")
        body: dict[str, Any] = response.json()
        return body

    def _tokens(self, body: dict[str, Any], now: float) -> Tokens:
        try:
            access = str(body["access_token"])
            refresh = str(body["refresh_token"])
            expires_in = int(body["expires_in"])
            refresh_in = int(body.get("refresh_expires_in", expires_in))
        except (KeyError, TypeError, ValueError) as exc:
            raise GrantRefused("the provider's answer lacks the tokens") from exc
        subject = _claims_unverified(access).get("sub")
        if not isinstance(subject, str) or not subject:
            raise GrantRefused("the access token names no subject")
        return Tokens(access, now + expires_in, refresh, now + refresh_in, subject)

    async def exchange(self, code: str, code_verifier: str, nonce: str) -> Tokens:
        now = time.time()
        body = await self._token(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self.config.redirect_uri,
                "code_verifier": code_verifier,
            }
        )
        id_token = body.get("id_token")
        if not isinstance(id_token, str):
            raise GrantRefused("the provider sent no ID token")
        claims = _claims_unverified(id_token)
        audience = claims.get("aud")
        audiences = (
            [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        )
        if (
            claims.get("iss") != self.config.issuer.rstrip("/")
            or self.config.client_id not in audiences
            or claims.get("nonce") != nonce
        ):
            raise GrantRefused("the ID token is not for this login")
        return self._tokens(body, now)

    async def refresh(self, refresh_token: str) -> Tokens:
        now = time.time()
        return self._tokens(
            await self._token({"grant_type": "refresh_token", "refresh_token": refresh_token}), now
        )

    async def end_session(self, refresh_token: str) -> None:
        """End the person's session at the provider (its refresh tokens stop working). Best
        effort: the BFF forgets the session whatever the provider answers."""
        auth = (self.config.client_id, self.config.client_secret.get_secret_value())
        try:
            response = await self._http.post(
                f"{self._base}/logout", data={"refresh_token": refresh_token}, auth=auth
            )
        except httpx.HTTPError as exc:
            log.warning("identity provider unreachable at logout", error=type(exc).__name__)
            return
        if response.status_code not in (200, 204):
            log.info("logout refused by the provider", status=response.status_code)
