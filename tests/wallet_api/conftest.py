"""wallet-api tests: the real service over HTTP on a free port with a fresh database, real
tokens from real identity servers (both realms), real PostgreSQL.

The identity servers live for the session (users are unique per test); each test gets its own
wallet-api and its own wallet database cloned from the migrated template.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn

from hiwallet.contracts.staff import StaffMember
from hiwallet.core import db
from hiwallet.identity.settings import REALMS_DIR
from hiwallet.ledger import get_ledger_settings
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection
from hiwallet.wallet_api.app import create_wallet_api_app
from hiwallet.wallet_api.identities import CustomerIdentities
from hiwallet.wallet_api.service import WalletService
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.staff_desk import StaffDesk
from tests import pgtemplate
from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer, run_sync, start_server
from tests.servers import free_port, wait_started

PROBLEM = "https://hiwallet.dev/problems/"
TL = 100
# A promo programme id of the right form that names none: for requests refused before it is read
ANY_PROGRAMME = "00000000-0000-7000-8000-000000000000"


MERCHANTS = ("merchant-demo", "merchant-two", "merchant-three")


def test_realms(directory: Path) -> Path:
    """The production realm files plus two more merchant integrations (clients with a service
    account), so tests can link different businesses to different identities."""
    for name in ("hiwallet", "hiwallet-staff"):
        realm = json.loads((REALMS_DIR / f"{name}.json").read_text())
        if name == "hiwallet":
            demo = next(c for c in realm["clients"] if c["clientId"] == "merchant-demo")
            for extra in MERCHANTS[1:]:
                realm["clients"].append({**demo, "clientId": extra, "secret": f"dev-{extra}-secret"})
                SECRETS[extra] = f"dev-{extra}-secret"
        (directory / f"{name}.json").write_text(json.dumps(realm))
    return directory


@pytest.fixture(scope="session")
def idps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IdentityServer, IdentityServer]]:
    async def clones() -> tuple[str, str, str, str]:
        t1 = await pgtemplate.make_template("identity")
        t2 = await pgtemplate.make_template("staff_identity")
        return t1, t2, await pgtemplate.clone(t1), await pgtemplate.clone(t2)

    t1, t2, d1, d2 = run_sync(clones())
    realms = test_realms(tmp_path_factory.mktemp("realms"))
    customer = start_server("hiwallet", d1, realms_dir=realms)
    staff = start_server("hiwallet-staff", d2, realms_dir=realms)
    yield customer, staff
    customer.stop()
    staff.stop()

    async def drop() -> None:
        for name in (d1, d2, t1, t2):
            await pgtemplate.drop_database(name)

    run_sync(drop())


@pytest.fixture(scope="session")
def customer_idp(idps: tuple[IdentityServer, IdentityServer]) -> IdentityServer:
    return idps[0]


@pytest.fixture(scope="session")
def staff_idp(idps: tuple[IdentityServer, IdentityServer]) -> IdentityServer:
    return idps[1]


# A password grant hashes with argon2 in the identity server's thread of this process: on a loaded
# machine (CI's two workers) one took 7.6 s, past httpx's default 5 s.
TOKEN_TIMEOUT_S = 30.0


def client_token(idp: IdentityServer, client_id: str) -> str:
    response = httpx.post(
        idp.token_url,
        auth=(client_id, SECRETS[client_id]),
        data={"grant_type": "client_credentials"},
        timeout=TOKEN_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    token: str = response.json()["access_token"]
    return token


def password_token(idp: IdentityServer, username: str) -> str:
    response = httpx.post(
        idp.token_url,
        data={
            "grant_type": "password",
            "client_id": "personal-mobile-api",
            "username": username,
            "password": PASSWORD,
            "scope": "openid",
        },
        timeout=TOKEN_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    token: str = response.json()["access_token"]
    return token


def subject_of(token: str) -> str:
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return str(claims["sub"])


@dataclass
class Customer:
    username: str
    token: str
    subject: str
    account_id: str
    wallet_id: str
    number: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Business:
    account_id: str
    wallet_id: str
    number: str
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class WalletApi:
    """A running wallet-api with its database, and helpers to make customers and businesses."""

    base_url: str
    database: str
    idp: IdentityServer
    staff_idp: IdentityServer
    http: httpx.AsyncClient
    pool: asyncpg.Pool
    ledger: Ledger
    service: WalletService
    onboarding_token: str
    server: uvicorn.Server
    thread: threading.Thread
    _merchant_token: str | None = field(default=None)

    async def contract(self, account_id: str) -> None:
        """Raise a personal account to Contracted as an employee does (the staff desk's path,
        in process: tests/wallet_api/test_staff_contract.py tests the endpoint)."""
        identities = CustomerIdentities(self.service.settings)
        try:
            desk = StaffDesk(self.pool, self.ledger, self.service.settings, identities)
            view = await desk.contract("staff:test", account_id, "signed_agreement", "TEST-AGREEMENT")
            assert view["tier"] == "contracted", view
        finally:
            await identities.aclose()

    @property
    def onboarding(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.onboarding_token}"}

    async def customer(self, tier: str = "verified", *, funds: int = 0) -> Customer:
        username = f"c{uuid.uuid4().hex[:12]}"
        self.idp.create_user(username)
        token = password_token(self.idp, username)
        subject = subject_of(token)
        opened = await self.http.post(
            "/v1/accounts/personal", json={"subject": subject}, headers=self.onboarding
        )
        assert opened.status_code == 201, opened.text
        account = opened.json()
        if tier != "unknown":
            # onboarding raises up to verified; Contracted is an employee's, on evidence
            raised = await self.http.put(
                f"/v1/accounts/{account['id']}/tier",
                json={"tier": "verified" if tier == "contracted" else tier},
                headers=self.onboarding,
            )
            assert raised.status_code == 200, raised.text
        if tier == "contracted":
            await self.contract(account["id"])
        [wallet] = account["wallets"]
        if funds:
            await self.fund(wallet["id"], funds)
        return Customer(username, token, subject, account["id"], wallet["id"], wallet["number"])

    async def business(
        self, name: str = "Kahve Dükkanı", *, funds: int = 0, client: str | None = None
    ) -> Business:
        """A business opened by an operator; a fresh service-account identity (or ``client``'s
        real one) linked to it, as `hiwallet business link` does."""
        account = await self.service.open_business(name, operator="operator:test")
        token = client_token(self.idp, client or "merchant-demo")
        await self.service.link(account["id"], self.idp.issuer, subject_of(token), operator="operator:test")
        [wallet] = account["wallets"]
        if funds:
            await self.fund(wallet["id"], funds)
        return Business(account["id"], wallet["id"], wallet["number"], token)

    async def programme(
        self,
        business: Business,
        *,
        amount_per_customer: int = 100 * TL,
        budget: int = 1_000 * TL,
        days: int = 90,
        accept: bool = True,
    ) -> str:
        """A promo programme the business proposes over HTTP; accepted by an employee (through
        the service: the staff endpoints are tests/wallet_api/test_staff_money.py's)."""
        proposed = await self.http.post(
            "/v1/promo-programmes",
            json={
                "from_wallet": business.wallet_id,
                "name": "Hoş geldin",
                "amount_per_customer": amount_per_customer,
                "budget_minor": budget,
                "expires_at": (datetime.now(UTC) + timedelta(days=days)).isoformat(),
            },
            headers=business.auth,
        )
        assert proposed.status_code == 201, proposed.text
        programme_id: str = proposed.json()["id"]
        if accept:
            employee = StaffMember("test-employee", None, frozenset())
            await self.service.staff.decide_programme(employee, programme_id, accept=True, reason=None)
        return programme_id

    async def fund(self, wallet_id: str, amount: int) -> None:
        await self.ledger.topup(
            f"fund-{uuid.uuid4().hex}",
            wallet_id,
            amount,
            provider="stripe",
            actor="operator:test",
            ref="fund",
        )

    async def balance(self, wallet_id: str) -> dict[str, int]:
        b = await self.ledger.store.wallet_balance(wallet_id)
        return {"cash": b.cash, "promo": b.promo, "held": b.held}

    async def counts(self) -> dict[str, int]:
        row = await self.pool.fetchrow(
            "SELECT (SELECT count(*) FROM ledger.transactions) AS transactions,"
            " (SELECT count(*) FROM ledger.lines) AS lines,"
            " (SELECT count(*) FROM wallet.idempotency_keys) AS keys,"
            " (SELECT coalesce(sum(used), 0) FROM wallet.limit_usage) AS used,"
            " (SELECT count(*) FROM wallet.accounts) AS accounts,"
            " (SELECT count(*) FROM wallet.wallets) AS wallets"
        )
        return dict(row)

    @asynccontextmanager
    async def owner_connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection as the database's owner: for what a test does that the service's role
        may not (age a record, remove a member, lock a ledger row)."""
        conn = await asyncpg.connect(db.owner_dsn(self.database))
        try:
            yield conn
        finally:
            await conn.close()

    async def as_owner(self, sql: str, *args: Any) -> str:
        """One statement as the database's owner."""
        async with self.owner_connection() as conn:
            return str(await conn.execute(sql, *args))

    async def verify(self) -> None:
        report = await self.ledger.store.verify()
        assert report.ok, report.problems

    async def post(
        self, path: str, body: Any, auth: dict[str, str], key: str | None = "auto"
    ) -> httpx.Response:
        headers = dict(auth)
        if key is not None:
            headers["Idempotency-Key"] = str(uuid.uuid4()) if key == "auto" else key
        return await self.http.post(path, json=body, headers=headers)

    async def transfer(
        self, sender: Customer | Business, to_number: str, amount: int, key: str | None = "auto", **extra: Any
    ) -> httpx.Response:
        body = {"from_wallet": sender.wallet_id, "to_wallet_number": to_number, "amount": amount, **extra}
        return await self.post("/v1/transfers", body, sender.auth, key)


def start_wallet_api(
    database: str, customer_idp: IdentityServer, staff_idp: IdentityServer, **overrides: Any
):  # type: ignore[no-untyped-def]
    port = free_port()
    settings = WalletApiSettings(
        port=port,
        customer_issuer_base=customer_idp.base_url,
        staff_issuer_base=staff_idp.base_url,
        **overrides,
    )
    app = create_wallet_api_app(settings, database=database)
    server = uvicorn.Server(
        uvicorn.Config(
            # log_config=None: uvicorn leaves logging to ours (JSON), as `serve` does in a service
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            log_config=None,
        )
    )
    thread = threading.Thread(target=server.run, name=f"wallet-api-{port}", daemon=True)
    thread.start()
    wait_started(server, thread, "wallet-api")
    return f"http://127.0.0.1:{port}", settings, server, thread


@pytest.fixture
def wallet_api_settings() -> dict[str, Any]:
    """Overrides of WalletApiSettings for a test (parametrize indirectly or override the fixture)."""
    return {}


@asynccontextmanager
async def running_api(
    database: str, customer_idp: IdentityServer, staff_idp: IdentityServer, **overrides: Any
) -> AsyncIterator[WalletApi]:
    base_url, settings, server, thread = start_wallet_api(database, customer_idp, staff_idp, **overrides)
    # The tests' own service and ledger (making businesses, funding wallets) connect as the
    # application role too, as wallet-api does.
    pool = await db.create_pool(
        database, role=db.app_role("wallet"), min_size=1, max_size=4, init=init_connection
    )
    store = LedgerStore(pool, transit_legs=get_ledger_settings().transit_legs)
    ledger = Ledger(store, Fees.from_settings())
    service = WalletService(pool, store, Fees.from_settings(), settings)
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            yield WalletApi(
                base_url,
                database,
                customer_idp,
                staff_idp,
                http,
                pool,
                ledger,
                service,
                client_token(customer_idp, "onboarding"),
                server,
                thread,
            )
    finally:
        server.should_exit = True
        await pool.close()
        thread.join(timeout=15)


@pytest.fixture
async def api(
    wallet_db: str,
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
    wallet_api_settings: dict[str, Any],
) -> AsyncIterator[WalletApi]:
    async with running_api(wallet_db, customer_idp, staff_idp, **wallet_api_settings) as running:
        yield running


def assert_problem(response: httpx.Response, slug: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body: dict[str, Any] = response.json()
    assert body["type"] == PROBLEM + slug, body
    assert body["status"] == status
    return body
