"""The staff realm: invitation link (password and TOTP), TOTP at first login, a code at every login."""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pyotp

from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer, ServerFactory, post_form
from tests.identity.test_code_flow import auth_params, pkce_pair

BACKOFFICE_REDIRECT = "http://127.0.0.1:8005/auth/callback"


def code_at(secret: str, steps_ahead: int) -> str:
    return pyotp.TOTP(secret).at(time.time() + 30 * steps_ahead)


def secret_on(page: httpx.Response) -> str:
    match = re.search(r'<code id="totp-secret">([A-Z2-7]+)</code>', page.text)
    assert match, page.text[:800]
    return match[1]


def start_login(idp: IdentityServer, browser: httpx.Client, username: str) -> tuple[httpx.Response, str]:
    verifier, challenge = pkce_pair()
    page = browser.get(
        f"{idp.issuer}/protocol/openid-connect/auth",
        params=auth_params("backoffice-bff", BACKOFFICE_REDIRECT, challenge),
    )
    assert page.status_code == 200
    return post_form(browser, idp.base_url, page, username=username, password=PASSWORD), verifier


def finish(idp: IdentityServer, callback: httpx.Response, verifier: str) -> dict[str, str]:
    assert callback.status_code == 302, callback.text[:800]
    code = parse_qs(urlsplit(callback.headers["location"]).query)["code"][0]
    response = httpx.post(
        idp.token_url,
        auth=("backoffice-bff", SECRETS["backoffice-bff"]),
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": BACKOFFICE_REDIRECT,
            "code_verifier": verifier,
        },
    )
    assert response.status_code == 200, response.text
    body: dict[str, str] = response.json()
    return body


def test_invitation_link_sets_password_and_totp(staff_idp: IdentityServer) -> None:
    admin = staff_idp.admin()  # staff-admin's service account
    user_id = admin.create_user({"username": "selin", "email": "selin@hiwallet.dev", "enabled": True})
    admin.send_update_account(
        user_id,
        ["UPDATE_PASSWORD", "CONFIGURE_TOTP"],
        client_id="backoffice-bff",
        redirect_uri=BACKOFFICE_REDIRECT,
    )
    [mail] = staff_idp.sql("SELECT recipient, body FROM outgoing_mail")
    assert mail["recipient"] == "selin@hiwallet.dev"
    link = re.search(r"(http://\S+/login-actions/action-token\?key=\S+)", mail["body"])
    assert link and link[1].startswith(staff_idp.issuer)

    with httpx.Client() as browser:
        page = browser.get(link[1])
        assert "Set your password" in page.text
        short = post_form(
            browser, staff_idp.base_url, page, **{"password-new": "short", "password-confirm": "short"}
        )
        assert "at least 8 characters" in short.text
        setup = post_form(
            browser, staff_idp.base_url, short, **{"password-new": PASSWORD, "password-confirm": PASSWORD}
        )
        secret = secret_on(setup)
        wrong = post_form(browser, staff_idp.base_url, setup, otp="000000")
        assert "Invalid authenticator code." in wrong.text
        done = post_form(browser, staff_idp.base_url, wrong, otp=code_at(secret, 0))
        assert "Your account has been updated" in done.text
        # The link was for one use.
        assert browser.get(link[1]).status_code == 400

    assert admin.get_user(user_id)["totp"] is True
    assert admin.get_user(user_id)["requiredActions"] == []
    with httpx.Client() as browser:
        otp_page, verifier = start_login(staff_idp, browser, "selin@hiwallet.dev")
        assert "One-time code" in otp_page.text
        callback = post_form(browser, staff_idp.base_url, otp_page, otp=code_at(secret, 1))
    claims = staff_idp.openid("backoffice-bff").decode_token(
        finish(staff_idp, callback, verifier)["access_token"]
    )
    assert claims["iss"] == staff_idp.issuer
    assert claims["aud"] == ["hiwallet-api", "backoffice-bff"]


def test_totp_enrolment_at_first_login_then_a_code_every_time(staff_idp: IdentityServer) -> None:
    staff_idp.create_user("okan")
    with httpx.Client() as browser:
        setup, verifier = start_login(staff_idp, browser, "okan")
        assert "Set up your authenticator" in setup.text
        secret = secret_on(setup)
        enrolment_code = code_at(secret, 0)
        callback = post_form(browser, staff_idp.base_url, setup, otp=enrolment_code)
    finish(staff_idp, callback, verifier)

    with httpx.Client() as browser:
        otp_page, verifier = start_login(staff_idp, browser, "okan")
        assert "One-time code" in otp_page.text and "Set up" not in otp_page.text
        # The code used at enrolment cannot be used again.
        replay = post_form(browser, staff_idp.base_url, otp_page, otp=enrolment_code)
        assert replay.status_code == 200 and "Invalid authenticator code." in replay.text
        login_code = code_at(secret, 1)
        callback = post_form(browser, staff_idp.base_url, replay, otp=login_code)
    finish(staff_idp, callback, verifier)

    with httpx.Client() as browser:
        otp_page, _ = start_login(staff_idp, browser, "okan")
        # A later login with the same (now spent) code is refused too.
        again = post_form(browser, staff_idp.base_url, otp_page, otp=login_code)
        assert "Invalid authenticator code." in again.text


def test_wrong_codes_lock_the_employee_out(identity_factory: ServerFactory) -> None:
    idp = identity_factory("hiwallet-staff", max_login_failures=3, lockout_s=60)
    idp.create_user("pelin")
    with httpx.Client() as browser:
        setup, verifier = start_login(idp, browser, "pelin")
        secret = secret_on(setup)
        finish(idp, post_form(browser, idp.base_url, setup, otp=code_at(secret, 0)), verifier)
    with httpx.Client() as browser:
        page, _ = start_login(idp, browser, "pelin")
        for _ in range(3):
            page = post_form(
                browser, idp.base_url, page, otp="123456" if code_at(secret, 1) != "123456" else "654321"
            )
        # Locked now: the right code is refused, and so is the right password.
        refused = post_form(browser, idp.base_url, page, otp=code_at(secret, 1))
        assert "Invalid authenticator code." in refused.text
        again, _ = start_login(idp, browser, "pelin")
        assert "Invalid username or password." in again.text


def test_staff_realm_has_no_direct_grants_and_other_realm_clients(staff_idp: IdentityServer) -> None:
    refused = httpx.post(
        staff_idp.token_url,
        auth=("backoffice-bff", SECRETS["backoffice-bff"]),
        data={"grant_type": "password", "username": "x", "password": "y"},
    )
    assert refused.json()["error"] == "unauthorized_client"
    # Clients of the customers' realm do not exist here.
    customer_client = httpx.post(
        staff_idp.token_url,
        auth=("merchant-demo", SECRETS["merchant-demo"]),
        data={"grant_type": "client_credentials"},
    )
    assert customer_client.status_code == 401
    # And the realm path itself must match the server's realm.
    assert (
        httpx.get(f"{staff_idp.base_url}/realms/hiwallet/.well-known/openid-configuration").status_code == 404
    )
