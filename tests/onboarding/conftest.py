"""onboarding tests: the real service over HTTP on a free port with a fresh hiwallet_onboarding,
the real identity servers (both realms, for the session: addresses are unique per test), a real
wallet-api on a fresh wallet database, and the outside institutions' fakes (mail catcher,
sms-fake, nvi-fake), each served in-process; real PostgreSQL throughout."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.fakes.mail import MailCatcherSettings, create_mail_catcher_app
from hiwallet.fakes.nvi import NviFakeSettings, create_nvi_fake_app
from hiwallet.fakes.sms import SmsFakeSettings, create_sms_fake_app
from hiwallet.onboarding.app import create_onboarding_app
from hiwallet.onboarding.service import OnboardingService
from hiwallet.onboarding.settings import OnboardingSettings
from tests.identity.conftest import IdentityServer
from tests.servers import serve, stop
from tests.wallet_api.conftest import client_token, customer_idp, idps, staff_idp, start_wallet_api

__all__ = ["customer_idp", "idps", "staff_idp"]  # the session's identity servers, shared

PROBLEM = "https://hiwallet.dev/problems/"
PASSWORD = "onboarding pass 1"
SMS_KEY = "sms_test_key"
# nvi-fake's citizens (docs/fakes.md)
AYSE = {"tckn": "10000000146", "given_name": "Ayşe", "family_name": "Yılmaz", "birth_date": "1990-04-01"}
MEHMET = {"tckn": "12345678950", "given_name": "Mehmet", "family_name": "Öztürk", "birth_date": "1985-01-31"}
ISMAIL = {"tckn": "23456789060", "given_name": "ismail", "family_name": "çelik", "birth_date": "1978-06-15"}
DECEASED = {"tckn": "45678901280", "given_name": "Hasan", "family_name": "Demir", "birth_date": "1940-02-02"}
NOT_FOUND = {"tckn": "98765432150", "given_name": "Ayşe", "family_name": "Yılmaz", "birth_date": "1990-04-01"}
UNAVAILABLE = {"tckn": "56789012390", "given_name": "Ali", "family_name": "Veli", "birth_date": "1980-01-01"}
_CODE = re.compile(r"\b([0-9]{6})\b")


def new_email() -> str:
    return f"onb-{uuid.uuid4().hex[:12]}@example.com"


def assert_problem(response: httpx.Response, slug: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body: dict[str, Any] = response.json()
    assert body["type"] == PROBLEM + slug, body
    return body


@dataclass
class Onboarding:
    """The running onboarding and what surrounds it, with the steps a client takes."""

    url: str
    http: httpx.AsyncClient
    settings: OnboardingSettings
    database: str
    wallet_database: str
    wallet_api_url: str
    mail_url: str
    sms_url: str
    nvi_url: str
    idp: IdentityServer
    service: OnboardingService

    # -- reading the fakes ------------------------------------------------------------------

    async def mails_to(self, email: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=self.mail_url) as mail:
            found = (await mail.get("/api/v1/search", params={"query": f"to:{email}"})).json()
            return [(await mail.get(f"/api/v1/message/{m['ID']}")).json() for m in found["messages"]]

    async def email_code(self, email: str) -> str:
        """The code of the newest mail to ``email``."""
        mails = await self.mails_to(email)
        assert mails, "no mail"
        found = _CODE.search(mails[0]["Text"])
        assert found, mails[0]["Subject"]
        return found.group(1)

    async def sms_code(self, phone: str) -> str:
        async with httpx.AsyncClient(base_url=self.sms_url) as sms:
            sent = (
                await sms.get("/v1/sms", params={"to": phone}, headers={"Authorization": f"Bearer {SMS_KEY}"})
            ).json()
        assert sent["data"], "no SMS"
        found = _CODE.search(sent["data"][0]["body"])
        assert found
        return found.group(1)

    # -- the steps --------------------------------------------------------------------------

    async def register(self, email: str, **headers: str) -> str:
        response = await self.http.post("/v1/registrations", json={"email": email}, headers=headers)
        assert response.status_code == 202, response.text
        return str(response.json()["registration_id"])

    async def verify(self, registration_id: str, code: str) -> httpx.Response:
        return await self.http.post(f"/v1/registrations/{registration_id}/verify", json={"code": code})

    async def complete(self, registration_id: str, password: str = PASSWORD) -> httpx.Response:
        return await self.http.post(
            f"/v1/registrations/{registration_id}/complete", json={"password": password}
        )

    async def registered(self, email: str | None = None) -> tuple[str, dict[str, Any]]:
        """A whole registration; the address and the completion's answer."""
        email = email or new_email()
        registration_id = await self.register(email)
        assert (await self.verify(registration_id, await self.email_code(email))).status_code == 200
        response = await self.complete(registration_id)
        assert response.status_code == 201, response.text
        return email, response.json()

    def token(self, email: str, password: str = PASSWORD) -> str:
        response = httpx.post(
            self.idp.token_url,
            data={
                "grant_type": "password",
                "client_id": "personal-mobile-api",
                "username": email,
                "password": password,
                "scope": "openid",
            },
        )
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])

    async def customer(self) -> tuple[str, dict[str, str]]:
        """A registered customer: the address and the Authorization header of their token."""
        email, _ = await self.registered()
        return email, {"Authorization": f"Bearer {self.token(email)}"}

    async def verify_phone(self, auth: dict[str, str], phone: str) -> httpx.Response:
        sent = await self.http.post("/v1/me/phone", json={"phone": phone}, headers=auth)
        assert sent.status_code == 202, sent.text
        return await self.http.post(
            "/v1/me/phone/verify", json={"code": await self.sms_code(phone)}, headers=auth
        )

    async def accept_all(self, auth: dict[str, str]) -> httpx.Response:
        response = await self.http.post(
            "/v1/me/consents", json={"document": "user_agreement", "version": "2026-01"}, headers=auth
        )
        assert response.status_code == 200, response.text
        return await self.http.post(
            "/v1/me/consents", json={"document": "privacy_notice", "version": "2026-01"}, headers=auth
        )

    # -- the databases ----------------------------------------------------------------------

    @asynccontextmanager
    async def owner(self, database: str | None = None) -> AsyncIterator[asyncpg.Connection]:
        conn = await asyncpg.connect(db.owner_dsn(database or self.database, get_settings()))
        try:
            yield conn
        finally:
            await conn.close()

    async def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.owner() as conn:
            return list(await conn.fetch(query, *args))

    async def wallet_sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.owner(self.wallet_database) as conn:
            return list(await conn.fetch(query, *args))

    def users_with(self, email: str) -> list[dict[str, Any]]:
        users: list[dict[str, Any]] = self.idp.admin().get_users({"email": email, "exact": True})
        return users


