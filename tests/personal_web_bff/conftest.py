"""personal-web-bff's tests: the BFF over real HTTP on a port fixed for the session (the customer
realm's personal-web-bff client must name its redirect URI), real identity servers, a real
wallet-api with a fresh database per test, and a real browser (tests/browser/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.async_api import Page
from pydantic import SecretStr

from hiwallet.personal_web_bff.app import create_personal_web_bff_app
from hiwallet.personal_web_bff.settings import PersonalWebBffSettings
from tests import pgtemplate
from tests.browser.conftest import browser, context, page  # noqa: F401
from tests.identity.conftest import PASSWORD, IdentityServer, run_sync, start_server
from tests.servers import free_port, serve, stop
from tests.wallet_api.conftest import (  # noqa: F401
    Customer,
    WalletApi,
    api,
    customer_idp,
    staff_idp,
    test_realms,
    wallet_api_settings,
)

CLIENT = "personal-web-bff"


@pytest.fixture(scope="session")
def bff_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def idps(
    tmp_path_factory: pytest.TempPathFactory, bff_port: int
) -> Iterator[tuple[IdentityServer, IdentityServer]]:
    """wallet-api's tests' identity servers, the web client's redirect URI at this session's BFF."""

    async def clones() -> tuple[str, str, str, str]:
        t1 = await pgtemplate.make_template("identity")
        t2 = await pgtemplate.make_template("staff_identity")
        return t1, t2, await pgtemplate.clone(t1), await pgtemplate.clone(t2)

    t1, t2, d1, d2 = run_sync(clones())
    realms = test_realms(tmp_path_factory.mktemp("realms"))
    path = realms / "hiwallet.json"
    realm = json.loads(path.read_text())
    for client in realm["clients"]:
        if client["clientId"] == CLIENT:
            client["redirectUris"] = [f"http://127.0.0.1:{bff_port}/auth/callback"]
    path.write_text(json.dumps(realm))
    customer = start_server("hiwallet", d1, realms_dir=realms)
    staff = start_server("hiwallet-staff", d2, realms_dir=realms)
    yield customer, staff
    customer.stop()
    staff.stop()

    async def drop() -> None:
        for name in (d1, d2, t1, t2):
            await pgtemplate.drop_database(name)

    run_sync(drop())


@dataclass
class Bff:
    base_url: str
    settings: PersonalWebBffSettings
    api: WalletApi


def bff_settings(base_url: str, idp: IdentityServer, **upstreams: Any) -> PersonalWebBffSettings:
    return PersonalWebBffSettings(
        public_url=base_url,
        issuer=idp.issuer,
        client_secret=SecretStr("dev-personal-web-bff-secret"),
        upstream_timeout_s=5.0,
        **upstreams,
    )


@asynccontextmanager
async def running_bff(api: WalletApi, port: int, **settings: Any) -> AsyncIterator[Bff]:  # noqa: F811
    base = f"http://127.0.0.1:{port}"
    values = bff_settings(base, api.idp, wallet_api_url=api.base_url, **settings)
    url, server, thread = serve(create_personal_web_bff_app(values), CLIENT, port=port)
    try:
        yield Bff(url, values, api)
    finally:
        stop(server, thread)


@pytest.fixture
async def bff(api: WalletApi, bff_port: int) -> AsyncIterator[Bff]:  # noqa: F811
    async with running_bff(api, bff_port) as running:
        yield running


async def sign_in(page: Page, bff: Bff, who: Customer, path: str = "/") -> None:  # noqa: F811
    """Through the identity provider's page, as a person does (username and password)."""
    await page.goto(bff.base_url + path)
    await page.get_by_label("E-mail or username").fill(who.username)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(bff.base_url + path)


__all__ = ["Bff", "bff_settings", "running_bff", "sign_in"]
