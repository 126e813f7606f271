"""staff-admin's client of the staff realm's admin API, as its own service account
(``staff-admin``, ``manage-users``): Keycloak's paths and shapes, so a real Keycloak serves it
unchanged.

What an invitation needs: a user with no password and the required actions UPDATE_PASSWORD and
CONFIGURE_TOTP, and the identity service's "execute actions" e-mail with the link (it writes
the mail with its single-use action token and sends it over SMTP to the mail catcher locally).
The link's lifespan is the invitation's, so an expired invitation's link is refused by the
identity service too.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import structlog

from hiwallet.staff_admin.errors import IdentityUnavailable
from hiwallet.staff_admin.settings import StaffAdminSettings

log = structlog.get_logger(__name__)

INVITATION_ACTIONS = ["UPDATE_PASSWORD", "CONFIGURE_TOTP"]
# A token is fetched again this long before it expires.
_TOKEN_MARGIN_S = 30.0


class UserExists(Exception):
    """The staff realm has a user with this e-mail already."""


class StaffRealm:
    def __init__(self, settings: StaffAdminSettings, client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self._own = client is None
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(settings.identity_timeout_s, connect=min(2.0, settings.identity_timeout_s)),
            follow_redirects=False,
        )
        base = settings.staff_issuer_base.rstrip("/")
        self.users_url = f"{base}/admin/realms/{settings.staff_realm}/users"
        self.token_url = f"{settings.staff_issuer}/protocol/openid-connect/token"
        self._token: str | None = None
        self._token_until = 0.0
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
        if self._own:
            await self.client.aclose()

    async def _bearer(self) -> dict[str, str]:
        async with self._lock:
            if self._token is None or time.monotonic() >= self._token_until:
                response = await self._call(
                    "POST",
                    self.token_url,
                    auth=(self.settings.client_id, self.settings.client_secret.get_secret_value()),
                    data={"grant_type": "client_credentials"},
                )
                body = response.json()
                self._token = str(body["access_token"])
                self._token_until = time.monotonic() + float(body.get("expires_in", 60)) - _TOKEN_MARGIN_S
            return {"Authorization": f"Bearer {self._token}"}

    async def _call(
        self, method: str, url: str, *, ok: tuple[int, ...] = (200,), **kwargs: Any
    ) -> httpx.Response:
        try:
            response = await self.client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            log.warning("staff realm unreachable", error=type(exc).__name__)
            raise IdentityUnavailable("the staff identity provider is not reachable; retry") from exc
        if response.status_code not in ok:
            # Never the body: it may echo what was sent (an address).
            log.warning("staff realm refused", method=method, status=response.status_code)
            raise IdentityUnavailable(f"the staff identity provider answered {response.status_code}")
        return response

    async def create_user(self, email: str, name: str | None) -> str:
        """A new user for ``email``: enabled, no password, the invitation's required actions.
        Raises :class:`UserExists` if the realm has one with this address."""
        first, _, last = (name or "").partition(" ")
        rep: dict[str, Any] = {
            "username": email,
            "email": email,
            "enabled": True,
            "emailVerified": True,
            "requiredActions": INVITATION_ACTIONS,
        }
        if first:
            rep["firstName"] = first
        if last:
            rep["lastName"] = last
        response = await self._call(
            "POST", self.users_url, ok=(201, 409), json=rep, headers=await self._bearer()
        )
        if response.status_code == 409:
            raise UserExists(email)
        return response.headers["location"].rstrip("/").rsplit("/", 1)[-1]

    async def find_by_email(self, email: str) -> dict[str, Any] | None:
        response = await self._call(
            "GET", self.users_url, params={"email": email, "exact": "true"}, headers=await self._bearer()
        )
        found = [u for u in response.json() if str(u.get("email", "")).lower() == email.lower()]
        return found[0] if found else None

    async def prepare_again(self, user_id: str) -> None:
        """A user made for an earlier invitation that expired or was revoked: enabled again,
        with the invitation's actions, for the new one."""
        await self._call(
            "PUT",
            f"{self.users_url}/{user_id}",
            ok=(204,),
            json={"enabled": True, "requiredActions": INVITATION_ACTIONS},
            headers=await self._bearer(),
        )

    async def disable(self, user_id: str) -> None:
        await self._call(
            "PUT",
            f"{self.users_url}/{user_id}",
            ok=(204, 404),
            json={"enabled": False},
            headers=await self._bearer(),
        )

    async def send_invitation(self, user_id: str, lifespan_s: int) -> None:
        """The identity service's "execute actions" e-mail: set a password, set up the code."""
        await self._call(
            "PUT",
            f"{self.users_url}/{user_id}/execute-actions-email",
            ok=(204,),
            params={
                "client_id": self.settings.invitation_client_id,
                "redirect_uri": self.settings.invitation_redirect_uri,
                "lifespan": str(lifespan_s),
            },
            json=INVITATION_ACTIONS,
            headers=await self._bearer(),
        )
