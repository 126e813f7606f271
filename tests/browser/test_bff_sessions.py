"""core.bff: a BFF's sessions, with a real identity server (the customer realm, personal-web-bff's
confidential client) and a real browser, on a small BFF made of the module alone: login by the
code flow with PKCE, the sealed HttpOnly cookie that script cannot read, refresh before expiry,
logout ending the provider's session, CSRF refusals, a tampered cookie, the security headers."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from playwright.async_api import BrowserContext, Page
from pydantic import SecretStr

from hiwallet.core.bff import (
    BffSessions,
    CsrfRefused,
    GrantRefused,
    OidcClient,
    OidcClientConfig,
    Sealer,
    SecurityHeaders,
    content_security_policy,
    parse_key_ring,
    safe_return_path,
)
from hiwallet.core.http import ProblemError, problem_response
from hiwallet.identity.settings import REALMS_DIR
from tests.browser.conftest import check_page
from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer, ServerFactory
from tests.servers import free_port, serve, stop

CLIENT = "personal-web-bff"
KEYS = "k1:" + "A" * 43  # 32 bytes of zeros, base64url: a test key


@dataclass
class Clock:
    """The BFF's clock, moved forward by the tests (identity keeps real time)."""

    offset_s: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s


@dataclass
class Bff:
    base_url: str
    sessions: BffSessions
    clock: Clock
    idp: IdentityServer
    seen_tokens: list[str] = field(default_factory=list)

    def session_of(self, cookies: dict[str, str]) -> dict[str, Any] | None:
        name = self.sessions.cookies.session
        return self.sessions.sealer.open(name, cookies.get(name))


def _page(body: str) -> HTMLResponse:
    head = '<!doctype html><html lang="en"><head><title>BFF</title></head>'
    return HTMLResponse(f"{head}<body><main>{body}</main></body></html>")


def demo_app(sessions: BffSessions, seen_tokens: list[str]) -> FastAPI:
    app = FastAPI()

    @app.exception_handler(ProblemError)
    async def problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return problem_response(exc, request.url.path)

    @app.get("/login")
    async def login(request: Request) -> Response:
        return sessions.begin_login(request.query_params.get("next"))

    @app.get("/auth/callback")
    async def callback(request: Request) -> Response:
        return await sessions.finish_login(request)

    @app.get("/")
    async def home(request: Request) -> Response:
        session = await sessions.current(request)
        if session is None:
            return RedirectResponse("/login?next=/", status_code=303)
        seen_tokens.append(session.access_token)
        return _page(
            f"<h1>Signed in</h1><p id='who'>{session.subject}</p>"
            f'<form method="post" action="/act"><input type="hidden" name="csrf" value="{session.csrf}">'
            '<button type="submit">Act</button></form>'
            f'<form method="post" action="/logout"><input type="hidden" name="csrf" value="{session.csrf}">'
            '<button type="submit">Sign out</button></form>'
        )

    async def _checked(request: Request) -> Any:
        session = await sessions.current(request)
        if session is None:
            raise GrantRefused("no session")
        form = await request.form()
        token = form.get("csrf")
        sessions.check_csrf(request, session, token if isinstance(token, str) else None)
        return session

    @app.post("/act")
    async def act(request: Request) -> Response:
        await _checked(request)
        return _page("<h1>Done</h1>")

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        await _checked(request)
        return await sessions.logout(request)

    idp_origin = sessions.oidc.config.issuer.split("/realms/")[0]
    app.add_middleware(SecurityHeaders, csp=content_security_policy([idp_origin]), hsts=False)
    app.add_middleware(type(sessions.middleware(app)), sessions=sessions)  # SessionCookieWriter
    return app


@pytest.fixture
def realms_dir(tmp_path: Path) -> Path:
    """The shipped realms, with personal-web-bff's redirect URI pointing at this test's BFF."""
    target = tmp_path / "realms"
    shutil.copytree(REALMS_DIR, target)
    return target


