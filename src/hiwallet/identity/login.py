"""The browser login (authorization code flow) and the "execute actions" link pages.

The flow's state lives in ``login_flows``; the form carries only the flow's unguessable id. A
flow moves: credentials -> (update_password) -> (otp_setup | otp) -> a single-use code sent
to the client's redirect URI, which must equal a registered one exactly. These functions return
what to show (:class:`Page`) or where to go (:class:`Redirect`); the routes only render.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import structlog

from hiwallet.identity.authn import (
    LoginFailed,
    authenticate_password,
    check_totp,
    matching_step,
    new_totp_secret,
    totp_uri,
)
from hiwallet.identity.context import Realm, User, fetch_user, new_secret, token_hash
from hiwallet.identity.errors import InvalidScope, LoginPageError, PasswordHashingBusy
from hiwallet.identity.sql import Q
from hiwallet.identity.tokens import resolve_scope, start_session

log = structlog.get_logger(__name__)

MIN_PASSWORD_LENGTH = 8
_PKCE_CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # BASE64URL of a SHA-256, no padding
_BASE32 = re.compile(r"^[A-Z2-7]{16,64}$")
ACTION_ORDER = ("UPDATE_PASSWORD", "CONFIGURE_TOTP")


@dataclass(frozen=True)
class Page:
    template: str
    context: dict[str, Any] = field(default_factory=dict)
    status: int = 200


@dataclass(frozen=True)
class Redirect:
    url: str


Step = Page | Redirect


def _with_params(uri: str, **params: str | None) -> str:
    parts = urlsplit(uri)
    extra = urlencode({k: v for k, v in params.items() if v is not None})
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _flow_page(realm: Realm, template: str, flow_id: str, **context: Any) -> Page:
    action = f"/realms/{realm.name}/login-actions/authenticate"
    return Page(template, {"action": action, "hidden": {"flow": flow_id}, **context})


async def start_login(realm: Realm, params: Mapping[str, str]) -> Step:
    client = realm.config.clients.get(params.get("client_id") or "")
    if client is None:
        raise LoginPageError("Client not found.")
    if not client.standard_flow:
        raise LoginPageError("Client is not allowed to initiate browser login.")
    redirect_uri = params.get("redirect_uri") or ""
    # Exact match only: no prefixes, no wildcards. Until it matches, errors are shown here,
    # never redirected (an open redirect would hand codes to an attacker).
    if redirect_uri not in client.redirect_uris:
        raise LoginPageError("Invalid parameter: redirect_uri")
    state = params.get("state")

    def refuse(error: str, description: str) -> Redirect:
        return Redirect(_with_params(redirect_uri, error=error, error_description=description, state=state))

    if params.get("response_type") != "code":
        return refuse("unsupported_response_type", "Only response_type=code is supported")
    challenge = params.get("code_challenge") or None
    method = params.get("code_challenge_method") or None
    if challenge is not None or method is not None or client.public:
        if method != "S256":
            return refuse("invalid_request", "Missing or invalid parameter: code_challenge_method")
        if challenge is None or not _PKCE_CHALLENGE.match(challenge):
            return refuse("invalid_request", "Missing or invalid parameter: code_challenge")
    try:
        scope = resolve_scope(params.get("scope"))
    except InvalidScope as exc:
        return refuse("invalid_scope", exc.detail or "Invalid scopes")
    flow_id = new_secret()
    await realm.pool.execute(
        Q["insert_login_flow"],
        flow_id,
        client.client_id,
        redirect_uri,
        scope,
        state,
        (params.get("nonce") or None),
        challenge,
        realm.settings.login_flow_lifetime_s,
    )
    return _flow_page(realm, "login.html", flow_id, username=params.get("login_hint") or "")


async def submit(realm: Realm, flow_id: str, form: Mapping[str, str]) -> Step:
    flow = await realm.pool.fetchrow(Q["login_flow"], flow_id)
    if flow is None:
        raise LoginPageError("Your login attempt timed out. Start again from the application.")
    stage = flow["stage"]
    if stage == "credentials":
        return await _credentials(realm, flow_id, form)
    user = await fetch_user(realm, flow["user_id"])
    if user is None or not user.enabled:
        raise LoginPageError("Account is disabled, contact your administrator.")
    if stage == "update_password":
        error = password_error(form)
        if error:
            return _flow_page(realm, "update_password.html", flow_id, error=error)
        await set_password(realm, user, form["password-new"])
        return await _next(realm, flow_id, await _reload(realm, user))
    if stage == "otp_setup":
        return await _otp_setup(realm, flow_id, user, flow["pending_totp"], form)
    try:
        await check_totp(realm, user, form.get("otp") or "")
    except LoginFailed:
        return _flow_page(realm, "otp.html", flow_id, error="Invalid authenticator code.")
    return await _finish(realm, flow_id, user)


async def _credentials(realm: Realm, flow_id: str, form: Mapping[str, str]) -> Step:
    username = (form.get("username") or "").strip()
    try:
        user = await authenticate_password(realm, username, form.get("password") or "")
    except LoginFailed as exc:
        log.info("login refused", realm=realm.name, reason=exc.reason)
        message = (
            "Account is disabled, contact your administrator."
            if exc.reason == "disabled"
            else "Invalid username or password."
        )
        return _flow_page(realm, "login.html", flow_id, username=username, error=message)
    except PasswordHashingBusy:
        # A browser gets the form back, its flow intact, rather than problem+json: the person
        # submits again. 503 all the same, so that the overload is seen in the access log.
        page = _flow_page(
            realm, "login.html", flow_id, username=username, error=PasswordHashingBusy.title + "."
        )
        return replace(page, status=503)
    return await _next(realm, flow_id, user)


async def _next(realm: Realm, flow_id: str, user: User) -> Step:
    if "UPDATE_PASSWORD" in user.required_actions:
        await realm.pool.execute(Q["advance_login_flow"], flow_id, "update_password", user.id, None)
        return _flow_page(realm, "update_password.html", flow_id)
    if "CONFIGURE_TOTP" in user.required_actions or (realm.config.otp_required and not user.totp_secret):
        secret = new_totp_secret()
        await realm.pool.execute(Q["advance_login_flow"], flow_id, "otp_setup", user.id, secret)
        return _otp_setup_page(realm, flow_id, user, secret)
    if realm.config.otp_required or user.totp_secret:
        await realm.pool.execute(Q["advance_login_flow"], flow_id, "otp", user.id, None)
        return _flow_page(realm, "otp.html", flow_id)
    return await _finish(realm, flow_id, user)


def _otp_setup_page(realm: Realm, flow_id: str, user: User, secret: str, error: str | None = None) -> Page:
    return _flow_page(
        realm,
        "otp_setup.html",
        flow_id,
        secret=secret,
        otpauth_uri=totp_uri(realm, user, secret),
        error=error,
    )


async def _otp_setup(
    realm: Realm, flow_id: str, user: User, secret: str | None, form: Mapping[str, str]
) -> Step:
    if secret is None:
        raise LoginPageError("Your login attempt is in an unknown state. Start again.")
    step = matching_step(secret, form.get("otp") or "")
    if step is None:
        return _otp_setup_page(realm, flow_id, user, secret, "Invalid authenticator code.")
    await realm.pool.execute(Q["set_totp"], user.id, secret, step)
    # The code just typed proved possession; asking for another one now would add nothing.
    return await _finish(realm, flow_id, await _reload(realm, user))


async def _finish(realm: Realm, flow_id: str, user: User) -> Redirect:
    # Taking (deleting) the flow first makes a double submit harmless: the second finds nothing.
    flow = await realm.pool.fetchrow(Q["take_login_flow"], flow_id)
    if flow is None:
        raise LoginPageError("Your login attempt timed out. Start again from the application.")
    client = realm.config.clients[flow["client_id"]]
    session_id = await start_session(realm, user, client)
    code = new_secret()
    await realm.pool.execute(
        Q["insert_code"],
        token_hash(code),
        client.client_id,
        user.id,
        session_id,
        flow["redirect_uri"],
        flow["scope"],
        flow["nonce"],
        flow["code_challenge"],
        realm.settings.code_lifetime_s,
    )
    return Redirect(
        _with_params(
            flow["redirect_uri"],
            state=flow["state"],
            session_state=session_id,
            iss=realm.issuer,
            code=code,
        )
    )


async def _reload(realm: Realm, user: User) -> User:
    fresh = await fetch_user(realm, user.id)
    if fresh is None:
        raise LoginPageError("Account not found.")
    return fresh


def password_error(form: Mapping[str, str]) -> str | None:
    new = form.get("password-new") or ""
    if len(new) < MIN_PASSWORD_LENGTH:
        return f"The password must have at least {MIN_PASSWORD_LENGTH} characters."
    if new != (form.get("password-confirm") or ""):
        return "Passwords don't match."
    return None


async def set_password(realm: Realm, user: User, password: str) -> None:
    if len(password) > realm.settings.max_password_length:
        raise LoginPageError("The password is too long.")
    hashed = await realm.passwords.hash(password)
    actions = [a for a in user.required_actions if a != "UPDATE_PASSWORD"]
    await realm.pool.execute(Q["set_password"], user.id, hashed, actions)


# The "execute actions" link (admin: PUT .../execute-actions-email).


def _action_page(realm: Realm, template: str, key: str, **context: Any) -> Page:
    action = f"/realms/{realm.name}/login-actions/action-token"
    return Page(template, {"action": action, "hidden": {"key": key}, **context})


async def _action_state(realm: Realm, key: str) -> tuple[User, str]:
    row = await realm.pool.fetchrow(Q["action_token"], token_hash(key))
    if row is None:
        raise LoginPageError("This link is no longer valid. Ask for a new one.")
    user = await fetch_user(realm, row["user_id"])
    pending = [a for a in ACTION_ORDER if a in row["actions"]]
    if user is None or not user.enabled or not pending:
        raise LoginPageError("This link is no longer valid. Ask for a new one.")
    return user, pending[0]


async def action_page(realm: Realm, key: str) -> Page:
    user, action = await _action_state(realm, key)
    if action == "UPDATE_PASSWORD":
        return _action_page(realm, "update_password.html", key)
    secret = new_totp_secret()
    return _action_page(
        realm,
        "otp_setup.html",
        key,
        secret=secret,
        otpauth_uri=totp_uri(realm, user, secret),
        hidden_secret=secret,
    )


async def action_submit(realm: Realm, key: str, form: Mapping[str, str]) -> Page:
    user, action = await _action_state(realm, key)
    if action == "UPDATE_PASSWORD":
        error = password_error(form)
        if error:
            return _action_page(realm, "update_password.html", key, error=error)
        await set_password(realm, user, form["password-new"])
    else:
        # The secret travels in the form: whoever holds this link may choose it anyway.
        secret = form.get("totp_secret") or ""
        step = matching_step(secret, form.get("otp") or "") if _BASE32.match(secret) else None
        if step is None:
            return _action_page(
                realm,
                "otp_setup.html",
                key,
                secret=secret,
                otpauth_uri=totp_uri(realm, user, secret) if _BASE32.match(secret) else "",
                hidden_secret=secret,
                error="Invalid authenticator code.",
            )
        await realm.pool.execute(Q["set_totp"], user.id, secret, step)
    remaining = await realm.pool.fetchval(Q["finish_action"], token_hash(key), action)
    if remaining:
        return await action_page(realm, key)
    return Page("message.html", {"message": "Your account has been updated. You can sign in now."})
