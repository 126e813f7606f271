"""Identity tests: the real service over HTTP on a free port, on a fresh PostgreSQL database.

python-keycloak speaks ``requests``, so it needs a listening server: uvicorn runs in a thread
with its own event loop. Each server gets a database cloned from a migrated template.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest
import uvicorn
from keycloak import KeycloakAdmin, KeycloakOpenID

from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.identity.app import create_identity_app
from hiwallet.identity.settings import IdentitySettings
from tests import pgtemplate
from tests.servers import free_port, wait_started

SECRETS = {
    "personal-web-bff": "dev-personal-web-bff-secret",
    "business-api": "dev-business-api-secret",
    "business-web-bff": "dev-business-web-bff-secret",
    "onboarding": "dev-onboarding-secret",
    "merchant-demo": "dev-merchant-demo-secret",
    "backoffice-bff": "dev-backoffice-bff-secret",
    "staff-admin": "dev-staff-admin-secret",
}
ADMIN_CLIENT = {"hiwallet": "onboarding", "hiwallet-staff": "staff-admin"}
PASSWORD = "correct horse battery"
T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous test code, whatever loop is running.

    The HTTP-driving tests are synchronous (python-keycloak and a browser are blocking
    clients); a worker thread with its own loop keeps them off the test session's loop.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass
class IdentityServer:
    realm: str
    base_url: str
    database: str
    settings: IdentitySettings
    server: uvicorn.Server
    thread: threading.Thread
    _admins: dict[str, KeycloakAdmin] = field(default_factory=dict)

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/realms/{self.realm}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    def openid(self, client_id: str) -> KeycloakOpenID:
        return KeycloakOpenID(
            server_url=self.base_url + "/",
            realm_name=self.realm,
            client_id=client_id,
            client_secret_key=SECRETS.get(client_id),
            timeout=10,
        )

    def admin(self, client_id: str | None = None) -> KeycloakAdmin:
        client_id = client_id or ADMIN_CLIENT[self.realm]
        if client_id not in self._admins:
            self._admins[client_id] = KeycloakAdmin(
                server_url=self.base_url + "/",
                realm_name=self.realm,
                client_id=client_id,
                client_secret_key=SECRETS[client_id],
                timeout=10,
            )
        return self._admins[client_id]

    def create_user(self, username: str, password: str | None = PASSWORD, **extra: Any) -> str:
        payload: dict[str, Any] = {
            "username": username,
            "email": extra.pop("email", f"{username}@example.com"),
            "enabled": True,
            **extra,
        }
        if password is not None:
            payload["credentials"] = [{"type": "password", "value": password, "temporary": False}]
        return self.admin().create_user(payload)

    def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Run one statement on this server's database (tests inspect and age rows)."""

        async def go() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(db.owner_dsn(self.database, get_settings()))
            try:
                return list(await conn.fetch(query, *args))
            finally:
                await conn.close()

        return run_sync(go())

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def test_settings(port: int, **overrides: Any) -> IdentitySettings:
    base = f"http://127.0.0.1:{port}"
    values: dict[str, Any] = {
        "public_url": base,
        "staff_public_url": base,
        # Cheap hashing: these tests are about flows, not about argon2's cost.
        "argon2_time_cost": 1,
        "argon2_memory_kib": 1024,
        "argon2_parallelism": 1,
        "smtp_enabled": False,
        "key_cache_s": 0.0,
        # the signing key's gauge follows a rotation quickly (tests/identity/test_operations.py)
        "metrics_interval_s": 0.5,
        **overrides,
    }
    return IdentitySettings(**values)


def start_server(realm: str, database: str, *, port: int | None = None, **overrides: Any) -> IdentityServer:
    """``port`` to start again where a stopped server was (tests of an issuer outage)."""
    port = port or free_port()
    settings = test_settings(port, **overrides)
    app = create_identity_app(realm, settings, database=database)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", log_config=None
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"identity-{realm}-{port}", daemon=True)
    thread.start()
    wait_started(server, thread, f"identity server for {realm}")
    return IdentityServer(realm, f"http://127.0.0.1:{port}", database, settings, server, thread)


@pytest.fixture(scope="session")
async def identity_template() -> AsyncIterator[str]:
    name = await pgtemplate.make_template("identity")
    yield name
    await pgtemplate.drop_database(name)


@pytest.fixture(scope="session")
async def staff_identity_template() -> AsyncIterator[str]:
    name = await pgtemplate.make_template("staff_identity")
    yield name
    await pgtemplate.drop_database(name)


ServerFactory = Callable[..., IdentityServer]


@pytest.fixture
def identity_factory(identity_template: str, staff_identity_template: str) -> Iterator[ServerFactory]:
    """Start a realm's server with settings overrides: ``factory("hiwallet", lockout_s=1)``."""
    started: list[IdentityServer] = []
    templates = {"hiwallet": identity_template, "hiwallet-staff": staff_identity_template}

    def factory(realm: str, **overrides: Any) -> IdentityServer:
        database = run_sync(pgtemplate.clone(templates[realm]))
        try:
            server = start_server(realm, database, **overrides)
        except Exception:
            run_sync(pgtemplate.drop_database(database))
            raise
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()
        run_sync(pgtemplate.drop_database(server.database))


@pytest.fixture
def customer_idp(identity_factory: ServerFactory) -> IdentityServer:
    return identity_factory("hiwallet")


@pytest.fixture
def staff_idp(identity_factory: ServerFactory) -> IdentityServer:
    return identity_factory("hiwallet-staff")


# Driving the login pages over HTTP, as a browser would.

_INPUT = re.compile(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"')
_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


def hidden_fields(html: str) -> dict[str, str]:
    return dict(_INPUT.findall(html))


def form_action(base_url: str, html: str) -> str:
    match = _ACTION.search(html)
    assert match, f"no form in page: {html[:500]}"
    return base_url + match[1]


def post_form(browser: httpx.Client, base_url: str, page: httpx.Response, **fields: str) -> httpx.Response:
    data = {**hidden_fields(page.text), **fields}
    return browser.post(form_action(base_url, page.text), data=data)
