"""onboarding's clients of the services it depends on, each a small class over one shared
``httpx.AsyncClient``:

- :class:`ServiceToken`: onboarding's own client-credentials token (the customers' realm,
  audience hiwallet-api), kept until shortly before it expires; one fetch at a time.
- :class:`IdentityAdmin`: the identity service's admin API (find a user by e-mail, create one).
- :class:`WalletApi`: wallet-api as the ``onboarding`` client (open a personal account, raise a
  tier). The `wires` consumer raises the tier to verified through the same ``raise_tier``.
- :class:`Sms`: sms-fake's (an SMS provider's) API.

Whatever cannot be reached, or answers 5xx, is :class:`DependencyUnavailable` (the caller's 503
or the sweep's retry). No personal data, token or password is logged here."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import structlog

from hiwallet.onboarding.settings import OnboardingSettings

log = structlog.get_logger(__name__)

# Fetched again this long before the token's own expiry: a request never carries one about to
# lapse on the way.
TOKEN_MARGIN_S = 30.0


class DependencyUnavailable(Exception):
    """A service or provider onboarding depends on did not answer (or answered 5xx); retryable.
    ``service`` names it (logs and metrics: no personal data)."""

    def __init__(self, service: str, reason: str) -> None:
        super().__init__(f"{service}: {reason}")
        self.service = service


class UnexpectedAnswer(Exception):
    """A dependency answered something this code does not expect (a defect: a 500)."""


class UserExists(Exception):
    """The identity service has a user with this e-mail already."""


def _unavailable(service: str, exc: Exception) -> DependencyUnavailable:
    return DependencyUnavailable(service, type(exc).__name__)


class ServiceToken:
    """onboarding's access token (client credentials), cached until ``TOKEN_MARGIN_S`` before
    its expiry."""

    def __init__(self, client: httpx.AsyncClient, settings: OnboardingSettings) -> None:
        self._client = client
        self._settings = settings
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        if self._token is not None and time.monotonic() < self._expires_at:
            return self._token
        async with self._lock:  # concurrent callers share one fetch
            if self._token is not None and time.monotonic() < self._expires_at:
                return self._token
            s = self._settings
            try:
                response = await self._client.post(
                    s.token_url,
                    data={"grant_type": "client_credentials"},
                    auth=(s.client_id, s.client_secret.get_secret_value()),
                    timeout=s.identity_timeout_s,
                )
            except httpx.HTTPError as exc:
                raise _unavailable("identity", exc) from exc
            if response.status_code >= 500:
                raise DependencyUnavailable("identity", f"token endpoint answered {response.status_code}")
            if response.status_code != 200:
                raise UnexpectedAnswer(f"the token endpoint refused onboarding: {response.status_code}")
            body = response.json()
            self._token = str(body["access_token"])
            lifetime = float(body.get("expires_in", 60))
            self._expires_at = time.monotonic() + max(0.0, lifetime - TOKEN_MARGIN_S)
            return self._token

    def forget(self) -> None:
        """A service refused the token (401): fetch a new one next time."""
        self._token = None

    async def request(self, service: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """``method url`` with the token; once more with a fresh token after a 401."""
        for attempt in (1, 2):
            token = await self.get()
            headers = {**kwargs.pop("headers", {}), "Authorization": f"Bearer {token}"}
            try:
                response = await self._client.request(method, url, headers=headers, **kwargs)
            except httpx.HTTPError as exc:
                raise _unavailable(service, exc) from exc
            if response.status_code == 401 and attempt == 1:
                self.forget()
                kwargs["headers"] = {k: v for k, v in headers.items() if k != "Authorization"}
                continue
            if response.status_code >= 500:
                raise DependencyUnavailable(service, f"answered {response.status_code}")
            return response
        raise AssertionError("unreachable")


class IdentityAdmin:
    """The customers' realm's admin API, as onboarding's service account (manage-users)."""

    def __init__(self, token: ServiceToken, settings: OnboardingSettings) -> None:
        self._token = token
        self._settings = settings

    async def find_by_email(self, email: str) -> FoundUser | None:
        """The user with exactly this e-mail, or None."""
        response = await self._token.request(
            "identity",
            "GET",
            self._settings.admin_users_url,
            params={"email": email, "exact": "true"},
            timeout=self._settings.identity_timeout_s,
        )
        if response.status_code != 200:
            raise UnexpectedAnswer(f"identity's user search answered {response.status_code}")
        for user in response.json():
            if str(user.get("email", "")).lower() == email.lower():
                created = datetime.fromtimestamp(int(user.get("createdTimestamp", 0)) / 1000, UTC)
                return FoundUser(str(user["id"]), created)
        return None

    async def create_user(self, email: str, password: str) -> str:
        """A new enabled user, the e-mail verified (onboarding verified it) and as its
        username; the password sent here and nowhere else. :class:`UserExists` on 409."""
        rep = {
            "username": email,
            "email": email,
            "enabled": True,
            "emailVerified": True,
            "credentials": [{"type": "password", "value": password, "temporary": False}],
        }
        response = await self._token.request(
            "identity",
            "POST",
            self._settings.admin_users_url,
            json=rep,
            timeout=self._settings.identity_timeout_s,
        )
        if response.status_code == 409:
            raise UserExists()
        if response.status_code == 400:
            raise InvalidPassword(_message(response))
        if response.status_code != 201:
            raise UnexpectedAnswer(f"identity's user creation answered {response.status_code}")
        return response.headers["location"].rstrip("/").rsplit("/", 1)[-1]

    async def set_password(self, user_id: str, password: str) -> None:
        """The user's password, replaced (an adopted user gets the password of the request that
        adopts it)."""
        response = await self._token.request(
            "identity",
            "PUT",
            f"{self._settings.admin_users_url}/{user_id}/reset-password",
            json={"type": "password", "value": password, "temporary": False},
            timeout=self._settings.identity_timeout_s,
        )
        if response.status_code == 400:
            raise InvalidPassword(_message(response))
        if response.status_code != 204:
            raise UnexpectedAnswer(f"identity's password reset answered {response.status_code}")