@dataclass(frozen=True)
class Fakes:
    mail_url: str
    smtp_port: int
    sms_url: str
    nvi_url: str


@pytest.fixture(scope="session")
def fakes() -> Iterator[Fakes]:
    """The mail catcher, sms-fake and nvi-fake, for the session (what they keep is per address
    or number, unique per test)."""
    mail_app = create_mail_catcher_app(MailCatcherSettings(smtp_port=0))
    mail_url, mail_server, mail_thread = serve(mail_app, "mail-catcher")
    sms_url, sms_server, sms_thread = serve(create_sms_fake_app(SmsFakeSettings(api_key=SMS_KEY)), "sms-fake")
    nvi_url, nvi_server, nvi_thread = serve(create_nvi_fake_app(NviFakeSettings()), "nvi-fake")
    yield Fakes(mail_url, int(mail_app.state.catcher.smtp_port), sms_url, nvi_url)
    for server, thread in ((mail_server, mail_thread), (sms_server, sms_thread), (nvi_server, nvi_thread)):
        stop(server, thread)


@pytest.fixture
def onboarding_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Overrides of OnboardingSettings for a test (parametrize it, indirect=True)."""
    overrides: dict[str, Any] = getattr(request, "param", {})
    return overrides


@pytest.fixture
async def onb(
    onboarding_db: str,
    wallet_db: str,
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
    fakes: Fakes,
    onboarding_settings: dict[str, Any],
) -> AsyncIterator[Onboarding]:
    wallet_url, _wallet_settings, wallet_server, wallet_thread = start_wallet_api(
        wallet_db, customer_idp, staff_idp
    )
    settings = OnboardingSettings(
        database=onboarding_db,
        customer_issuer_base=customer_idp.base_url,
        staff_issuer_base=staff_idp.base_url,
        wallet_api_url=wallet_url,
        smtp_port=fakes.smtp_port,
        sms_url=fakes.sms_url,
        sms_api_key=SMS_KEY,
        nvi_url=f"{fakes.nvi_url}/Service/KPSPublic.asmx",
        **{"rate_per_ip": 1000, "rate_per_address": 20, **onboarding_settings},
    )
    app = create_onboarding_app(settings, background=False)
    # As core.http.serve runs a service: uvicorn does not rewrite the peer from X-Forwarded-For
    # (onboarding decides whom to believe, trusted_proxies).
    url, server, thread = serve(app, "onboarding", proxy_headers=False)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            yield Onboarding(
                url,
                http,
                settings,
                onboarding_db,
                wallet_db,
                wallet_url,
                fakes.mail_url,
                fakes.sms_url,
                fakes.nvi_url,
                customer_idp,
                app.state.service,
            )
    finally:
        stop(server, thread)
        stop(wallet_server, wallet_thread)


def service_token(idp: IdentityServer) -> str:
    return client_token(idp, "onboarding")


def run_in_service_loop(onb: Onboarding, coro: Any) -> Any:
    """Run ``coro`` on the onboarding server's own loop (its pool belongs to it)."""
    loop = onb.service.pool._loop
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)
