"""The customer realm's admin API, read only: staff find a customer by e-mail through it.

wallet-api holds no e-mail addresses (its members are issuer and subject); the identity
provider does. wallet-api asks with its own service account (client ``wallet-api``,
realm-management ``view-users`` only): a client-credentials token, kept until shortly before it
expires, then ``GET /admin/realms/{realm}/users?email=…&exact=true``. Unreachable, failing or
slow -> 503 ``identity-unavailable`` (the employee retries).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import structlog

from hiwallet.contracts import problems
from hiwallet.wallet_api.settings import WalletApiSettings

log = structlog.get_logger(__name__)

MAX_MATCHES = 20  # an exact e-mail names one person; a few more would be a data problem to see
TOKEN_MARGIN_S = 30.0  # a token is fetched again this long before it expires


class IdentityUnavailable(problems.IdentityUnavailable):
    """The customer realm's admin API could not be asked."""


class CustomerIdentities:
    def __init__(self, settings: WalletApiSettings, http_client: httpx.AsyncClient | None = None) -> None:
        base = settings.customer_issuer_base.rstrip("/")
        self.token_url = f"{settings.customer_issuer}/protocol/openid-connect/token"
        self.users_url = f"{base}/admin/realms/{settings.customer_realm}/users"
        self.client_id = settings.identity_admin_client
        self.secret = settings.identity_admin_secret
        self._own_client = http_client is None
        timeout = settings.identity_admin_timeout_s
        self.http = http_client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(1.0, timeout)),
            limits=httpx.Limits(max_connections=10),
            follow_redirects=False,
        )
        self._token: tuple[str, float] | None = None
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
        if self._own_client:
            await self.http.aclose()

    async def subjects_by_email(self, email: str) -> list[str]:
        """The ids (``sub``) of the customer-realm users with exactly this e-mail address."""
        try:
            token = await self._access_token()
            response = await self.http.get(
                self.users_url,
                params={"email": email, "exact": "true", "max": str(MAX_MATCHES)},
                headers={"Authorization": f"Bearer {token}"},
            )
            if response.status_code == 401:  # revoked or rotated early: once more, fresh
                self._token = None
                token = await self._access_token()
                response = await self.http.get(
                    self.users_url,
                    params={"email": email, "exact": "true", "max": str(MAX_MATCHES)},
                    headers={"Authorization": f"Bearer {token}"},
                )
            response.raise_for_status()
            users = response.json()
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            # The address is personal data: never in the log.
            log.warning("identity admin api failed", error=type(exc).__name__)
            raise IdentityUnavailable("the identity provider could not be asked; retry") from exc
        if not isinstance(users, list):
            raise IdentityUnavailable("the identity provider's answer was not readable; retry")
        wanted = email.casefold()
        return [
            u["id"]
            for u in users
            if isinstance(u, dict)
            and isinstance(u.get("id"), str)
            and str(u.get("email", "")).casefold() == wanted
        ]

    async def _access_token(self) -> str:
        async with self._lock:
            if self._token is not None and self._token[1] > time.monotonic():
                return self._token[0]
            response = await self.http.post(
                self.token_url,
                auth=(self.client_id, self.secret.get_secret_value()),
                data={"grant_type": "client_credentials"},
            )
            response.raise_for_status()
            body = response.json()
            token = str(body["access_token"])
            lifetime = float(body.get("expires_in", 60))
            self._token = (token, time.monotonic() + max(0.0, lifetime - TOKEN_MARGIN_S))
            return token