class InvalidPassword(Exception):
    """The identity service refused the user as given (its password rules)."""


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return "refused"
    if isinstance(body, dict):
        found = body.get("errorMessage") or body.get("error_description") or body.get("detail")
        return str(found or "refused")[:200]
    return "refused"


@dataclass(frozen=True)
class FoundUser:
    id: str
    created_at: datetime


@dataclass(frozen=True)
class PersonalAccount:
    account_id: str
    wallet_id: str
    tier: str


class WalletApi:
    """wallet-api as the ``onboarding`` client: the only caller it lets open personal accounts
    and raise tiers. Both calls are idempotent on wallet-api's side (one personal account per
    person; a tier already reached is no change), so a retry after a lost answer is safe."""

    def __init__(self, token: ServiceToken, settings: OnboardingSettings) -> None:
        self._token = token
        self._settings = settings

    def _url(self, path: str) -> str:
        return f"{self._settings.wallet_api_url.rstrip('/')}{path}"

    async def open_personal(self, subject: str) -> PersonalAccount:
        """The customer's personal account (opened now, or the one they have) and its TRY wallet."""
        response = await self._token.request(
            "wallet-api",
            "POST",
            self._url("/v1/accounts/personal"),
            json={"subject": subject},
            timeout=self._settings.wallet_api_timeout_s,
        )
        if response.status_code not in (200, 201):
            raise UnexpectedAnswer(f"wallet-api's personal account answered {response.status_code}")
        return _account(response.json())

    async def raise_tier(self, account_id: str, tier: str) -> str:
        """Raise ``account_id``'s tier to ``tier``; the tier it has afterwards. A tier already
        above ``tier`` (wallet-api refuses a lowering, 422 tier-downgrade) is left as it is."""
        response = await self._token.request(
            "wallet-api",
            "PUT",
            self._url(f"/v1/accounts/{account_id}/tier"),
            json={"tier": tier},
            timeout=self._settings.wallet_api_timeout_s,
        )
        if response.status_code == 422 and "tier-downgrade" in response.text:
            return str(response.json().get("current", tier))
        if response.status_code != 200:
            raise UnexpectedAnswer(f"wallet-api's tier answered {response.status_code}")
        return str(response.json()["tier"])


def _account(body: dict[str, Any]) -> PersonalAccount:
    wallet = next((w for w in body.get("wallets", []) if w.get("currency") == "TRY"), None)
    if wallet is None:
        raise UnexpectedAnswer("wallet-api's personal account has no TRY wallet")
    return PersonalAccount(str(body["id"]), str(wallet["id"]), str(body.get("tier") or "unknown"))


class Sms:
    """An SMS provider's API (sms-fake locally): POST /v1/sms with a bearer key."""

    def __init__(self, client: httpx.AsyncClient, settings: OnboardingSettings) -> None:
        self._client = client
        self._settings = settings

    async def send(self, to: str, body: str, idempotency_key: str) -> None:
        s = self._settings
        try:
            response = await self._client.post(
                f"{s.sms_url.rstrip('/')}/v1/sms",
                json={"to": to, "body": body, "from": s.sms_sender},
                headers={
                    "Authorization": f"Bearer {s.sms_api_key.get_secret_value()}",
                    "Idempotency-Key": idempotency_key,
                },
                timeout=s.sms_timeout_s,
            )
        except httpx.HTTPError as exc:
            raise _unavailable("sms", exc) from exc
        if response.status_code >= 500:
            raise DependencyUnavailable("sms", f"answered {response.status_code}")
        if response.status_code not in (200, 202):
            raise UnexpectedAnswer(f"the SMS provider refused a message: {response.status_code}")