@pytest.fixture
def bff(identity_factory: ServerFactory, realms_dir: Path) -> Iterator[Bff]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    path = realms_dir / "hiwallet.json"
    realm = json.loads(path.read_text())
    for client in realm["clients"]:
        if client["clientId"] == CLIENT:
            client["redirectUris"] = [f"{base}/auth/callback"]
    path.write_text(json.dumps(realm))
    idp = identity_factory("hiwallet", realms_dir=realms_dir, access_token_lifetime_s=120)
    idp.create_user("ayse", email="ayse@example.com")
    clock = Clock()
    oidc = OidcClient(
        OidcClientConfig(
            idp.issuer, CLIENT, SecretStr(SECRETS[CLIENT]), f"{base}/auth/callback", timeout_s=5.0
        )
    )
    sessions = BffSessions(sealer=Sealer(parse_key_ring(KEYS)), oidc=oidc, public_url=base, clock=clock)
    seen: list[str] = []
    url, server, thread = serve(demo_app(sessions, seen), "demo-bff", port=port)
    yield Bff(url, sessions, clock, idp, seen)
    stop(server, thread)


async def _sign_in(page: Page, bff: Bff) -> None:
    await page.goto(bff.base_url + "/")
    await page.get_by_label("E-mail or username").fill("ayse@example.com")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(bff.base_url + "/")
    await page.get_by_role("heading", name="Signed in").wait_for()


async def _cookies(context: BrowserContext) -> dict[str, dict[str, Any]]:
    return {c["name"]: dict(c) for c in await context.cookies()}


