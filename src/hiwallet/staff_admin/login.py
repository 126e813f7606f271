"""An employee's login from a shell, for local development: what the staff panel's browser and
backoffice-bff do (the authorization code flow with PKCE on the staff realm's pages, password
then the one-time code, then the code exchanged with backoffice-bff's secret), so that
``hiwallet staff token`` and ``hiwallet up``'s demo administrator get a real staff token. The
staff realm has no direct grants (docs/identity.md): this is the only way in, as for a person.

And an invitation link followed the same way (:func:`accept_invitation`): set the password,
set up the authenticator. Only HTTP: the identity service is a separate program (a Keycloak in
production, whose pages differ: this is a development tool, never a service's code path).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import httpx
import pyotp

__all__ = [
    "LoginFailed",
    "StaffClient",
    "accept_invitation",
    "current_code",
    "first_login",
    "next_code",
    "staff_token",
]

_INPUT = re.compile(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"')
_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')
_SECRET = re.compile(r'<code id="totp-secret">([A-Z2-7]+)</code>')
_ERROR = re.compile(r'class="error"[^>]*>([^<]+)<')


class LoginFailed(Exception):
    """The identity pages refused (the message is the page's error, never a secret)."""


@dataclass(frozen=True)
class StaffClient:
    """The client whose login this imitates (backoffice-bff: its redirect URI and secret)."""

    issuer: str  # e.g. http://127.0.0.1:8180/realms/hiwallet-staff
    client_id: str = "backoffice-bff"
    client_secret: str = "dev-backoffice-bff-secret"
    redirect_uri: str = "http://127.0.0.1:8005/auth/callback"

    @property
    def base_url(self) -> str:
        parts = urlsplit(self.issuer)
        return f"{parts.scheme}://{parts.netloc}"


def _post_form(browser: httpx.Client, base_url: str, page: httpx.Response, **fields: str) -> httpx.Response:
    action = _ACTION.search(page.text)
    if action is None:
        error = _ERROR.search(page.text)
        raise LoginFailed(error[1].strip() if error else f"no form on the page (HTTP {page.status_code})")
    return browser.post(base_url + action[1], data={**dict(_INPUT.findall(page.text)), **fields})


def _refused(page: httpx.Response) -> LoginFailed:
    error = _ERROR.search(page.text)
    return LoginFailed(error[1].strip() if error else f"the identity pages answered HTTP {page.status_code}")


def staff_token(
    client: StaffClient, username: str, password: str, otp: str, *, timeout_s: float = 10.0
) -> str:
    """An access token of the staff realm for ``username``: password, then ``otp`` (the current
    code of the employee's authenticator)."""
    token, _ = _login(client, username, password, otp, timeout_s)
    return token


def first_login(
    client: StaffClient, username: str, password: str, *, timeout_s: float = 10.0
) -> tuple[str, str]:
    """The first login of a user with a password and no authenticator yet (made through the
    admin API, as the bench does): the authenticator is set up on the way (the previous time
    step's code, see :func:`accept_invitation`); the token and the TOTP secret."""
    return _login(client, username, password, None, timeout_s)


def _login(
    client: StaffClient, username: str, password: str, otp: str | None, timeout_s: float
) -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    params = {
        "client_id": client.client_id,
        "redirect_uri": client.redirect_uri,
        "response_type": "code",
        "scope": "openid",
        "state": secrets.token_hex(8),
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    with httpx.Client(timeout=timeout_s, follow_redirects=False) as browser:
        page = browser.get(f"{client.issuer}/protocol/openid-connect/auth", params=params)
        otp_page = _post_form(browser, client.base_url, page, username=username, password=password)
        enrolling = _SECRET.search(otp_page.text)
        if 'name="otp"' not in otp_page.text or (enrolling is None) != (otp is not None):
            # A wrong password, or an authenticator to set up where a code was expected (an
            # invitation not followed), or the other way round.
            raise _refused(otp_page)
        secret = enrolling[1] if enrolling is not None else ""
        code = otp if otp is not None else pyotp.TOTP(secret).at(time.time() - 30)
        callback = _post_form(browser, client.base_url, otp_page, otp=code)
        if callback.status_code != 302:
            raise _refused(callback)
        code = parse_qs(urlsplit(callback.headers["location"]).query).get("code", [""])[0]
        answer = httpx.post(
            f"{client.issuer}/protocol/openid-connect/token",
            auth=(client.client_id, client.client_secret),
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": client.redirect_uri,
                "code_verifier": verifier,
            },
            timeout=timeout_s,
        )
    if answer.status_code != 200:
        raise LoginFailed(f"the code exchange failed (HTTP {answer.status_code})")
    return str(answer.json()["access_token"]), secret


def accept_invitation(base_url: str, link: str, password: str, *, timeout_s: float = 10.0) -> str:
    """Follow an invitation link: set ``password``, set up the authenticator; its TOTP secret.
    The set-up is confirmed with the PREVIOUS time step's code (accepted: one step either way),
    so that the current code is still good for the first login, and the next one after it."""
    with httpx.Client(timeout=timeout_s, follow_redirects=False) as browser:
        page = browser.get(link)
        if "password-new" not in page.text:
            raise _refused(page)
        setup = _post_form(
            browser, base_url, page, **{"password-new": password, "password-confirm": password}
        )
        found = _SECRET.search(setup.text)
        if found is None:
            raise _refused(setup)
        secret = found[1]
        done = _post_form(browser, base_url, setup, otp=pyotp.TOTP(secret).at(time.time() - 30))
        if "updated" not in done.text:
            raise _refused(done)
    return secret


def current_code(secret: str) -> str:
    return pyotp.TOTP(secret).at(time.time())


def next_code(secret: str) -> str:
    """A code of the next time step: the current one may have been spent a moment ago."""
    return pyotp.TOTP(secret).at(time.time() + 30)
