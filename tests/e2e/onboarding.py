"""Onboarding's end-to-end system: onboarding, the mail catcher, sms-fake, nvi-fake, and the
first wire's path (bank-fake, topup-webhook, wallet-consumer) as real processes (``hiwallet
run NAME --port N``, each configured by its environment: fresh ``hiwallet_onboarding``,
``hiwallet_wallet`` and ``hiwallet_topup`` clones, the module's RabbitMQ virtual host), and in
this process, as the withdrawal system runs them, the identity servers (the customers' realm:
its admin API creates the users, its token endpoint logs them in) and wallet-api in a thread
(onboarding opens the accounts and raises the tiers there).

One system per test module (eight processes cost seconds of CPU on this machine): the tests
keep apart by their own addresses and phone numbers; each TCKN of nvi-fake's citizens can be
bound once per module (onboarding refuses a second customer with it), so each test uses its
own citizens. :meth:`OnboardingSystem.heal` runs before each test: an onboarding a test killed
or started with settings of its own is started again as the module's standard one.

Everything personal a test sends (addresses, phone numbers, TCKNs) is remembered in
``personal``; at the end of the module no process's log may hold any of it
(:meth:`OnboardingSystem.leaks`).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from hiwallet.core import db
from hiwallet.core.settings import get_settings
from tests import pgtemplate
from tests.e2e import harness
from tests.e2e.harness import Children, Process
from tests.identity.conftest import IdentityServer
from tests.servers import free_port
from tests.wallet_api.conftest import WalletApi, running_api

ONBOARDING = "onboarding"
MAIL = "mail-catcher"
SMS = "sms-fake"
NVI = "nvi-fake"
BANK_FAKE = "bank-fake"
TOPUP = "topup-webhook"
WALLET_CONSUMER = "wallet-consumer"
ROLES = (MAIL, SMS, NVI, BANK_FAKE, TOPUP, WALLET_CONSUMER, ONBOARDING)
FAKES = (MAIL, SMS, NVI, BANK_FAKE)

SMS_KEY = "sms_dev_key"
PASSWORD = "e2e onboarding pass 1"
PROBLEM = "https://hiwallet.dev/problems/"
FAULT_ENV = "HIWALLET_ONBOARDING_FAULT_AFTER_USER_CREATED"
_CODE = re.compile(r"\b([0-9]{6})\b")

# nvi-fake's citizens (docs/fakes.md)
AYSE = {"tckn": "10000000146", "given_name": "Ayşe", "family_name": "Yılmaz", "birth_date": "1990-04-01"}
MEHMET = {"tckn": "12345678950", "given_name": "Mehmet", "family_name": "Öztürk", "birth_date": "1985-01-31"}
ISMAIL = {"tckn": "23456789060", "given_name": "ismail", "family_name": "çelik", "birth_date": "1978-06-15"}
DECEASED = {"tckn": "45678901280", "given_name": "Hasan", "family_name": "Demir", "birth_date": "1940-02-02"}
NOT_FOUND = {"tckn": "98765432150", "given_name": "Ayşe", "family_name": "Yılmaz", "birth_date": "1990-04-01"}
UNAVAILABLE = {"tckn": "56789012390", "given_name": "Ali", "family_name": "Veli", "birth_date": "1980-01-01"}


def new_email() -> str:
    return f"e2e-onb-{uuid.uuid4().hex[:12]}@example.com"


def new_phone() -> str:
    return f"+90532{random.randrange(10**7):07d}"


def problem(response: httpx.Response, slug: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body: dict[str, Any] = response.json()
    assert body["type"] == PROBLEM + slug, body
    return body


@dataclass
class OnboardingSystem:
    vhost: str
    onboarding_db: str
    wallet_db: str
    topup_db: str
    log_dir: Path
    api: WalletApi
    children: Children = field(default_factory=Children)
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    custom: bool = False
    # What no log may hold: every address, phone number and TCKN the tests sent.
    personal: set[str] = field(default_factory=set)

    @property
    def idp(self) -> IdentityServer:
        return self.api.idp

    # -- life ----------------------------------------------------------------------------------

    async def open(self) -> None:
        for role in ROLES:
            self.ports[role] = free_port()
        self.ports["smtp"] = free_port()
        for role in ROLES:
            self.processes[role] = self._process(role)
        await self.start(*self.processes.values())

    async def close(self) -> None:
        await self.children.close()

    async def heal(self) -> None:
        """onboarding as the module's standard one, running and ready."""
        if self.custom or not self.processes[ONBOARDING].alive():
            await self.processes[ONBOARDING].stop()
            self.processes[ONBOARDING] = self._process(ONBOARDING)
            self.custom = False
            await self.start(self.processes[ONBOARDING])
        dead = [r for r in ROLES if r != ONBOARDING and not self.processes[r].alive()]
        assert not dead, f"exited on their own: {dead}"

    def leaks(self) -> list[str]:
        """Every line of every process's log, and of the run's log file (the in-process
        identity and wallet-api write there, and every process too), that holds personal data
        a test sent."""
        needles = tuple(self.personal)
        found = [f"{p.name}: {line}" for p in self.children.processes for line in p.log_holds(*needles)]
        run_log = Path(os.environ.get("HIWALLET_LOG_FILE", "/nonexistent"))
        if run_log.exists():
            text = run_log.read_text(errors="replace")
            found += [
                f"run log: {line[:300]}" for line in text.splitlines() if any(n in line for n in needles)
            ]
        return found

    @property
    def onboarding(self) -> Process:
        return self.processes[ONBOARDING]

    def url(self, role: str) -> str:
        return f"http://127.0.0.1:{self.ports[role]}"

    def _env(self, role: str, settings: Mapping[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(FAULT_ENV, None)
        env["HIWALLET_AMQP_URL"] = harness.amqp_url(self.vhost)
        port = self.ports[role]
        prefix: str
        values: dict[str, Any]
        if role == ONBOARDING:
            prefix = "HIWALLET_ONBOARDING_"
            values = {
                "port": port,
                "database": self.onboarding_db,
                "customer_issuer_base": self.idp.base_url,
                "staff_issuer_base": self.api.staff_idp.base_url,
                "wallet_api_url": self.api.base_url,
                "smtp_port": self.ports["smtp"],
                "sms_url": self.url(SMS),
                "sms_api_key": SMS_KEY,
                "nvi_url": f"{self.url(NVI)}/Service/KPSPublic.asmx",
                "bank_url": self.url(BANK_FAKE),
                "bank_api_key": harness.BANK_API_KEY,
                # every test registers from 127.0.0.1: the per-IP limit is not what is tested
                "rate_per_ip": 10_000,
                "sweep_interval_s": 1.0,
            }
        elif role == MAIL:
            prefix, values = "MAIL_CATCHER_", {"port": port, "smtp_port": self.ports["smtp"]}
        elif role == SMS:
            prefix, values = "SMS_FAKE_", {"port": port, "api_key": SMS_KEY}
        elif role == NVI:
            prefix, values = "NVI_FAKE_", {"port": port}
        elif role == BANK_FAKE:
            prefix = "BANK_FAKE_"
            values = {"port": port, "webhook_url": f"{self.url(TOPUP)}/v1/webhooks/topup/bank"}
        elif role == TOPUP:
            prefix = "HIWALLET_TOPUP_"
            values = {"port": port, "database": self.topup_db, "bank_url": self.url(BANK_FAKE)}
        else:
            prefix, values = "HIWALLET_WALLET_CONSUMER_", {"port": port, "database": self.wallet_db}
        values.update(settings)
        env = harness.env_of(env, **{prefix + k.upper(): v for k, v in values.items() if k != "fault"})
        if "fault" in settings:
            env[FAULT_ENV] = str(settings["fault"])
        return env

    def _process(self, role: str, **settings: Any) -> Process:
        process = Process(
            name=role,
            port=self.ports[role],
            env=self._env(role, settings),
            log_dir=self.log_dir,
            ready_path="/health" if role in FAKES else "/ready",
        )
        self.children.processes.append(process)
        return process

    async def replace_onboarding(self, **settings: Any) -> Process:
        """onboarding stopped and started again with ``settings`` (``fault="exit"``: the fault
        hook's environment variable), until heal()."""
        await self.onboarding.stop()
        process = self.processes[ONBOARDING] = self._process(ONBOARDING, **settings)
        self.custom = True
        await self.start(process)
        return process

    @staticmethod
    async def start(*processes: Process) -> None:
        for process in processes:
            process.start()
        await asyncio.gather(*(p.wait_ready() for p in processes))

    # -- a client's steps ----------------------------------------------------------------------

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url(ONBOARDING), timeout=30)

    async def mails_to(self, email: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=self.url(MAIL), timeout=10) as mail:
            found = (await mail.get("/api/v1/search", params={"query": f"to:{email}"})).json()
            return [(await mail.get(f"/api/v1/message/{m['ID']}")).json() for m in found["messages"]]

    async def email_code(self, email: str, count: int = 1) -> str:
        """The code of the newest mail to ``email``, once ``count`` mails have arrived (SMTP
        is asynchronous to the answer)."""

        async def arrived() -> list[dict[str, Any]] | None:
            mails = await self.mails_to(email)
            return mails if len(mails) >= count else None

        mails = await harness.until(arrived, 20, f"mail {count} to the address")
        found = _CODE.search(mails[0]["Text"])
        assert found, mails[0]["Subject"]
        return found.group(1)

    async def sms_code(self, phone: str) -> str:
        async with httpx.AsyncClient(base_url=self.url(SMS), timeout=10) as sms:

            async def sent() -> list[dict[str, Any]] | None:
                got = await sms.get(
                    "/v1/sms", params={"to": phone}, headers={"Authorization": f"Bearer {SMS_KEY}"}
                )
                data: list[dict[str, Any]] = got.json()["data"]
                return data or None

            data = await harness.until(sent, 20, "an SMS to the number")
        found = _CODE.search(data[0]["body"])
        assert found
        return found.group(1)

    async def register(self, http: httpx.AsyncClient, email: str) -> str:
        self.personal.add(email)
        response = await http.post("/v1/registrations", json={"email": email})
        assert response.status_code == 202, response.text
        return str(response.json()["registration_id"])

    async def registered(
        self, http: httpx.AsyncClient, email: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """A whole registration: the address and the completion's answer."""
        email = email or new_email()
        registration_id = await self.register(http, email)
        verified = await http.post(
            f"/v1/registrations/{registration_id}/verify", json={"code": await self.email_code(email)}
        )
        assert verified.status_code == 200, verified.text
        done = await http.post(f"/v1/registrations/{registration_id}/complete", json={"password": PASSWORD})
        assert done.status_code == 201, done.text
        return email, done.json()

    def token(self, email: str) -> dict[str, str]:
        """The customer logged in (identity's token endpoint): their Authorization header."""
        response = httpx.post(
            self.idp.token_url,
            data={
                "grant_type": "password",
                "client_id": "personal-mobile-api",
                "username": email,
                "password": PASSWORD,
                "scope": "openid",
            },
        )
        assert response.status_code == 200, response.text
        return {"Authorization": f"Bearer {response.json()['access_token']}"}

    async def verify_phone(self, http: httpx.AsyncClient, auth: dict[str, str]) -> str:
        phone = new_phone()
        self.personal.update({phone, phone[3:]})  # E.164 and the national form
        sent = await http.post("/v1/me/phone", json={"phone": phone}, headers=auth)
        assert sent.status_code == 202, sent.text
        done = await http.post("/v1/me/phone/verify", json={"code": await self.sms_code(phone)}, headers=auth)
        assert done.status_code == 200, done.text
        return phone

    async def identity(
        self, http: httpx.AsyncClient, auth: dict[str, str], who: Mapping[str, str]
    ) -> httpx.Response:
        self.personal.add(who["tckn"])
        return await http.post("/v1/me/identity", json=dict(who), headers=auth)

    async def accept_all(self, http: httpx.AsyncClient, auth: dict[str, str]) -> None:
        for document in ("user_agreement", "privacy_notice"):
            response = await http.post(
                "/v1/me/consents", json={"document": document, "version": "2026-01"}, headers=auth
            )
            assert response.status_code == 200, response.text

    # -- what the others hold ------------------------------------------------------------------

    async def fetch(self, database: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(db.owner_dsn(database, get_settings()))
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.close()

    def users_with(self, email: str) -> list[dict[str, Any]]:
        users: list[dict[str, Any]] = self.idp.admin().get_users({"email": email, "exact": True})
        return users

    async def accounts_of(self, sub: str) -> list[asyncpg.Record]:
        """wallet-api's personal accounts of the identity ``sub``."""
        return await self.fetch(
            self.wallet_db,
            "SELECT a.id, a.tier FROM wallet.accounts a JOIN wallet.members m"
            " ON m.account_id = a.id AND m.bucket = a.bucket WHERE a.kind = 'personal' AND m.subject = $1",
            sub,
        )

    async def customer(self, sub: str) -> asyncpg.Record:
        [row] = await self.fetch(self.onboarding_db, "SELECT * FROM onboarding.customers WHERE sub = $1", sub)
        return row


@asynccontextmanager
async def onboarding_system(
    vhost: str,
    templates: tuple[str, str, str],
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
    log_dir: Path,
) -> AsyncIterator[OnboardingSystem]:
    """``templates``: the onboarding, wallet and topup databases' migrated templates."""
    await harness.clear_topology(vhost)
    onboarding_db, wallet_db, topup_db = [await pgtemplate.clone(t) for t in templates]
    try:
        async with running_api(wallet_db, customer_idp, staff_idp) as api:
            system = OnboardingSystem(vhost, onboarding_db, wallet_db, topup_db, log_dir, api)
            try:
                await system.open()
                yield system
            finally:
                await system.close()
    finally:
        await harness.clear_topology(vhost)
        for name in (onboarding_db, wallet_db, topup_db):
            await pgtemplate.drop_database(name)
