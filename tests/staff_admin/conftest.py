"""staff-admin tests: the real staff realm (the identity service on a free port, its own
database), the mail catcher, and staff-admin served on a free port on a cloned
``hiwallet_staff_admin``. Employees log in through the staff realm's pages (password and TOTP,
driven over HTTP as a browser would) and call staff-admin with their own tokens."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pyotp
import pytest

from hiwallet.core.ids import new_id
from hiwallet.core.settings import get_settings
from hiwallet.fakes.mail import MailCatcherSettings, create_mail_catcher_app
from hiwallet.staff_admin.app import create_staff_admin_app, database_spec
from hiwallet.staff_admin.identity import StaffRealm
from hiwallet.staff_admin.service import PERMISSIONS, StaffAdmin
from hiwallet.staff_admin.settings import StaffAdminSettings
from tests import pgtemplate
from tests.identity.conftest import (
    PASSWORD,
    IdentityServer,
    ServerFactory,
    identity_factory,
    identity_template,
    post_form,
    run_sync,
    staff_identity_template,
)
from tests.identity.test_staff_totp import finish, secret_on, start_login
from tests.servers import serve, stop, wait_started
from tests.waiting import until_sync

__all__ = ["identity_factory", "identity_template", "staff_identity_template"]  # fixtures, re-exported


@dataclass
class Catcher:
    base_url: str
    smtp_port: int

    def messages_to(self, address: str) -> list[dict[str, Any]]:
        found = httpx.get(f"{self.base_url}/api/v1/search", params={"query": f"to:{address}"}, timeout=10)
        messages: list[dict[str, Any]] = found.json()["messages"]
        return messages

    def link_for(self, address: str) -> str:
        """The invitation link in the newest mail to ``address``."""
        messages = until_sync(lambda: self.messages_to(address), 10, f"a mail to {address}")
        text = httpx.get(f"{self.base_url}/api/v1/message/{messages[0]['ID']}", timeout=10).json()["Text"]
        match = re.search(r"(http://\S+/login-actions/action-token\?key=\S+)", text)
        assert match, text
        return match[1]


@pytest.fixture
def catcher() -> Iterator[Catcher]:
    app = create_mail_catcher_app(MailCatcherSettings(smtp_port=0))
    base, server, thread = serve(app, "mail-catcher")
    try:
        yield Catcher(base, app.state.catcher.smtp_port)
    finally:
        stop(server, thread)


@pytest.fixture
def staff_idp(identity_factory: ServerFactory, catcher: Catcher) -> IdentityServer:
    """The staff realm, mailing through the catcher."""
    return identity_factory("hiwallet-staff", smtp_enabled=True, smtp_port=catcher.smtp_port)


@dataclass
class Employee:
    subject: str
    email: str
    token: str
    totp_secret: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class StaffAdminServer:
    base_url: str
    database: str
    idp: IdentityServer
    settings: StaffAdminSettings
    server: Any
    thread: Any

    def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """One statement as the database's owner (tests seed and inspect)."""

        async def go() -> list[asyncpg.Record]:
            async with pgtemplate.owner_connection(self.database) as conn:
                return list(await conn.fetch(query, *args))

        return run_sync(go())

    def get(self, path: str, who: Employee | None = None, **params: Any) -> httpx.Response:
        return httpx.get(self.base_url + path, headers=who.auth if who else {}, params=params, timeout=10)

    def call(self, method: str, path: str, who: Employee, body: Any = None) -> httpx.Response:
        return httpx.request(method, self.base_url + path, headers=who.auth, json=body, timeout=10)

    def stop(self) -> None:
        stop(self.server, self.thread)

    # -- employees made for a test ---------------------------------------------------------

    def login(self, username: str, totp_secret: str | None = None) -> tuple[str, str]:
        """A staff-realm login through the pages (enrolling TOTP at the first one): the access
        token and the TOTP secret."""
        with httpx.Client() as browser:
            page, verifier = start_login(self.idp, browser, username)
            if totp_secret is None:
                totp_secret = secret_on(page)
            code = pyotp.TOTP(totp_secret).at(time.time())
            used = self.idp.sql("SELECT totp_last_step FROM users WHERE username = $1", username.lower())
            last_step = used[0]["totp_last_step"] if used else None
            if last_step is not None and last_step >= int(time.time() // 30):
                code = pyotp.TOTP(totp_secret).at(time.time() + 30)  # the current step is spent
            callback = post_form(browser, self.idp.base_url, page, otp=code)
        return finish(self.idp, callback, verifier)["access_token"], totp_secret

    def accept(self, link: str) -> str:
        """Follow an invitation link as the invited person: set the password, set up the
        authenticator (the identity service's pages); the TOTP secret."""
        with httpx.Client() as browser:
            page = browser.get(link)
            assert "Set your password" in page.text, page.text[:500]
            fields = {"password-new": PASSWORD, "password-confirm": PASSWORD}
            setup = post_form(browser, self.idp.base_url, page, **fields)
            secret = secret_on(setup)
            done = post_form(browser, self.idp.base_url, setup, otp=pyotp.TOTP(secret).at(time.time()))
            assert "Your account has been updated" in done.text, done.text[:500]
        return secret

    def user(self, name: str) -> Employee:
        """A staff-realm user with a password and TOTP, logged in, with NO employee row."""
        email = f"{name}-{new_id()[-8:]}@hiwallet.dev"
        subject = self.idp.create_user(email, email=email)
        token, secret = self.login(email)
        return Employee(subject, email, token, secret)

    def employee(self, name: str, *permissions: str, active: bool = True) -> Employee:
        """A staff-realm user made an employee (seeded as the owner, as if an invitation had
        completed) holding a role of its own with ``permissions``."""
        person = self.user(name)
        role_id = self.role(f"role-of-{name}-{person.subject[-6:]}", *permissions)
        self.sql(
            "INSERT INTO staff.employees (subject, email, name, active, invitation_id)"
            " VALUES ($1, $2, $3, $4, 'seed')",
            person.subject,
            person.email,
            name,
            active,
        )
        self.sql("INSERT INTO staff.employee_roles VALUES ($1, $2)", person.subject, role_id)
        return person

    def role(self, name: str, *permissions: str) -> str:
        role_id = new_id()
        self.sql(
            "INSERT INTO staff.roles (id, name, permissions) VALUES ($1, $2, $3)",
            role_id,
            name,
            sorted(permissions),
        )
        return role_id

    def admin(self, name: str = "admin") -> Employee:
        return self.employee(name, *sorted(PERMISSIONS))

    def audit_rows(self) -> list[asyncpg.Record]:
        return self.sql("SELECT * FROM staff.audit_log ORDER BY id")


def start_staff_admin(
    idp: IdentityServer, database: str, *, bootstrap: bool = False, port: int | None = None, **overrides: Any
) -> StaffAdminServer:
    settings = StaffAdminSettings(
        database=database,
        staff_issuer_base=idp.base_url,
        **({"port": port} if port else {}),
        **overrides,
    )
    app = create_staff_admin_app(settings, bootstrap=bootstrap)
    base, server, thread = serve(app, "staff-admin") if port is None else _serve_on(app, port)
    return StaffAdminServer(base, database, idp, settings, server, thread)


def _serve_on(app: Any, port: int) -> tuple[str, Any, Any]:
    import threading

    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", log_config=None)
    )
    thread = threading.Thread(target=server.run, name=f"staff-admin-{port}", daemon=True)
    thread.start()
    wait_started(server, thread, "staff-admin")
    return f"http://127.0.0.1:{port}", server, thread


@pytest.fixture
def staff_admin(staff_idp: IdentityServer, staff_admin_db: str) -> Iterator[StaffAdminServer]:
    server = start_staff_admin(staff_idp, staff_admin_db)
    try:
        yield server
    finally:
        server.stop()


async def service_of(server: StaffAdminServer) -> tuple[StaffAdmin, Callable[[], Awaitable[None]]]:
    """The service on a pool of its own (what a shell's command uses), and how to close it."""
    pool = await database_spec(server.settings).create_pool(get_settings(), max_size=2)
    realm = StaffRealm(server.settings, httpx.AsyncClient())

    async def close() -> None:
        await realm.client.aclose()
        await pool.close()

    return StaffAdmin(pool, server.settings, realm), close


__all__ += ["PASSWORD", "Catcher", "Employee", "StaffAdminServer", "service_of", "start_staff_admin"]