async def test_a_person_signs_in_and_the_browser_holds_no_token(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    await _sign_in(page, bff)
    await check_page(page, "bff demo home")
    cookie = (await _cookies(context))["hiwallet-session"]
    # Sealed, HttpOnly, SameSite=Lax, the whole site; plain http on loopback: no Secure (the
    # documented development exception; an https BFF gets __Host- and Secure: the next test).
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/"
    assert not cookie["secure"]
    assert "hiwallet-session" not in await page.evaluate("document.cookie")
    assert bff.seen_tokens[-1] not in cookie["value"]  # the token is not readable in the value
    session = bff.session_of({"hiwallet-session": cookie["value"]})
    assert session is not None and session["access_token"] == bff.seen_tokens[-1]
    assert "hiwallet-login" not in await _cookies(context)  # the login flow's cookie is spent

    await page.get_by_role("button", name="Act").click()
    await page.get_by_role("heading", name="Done").wait_for()


def test_an_https_bff_uses_host_prefixed_secure_cookies() -> None:
    sessions = BffSessions(
        sealer=Sealer(parse_key_ring(KEYS)),
        oidc=OidcClient(
            OidcClientConfig("https://id.example/realms/x", "c", SecretStr("s"), "https://bff.example/cb")
        ),
        public_url="https://bff.example",
    )
    assert sessions.cookies.session == "__Host-hiwallet-session" and sessions.cookies.secure
    response = sessions.begin_login("/wallets")
    header = response.headers["set-cookie"]
    assert header.startswith("__Host-hiwallet-login=") and "Secure" in header and "HttpOnly" in header
    assert "Domain" not in header and "Path=/" in header


async def test_the_access_token_is_refreshed_before_it_expires(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    await _sign_in(page, bff)
    before = (await _cookies(context))["hiwallet-session"]["value"]
    first = bff.seen_tokens[-1]
    await page.reload()
    assert bff.seen_tokens[-1] == first  # far from expiry: the same token, no refresh
    bff.clock.offset_s = 100  # 20 s left of 120: within the 30 s margin
    await page.reload()
    await page.get_by_role("heading", name="Signed in").wait_for()
    assert bff.seen_tokens[-1] != first
    after = (await _cookies(context))["hiwallet-session"]["value"]
    assert after != before
    session = bff.session_of({"hiwallet-session": after})
    assert session is not None and session["access_token"] == bff.seen_tokens[-1]


async def test_a_session_past_its_lifetime_signs_in_again(page: Page, bff: Bff) -> None:
    await _sign_in(page, bff)
    bff.clock.offset_s = bff.sessions.max_age_s + 1
    await page.goto(bff.base_url + "/")
    await page.get_by_label("Password").wait_for()  # the identity provider's login page again


async def test_logout_ends_the_providers_session_too(page: Page, context: BrowserContext, bff: Bff) -> None:
    await _sign_in(page, bff)
    session = bff.session_of({"hiwallet-session": (await _cookies(context))["hiwallet-session"]["value"]})
    assert session is not None
    await page.get_by_role("button", name="Sign out").click()
    await page.get_by_label("Password").wait_for()  # / again: signed out, so the login page
    assert "hiwallet-session" not in await _cookies(context)
    async with httpx.AsyncClient(auth=(CLIENT, SECRETS[CLIENT])) as client:
        refused = await client.post(
            bff.idp.token_url, data={"grant_type": "refresh_token", "refresh_token": session["refresh_token"]}
        )
    assert refused.status_code == 400, refused.text


async def test_state_changing_requests_need_the_token_and_this_origin(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    await _sign_in(page, bff)
    cookie = (await _cookies(context))["hiwallet-session"]["value"]
    session = bff.session_of({"hiwallet-session": cookie})
    assert session is not None
    async with httpx.AsyncClient(base_url=bff.base_url, cookies={"hiwallet-session": cookie}) as client:
        origin = {"Origin": bff.base_url}
        assert (await client.post("/act", data={"csrf": session["csrf"]}, headers=origin)).status_code == 200
        no_token = await client.post("/act", data={}, headers=origin)
        wrong_token = await client.post("/act", data={"csrf": "x" * 43}, headers=origin)
        elsewhere = await client.post(
            "/act", data={"csrf": session["csrf"]}, headers={"Origin": "http://evil.example"}
        )
        nowhere = await client.post("/act", data={"csrf": session["csrf"]})  # neither Origin nor Referer
        referer = await client.post(
            "/act", data={"csrf": session["csrf"]}, headers={"Referer": bff.base_url + "/"}
        )
    for refused in (no_token, wrong_token, elsewhere, nowhere):
        assert refused.status_code == 403, refused.text
        assert refused.json()["type"].endswith("/" + CsrfRefused.slug)
    assert referer.status_code == 200


async def test_a_tampered_or_foreign_cookie_is_no_session(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    await _sign_in(page, bff)
    value = (await _cookies(context))["hiwallet-session"]["value"]
    flipped = value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1]
    other_key = Sealer(parse_key_ring("k1:" + "B" * 43)).seal("hiwallet-session", {"subject": "someone"})
    # sealed under the right key, but for the login cookie: the name is the associated data
    as_login = bff.sessions.sealer.seal("hiwallet-login", bff.session_of({"hiwallet-session": value}) or {})
    for forged in (flipped, other_key, as_login, "k1.", "garbage"):
        async with httpx.AsyncClient(base_url=bff.base_url, cookies={"hiwallet-session": forged}) as client:
            answer = await client.get("/")
        assert answer.status_code == 303 and answer.headers["location"] == "/login?next=/", forged


async def test_the_pages_carry_the_security_headers(bff: Bff) -> None:
    async with httpx.AsyncClient(base_url=bff.base_url) as client:
        answer = await client.get("/")
    csp = answer.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-store"
    assert "strict-transport-security" not in answer.headers  # plain http: HSTS is production's


async def test_a_callback_that_did_not_start_here_is_refused(bff: Bff) -> None:
    async with httpx.AsyncClient(base_url=bff.base_url) as client:
        answer = await client.get("/auth/callback", params={"code": "x", "state": "y"})
    assert answer.status_code == 401
    assert answer.json()["type"].endswith("/" + GrantRefused.slug)


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("/wallets?x=1", "/wallets?x=1"),
        ("//evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("wallets", "/"),
        (None, "/"),
        ("/a\nb", "/"),
    ],
)
def test_the_return_path_stays_on_this_site(given: str | None, kept: str) -> None:
    assert safe_return_path(given) == kept
