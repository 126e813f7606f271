"""identity's sign-in pages in a real browser, as a customer meets them when a BFF sends them to
log in: the authorization-code flow with PKCE (personal-web-bff's client), checked with axe-core
at a desktop's and a phone's width, the wrong password told on the page, the right one sending
the browser back to the client with a code that the client (and only with its verifier) turns
into tokens."""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from playwright.sync_api import Page, Route

from tests.browser.conftest import blocking_violations, check_page
from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer

CLIENT = "personal-web-bff"
CALLBACK = "http://127.0.0.1:8002/auth/callback"


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def _login_url(idp: IdentityServer, challenge: str, state: str) -> str:
    query = {
        "client_id": CLIENT,
        "redirect_uri": CALLBACK,
        "response_type": "code",
        "scope": "openid",
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    return f"{idp.issuer}/protocol/openid-connect/auth?{urlencode(query)}"


async def _catch_callback(page: Page) -> list[str]:
    """The client's callback is not served here: the browser's request for it is answered by
    the test, which keeps the URL it was sent to."""
    reached: list[str] = []

    async def answer(route: Route) -> None:
        reached.append(route.request.url)
        await route.fulfill(status=200, content_type="text/html", body="<!doctype html><title>back</title>")

    await page.route(f"{CALLBACK}**", answer)
    return reached


async def test_a_customer_signs_in_through_the_pages(page: Page, customer_idp: IdentityServer) -> None:
    customer_idp.create_user("ayse", email="ayse@example.com")
    verifier, challenge = _pkce()
    state = secrets.token_urlsafe(16)
    reached = await _catch_callback(page)

    await page.goto(_login_url(customer_idp, challenge, state))
    await check_page(page, "identity sign-in")

    await page.get_by_label("E-mail or username").fill("ayse@example.com")
    await page.get_by_label("Password").fill("not the password")
    await page.get_by_role("button", name="Sign in").click()
    assert await page.get_by_role("alert").is_visible()
    await check_page(page, "identity sign-in refused")
    assert not reached

    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{CALLBACK}**")
    query = parse_qs(urlsplit(reached[-1]).query)
    assert query["state"] == [state]
    code = query["code"][0]

    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK}
    auth = (CLIENT, SECRETS[CLIENT])
    async with httpx.AsyncClient(auth=auth) as client:
        wrong = await client.post(customer_idp.token_url, data={**form, "code_verifier": "x" * 43})
    assert wrong.status_code == 400, wrong.text
    # A code is used once: the refused try above spent it (RFC 6749 §4.1.2), so sign in again.
    await page.goto(_login_url(customer_idp, challenge, state))
    await page.get_by_label("E-mail or username").fill("ayse@example.com")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{CALLBACK}**")
    code = parse_qs(urlsplit(reached[-1]).query)["code"][0]
    async with httpx.AsyncClient(auth=auth) as client:
        tokens = await client.post(
            customer_idp.token_url, data={**form, "code": code, "code_verifier": verifier}
        )
    assert tokens.status_code == 200, tokens.text
    assert {"access_token", "refresh_token", "id_token"} <= set(tokens.json())


async def test_the_page_check_finds_what_it_looks_for(page: Page) -> None:
    """The axe-core check can fail: a page with an unlabelled field and an image without text."""
    await page.set_content(
        "<!doctype html><html><head><title>t</title></head><body><main>"
        '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="><input type="text"></main></body></html>'
    )
    found = " ".join(await blocking_violations(page))
    assert "image-alt" in found and "label" in found, found
