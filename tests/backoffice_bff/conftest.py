"""backoffice-bff tests: the panel served on a free port, in front of the real staff realm (its
backoffice-bff client's redirect URI pointed at this BFF, mailing through the catcher),
staff-admin and wallet-api on their own cloned databases; employees are made as staff-admin's
tests make them (a password, TOTP enrolled) and sign in through identity's pages in chromium."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyotp
import pytest
from playwright.async_api import Page
from pydantic import SecretStr

from hiwallet.backoffice_bff.app import create_backoffice_bff_app
from hiwallet.backoffice_bff.settings import BackofficeBffSettings
from hiwallet.identity.settings import REALMS_DIR
from tests.browser.conftest import browser, context, page  # noqa: F401
from tests.identity.conftest import (  # noqa: F401
    PASSWORD,
    SECRETS,
    IdentityServer,
    ServerFactory,
    identity_factory,
    identity_template,
    staff_identity_template,
)
from tests.servers import free_port, serve, stop
from tests.staff_admin.conftest import Catcher, Employee, StaffAdminServer, catcher, start_staff_admin  # noqa: F401
from tests.wallet_api.conftest import WalletApi, running_api

CLIENT = "backoffice-bff"


@dataclass
class Panel:
    """The BFF and what stands behind it."""

    base_url: str
    settings: BackofficeBffSettings
    idp: IdentityServer
    staff_admin: StaffAdminServer
    api: WalletApi
    server: Any
    thread: Any

    def employee(self, name: str, *permissions: str) -> Employee:
        return self.staff_admin.employee(name, *permissions)

    async def sign_in(self, page: Page, who: Employee, path: str = "/") -> None:  # noqa: F811
        await sign_in(page, self.base_url, self.idp, who, path)


def otp(idp: IdentityServer, who: Employee) -> str:
    """A code the staff realm accepts now: a step not spent by an earlier login."""
    used = idp.sql("SELECT totp_last_step FROM users WHERE username = $1", who.email.lower())
    last = used[0]["totp_last_step"] if used else None
    now = time.time()
    if last is not None and last >= int(now // 30):
        return pyotp.TOTP(who.totp_secret).at(now + 30)
    return pyotp.TOTP(who.totp_secret).at(now)


async def sign_in(page: Page, base_url: str, idp: IdentityServer, who: Employee, path: str = "/") -> None:  # noqa: F811
    """Through identity's pages, as a person: the password, then the authenticator's code."""
    await page.goto(base_url + path)
    await page.get_by_label("E-mail or username").fill(who.email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_label("Code").fill(otp(idp, who))
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(base_url + path)


def with_panel_redirect(realms_dir: Path, port: int) -> None:
    """backoffice-bff's redirect URIs in the staff realm's file: also this test's BFF."""
    path = realms_dir / "hiwallet-staff.json"
    realm = json.loads(path.read_text())
    for client in realm["clients"]:
        if client["clientId"] == CLIENT:
            client["redirectUris"] = [*client["redirectUris"], f"http://127.0.0.1:{port}/auth/callback"]
    path.write_text(json.dumps(realm))


@pytest.fixture
def realms_dir(tmp_path: Path) -> Path:
    return tmp_path / "realms"


@pytest.fixture
def panel_port() -> int:
    return free_port()


@pytest.fixture
def panel_idp(
    identity_factory: ServerFactory,  # noqa: F811
    catcher: Catcher,  # noqa: F811
    realms_dir: Path,
    panel_port: int,
) -> IdentityServer:
    """The staff realm, with backoffice-bff's redirect URI at this test's BFF."""
    shutil.copytree(REALMS_DIR, realms_dir)
    with_panel_redirect(realms_dir, panel_port)
    return identity_factory(
        "hiwallet-staff", realms_dir=realms_dir, smtp_enabled=True, smtp_port=catcher.smtp_port
    )


@pytest.fixture
def customers_idp(identity_factory: ServerFactory) -> IdentityServer:  # noqa: F811
    return identity_factory("hiwallet")


@pytest.fixture
def panel_page_size() -> int:
    """Rows per list page (a module overrides it to page through a few rows)."""
    return 50


@pytest.fixture
async def panel(
    panel_idp: IdentityServer,
    customers_idp: IdentityServer,
    staff_admin_db: str,
    wallet_db: str,
    panel_port: int,
    panel_page_size: int,
) -> AsyncIterator[Panel]:
    helper = start_staff_admin(panel_idp, staff_admin_db)
    try:
        async with running_api(wallet_db, customers_idp, panel_idp, staff_admin_url=helper.base_url) as api:
            settings = BackofficeBffSettings(
                port=panel_port,
                public_url=f"http://127.0.0.1:{panel_port}",
                staff_issuer=panel_idp.issuer,
                client_secret=SecretStr(SECRETS[CLIENT]),
                staff_admin_url=helper.base_url,
                wallet_api_url=api.base_url,
                # nobody listens there: the review pages' outage (the saga's system is elsewhere)
                withdrawals_url=f"http://127.0.0.1:{free_port()}",
                # the shared machine is slow at times: a test waits for an answer, not a clock
                upstream_timeout_s=20.0,
                page_size=panel_page_size,
            )
            base, server, thread = serve(create_backoffice_bff_app(settings), CLIENT, port=panel_port)
            running = Panel(base, settings, panel_idp, helper, api, server, thread)
            try:
                yield running
            finally:
                stop(running.server, running.thread)
    finally:
        helper.stop()
