"""The authorization code flow with PKCE, driven over HTTP like a browser, login page included."""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer, post_form

MOBILE_REDIRECT = "http://127.0.0.1:8001/auth/callback"
BFF_REDIRECT = "http://127.0.0.1:8002/auth/callback"


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


def auth_params(client_id: str, redirect_uri: str, challenge: str | None, **extra: str) -> dict[str, str]:
    params = {
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "response_type": "code",
        "scope": "openid",
        "state": "st-" + secrets.token_hex(4),
        "nonce": "n-" + secrets.token_hex(4),
        **extra,
    }
    if challenge is not None:
        params |= {"code_challenge": challenge, "code_challenge_method": "S256"}
    return params


def query_of(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 302, response.text[:500]
    return {k: v[0] for k, v in parse_qs(urlsplit(response.headers["location"]).query).items()}


def login(
    idp: IdentityServer,
    browser: httpx.Client,
    params: dict[str, str],
    username: str,
    password: str = PASSWORD,
) -> httpx.Response:
    page = browser.get(f"{idp.issuer}/protocol/openid-connect/auth", params=params)
    assert page.status_code == 200, page.text[:500]
    return post_form(browser, idp.base_url, page, username=username, password=password)


def exchange(idp: IdentityServer, **form: str) -> httpx.Response:
    return httpx.post(idp.token_url, data={"grant_type": "authorization_code", **form})


def test_public_client_with_pkce(customer_idp: IdentityServer) -> None:
    user_id = customer_idp.create_user("deniz")
    verifier, challenge = pkce_pair()
    params = auth_params("personal-mobile-api", MOBILE_REDIRECT, challenge, login_hint="deniz@example.com")
    with httpx.Client() as browser:
        page = browser.get(f"{customer_idp.issuer}/protocol/openid-connect/auth", params=params)
        assert page.status_code == 200
        assert 'value="deniz@example.com"' in page.text  # login_hint fills in the e-mail
        assert "/resources/hiwallet.css" in page.text
        assert page.headers["x-frame-options"] == "DENY"
        assert browser.get(customer_idp.base_url + "/resources/hiwallet.css").status_code == 200

        wrong = post_form(browser, customer_idp.base_url, page, username="deniz", password="nope")
        assert wrong.status_code == 200 and "Invalid username or password." in wrong.text
        callback = post_form(browser, customer_idp.base_url, wrong, password=PASSWORD)
    query = query_of(callback)
    assert callback.headers["location"].startswith(MOBILE_REDIRECT + "?")
    assert query["state"] == params["state"]
    assert query["iss"] == customer_idp.issuer

    response = exchange(
        customer_idp,
        client_id="personal-mobile-api",
        code=query["code"],
        redirect_uri=MOBILE_REDIRECT,
        code_verifier=verifier,
    )
    assert response.status_code == 200, response.text
    tokens = response.json()
    oidc = customer_idp.openid("personal-mobile-api")
    assert oidc.decode_token(tokens["access_token"])["sub"] == user_id
    assert oidc.decode_token(tokens["id_token"])["nonce"] == params["nonce"]
    assert response.headers["cache-control"] == "no-store"

    # Single use: the same code again is refused, and the tokens it bought are revoked.
    again = exchange(
        customer_idp,
        client_id="personal-mobile-api",
        code=query["code"],
        redirect_uri=MOBILE_REDIRECT,
        code_verifier=verifier,
    )
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    refresh = httpx.post(
        customer_idp.token_url,
        data={
            "grant_type": "refresh_token",
            "client_id": "personal-mobile-api",
            "refresh_token": tokens["refresh_token"],
        },
    )
    assert refresh.status_code == 400 and refresh.json()["error"] == "invalid_grant"


def test_confidential_bff_client(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("burak")
    verifier, challenge = pkce_pair()
    with httpx.Client() as browser:
        query = query_of(
            login(customer_idp, browser, auth_params("personal-web-bff", BFF_REDIRECT, challenge), "burak")
        )
    without_secret = exchange(
        customer_idp,
        client_id="personal-web-bff",
        code=query["code"],
        redirect_uri=BFF_REDIRECT,
        code_verifier=verifier,
    )
    assert without_secret.status_code == 401
    assert without_secret.json()["error"] == "invalid_client"
    ok = httpx.post(
        customer_idp.token_url,
        auth=("personal-web-bff", SECRETS["personal-web-bff"]),
        data={
            "grant_type": "authorization_code",
            "code": query["code"],
            "redirect_uri": BFF_REDIRECT,
            "code_verifier": verifier,
        },
    )
    assert ok.status_code == 200, ok.text
    claims = customer_idp.openid("personal-web-bff").decode_token(ok.json()["access_token"])
    assert claims["aud"] == ["hiwallet-api", "personal-web-bff"]
    assert claims["azp"] == "personal-web-bff"


def test_pkce_is_checked(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("cem")
    _, challenge = pkce_pair()
    with httpx.Client() as browser:
        query = query_of(
            login(
                customer_idp, browser, auth_params("personal-mobile-api", MOBILE_REDIRECT, challenge), "cem"
            )
        )
    wrong = exchange(
        customer_idp,
        client_id="personal-mobile-api",
        code=query["code"],
        redirect_uri=MOBILE_REDIRECT,
        code_verifier=pkce_pair()[0],
    )
    assert wrong.status_code == 400
    assert wrong.json() == {"error": "invalid_grant", "error_description": "PKCE verification failed"}


def test_public_client_must_use_pkce_s256(customer_idp: IdentityServer) -> None:
    with httpx.Client() as browser:
        auth = f"{customer_idp.issuer}/protocol/openid-connect/auth"
        no_pkce = browser.get(auth, params=auth_params("personal-mobile-api", MOBILE_REDIRECT, None))
        assert query_of(no_pkce)["error"] == "invalid_request"
        plain = auth_params(
            "personal-mobile-api",
            MOBILE_REDIRECT,
            None,
            code_challenge="x" * 43,
            code_challenge_method="plain",
        )
        assert query_of(browser.get(auth, params=plain))["error"] == "invalid_request"


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://127.0.0.1:8001/auth/callback/evil",
        "http://127.0.0.1:8001/auth/callback?next=https://evil.example",
        "http://127.0.0.1:8001/auth/",
        "HTTP://127.0.0.1:8001/auth/callback",
        "https://evil.example/auth/callback",
    ],
)
def test_redirect_uri_must_match_exactly(customer_idp: IdentityServer, redirect_uri: str) -> None:
    _, challenge = pkce_pair()
    with httpx.Client() as browser:
        page = browser.get(
            f"{customer_idp.issuer}/protocol/openid-connect/auth",
            params=auth_params("personal-mobile-api", redirect_uri, challenge),
        )
    # Shown, never redirected to.
    assert page.status_code == 400
    assert "location" not in page.headers
    assert "Invalid parameter: redirect_uri" in page.text


def test_code_redirect_uri_and_expiry(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("ece")
    verifier, challenge = pkce_pair()
    with httpx.Client() as browser:
        params = auth_params("personal-mobile-api", MOBILE_REDIRECT, challenge)
        first = query_of(login(customer_idp, browser, params, "ece"))
        second = query_of(login(customer_idp, browser, params, "ece"))
    other_uri = exchange(
        customer_idp,
        client_id="personal-mobile-api",
        code=first["code"],
        redirect_uri="hiwallet://auth/callback",
        code_verifier=verifier,
    )
    assert other_uri.json()["error_description"] == "Incorrect redirect_uri"

    # Codes are short-lived: one minute by default. Age this one past its expiry.
    customer_idp.sql("UPDATE authorization_codes SET expires_at = now() - interval '1 second'")
    expired = exchange(
        customer_idp,
        client_id="personal-mobile-api",
        code=second["code"],
        redirect_uri=MOBILE_REDIRECT,
        code_verifier=verifier,
    )
    assert expired.status_code == 400
    assert expired.json() == {"error": "invalid_grant", "error_description": "Code not valid"}


def test_unknown_client_and_flow(customer_idp: IdentityServer) -> None:
    with httpx.Client() as browser:
        auth = f"{customer_idp.issuer}/protocol/openid-connect/auth"
        unknown = browser.get(auth, params=auth_params("nobody", MOBILE_REDIRECT, None))
        assert unknown.status_code == 400 and "Client not found." in unknown.text
        browser.cookies.set("HIWALLET_LOGIN_FLOW", "made-up")
        stale = browser.post(
            f"{customer_idp.issuer}/login-actions/authenticate",
            data={"flow": "made-up", "username": "x", "password": "y"},
        )
        assert stale.status_code == 400 and "timed out" in stale.text


def test_login_flow_is_bound_to_the_browser(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("filiz")
    _, challenge = pkce_pair()
    params = auth_params("personal-mobile-api", MOBILE_REDIRECT, challenge)
    with httpx.Client() as browser:
        page = browser.get(f"{customer_idp.issuer}/protocol/openid-connect/auth", params=params)
    assert "httponly" in page.headers["set-cookie"].lower()
    with httpx.Client() as other_browser:
        # The same form, posted from a browser that did not start the flow.
        stolen = post_form(other_browser, customer_idp.base_url, page, username="filiz", password=PASSWORD)
    assert stolen.status_code == 400 and "Cookie not found" in stolen.text
    assert "location" not in stolen.headers
