"""Who is asking: client authentication, passwords with lockout, TOTP codes.

Shared by the token endpoint (password grant) and the login pages, so both enforce the same
lockout and the same one-time use of a TOTP code.
"""

from __future__ import annotations

import base64
import hmac
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import unquote

import pyotp
import structlog

from hiwallet.identity.context import Realm, User
from hiwallet.identity.errors import InvalidClient, PasswordHashingBusy
from hiwallet.identity.realm import ClientConfig
from hiwallet.identity.sql import Q

log = structlog.get_logger(__name__)

TOTP_PERIOD_S = 30
# Accept the previous and the next code too: phones' clocks drift by a few seconds.
TOTP_WINDOW = 1


class LoginFailed(Exception):
    """A login attempt failed. ``reason`` is for our pages and logs; clients of the token
    endpoint get one message for "no such user", "wrong password" and "locked out" so that the
    answer does not tell an attacker which usernames exist."""

    def __init__(self, reason: Literal["invalid", "disabled", "otp"]) -> None:
        super().__init__(reason)
        self.reason = reason


def authenticate_client(realm: Realm, form: Mapping[str, str], authorization: str | None) -> ClientConfig:
    """RFC 6749 §2.3.1: HTTP Basic or ``client_id``/``client_secret`` in the form."""
    client_id = form.get("client_id") or None
    secret = form.get("client_secret") or None
    if authorization and authorization.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidClient("Invalid client credentials") from exc
        basic_id, _, basic_secret = decoded.partition(":")
        client_id, secret = unquote(basic_id), unquote(basic_secret)
    if not client_id:
        raise InvalidClient("Missing parameter: client_id")
    client = realm.config.clients.get(client_id)
    if client is None:
        raise InvalidClient("Invalid client or Invalid client credentials")
    if not client.public:
        expected = (client.secret or "").encode()
        if not secret or not hmac.compare_digest(secret.encode(), expected):
            raise InvalidClient("Invalid client or Invalid client credentials")
    return client


async def authenticate_password(realm: Realm, login: str, password: str) -> User:
    """The user whose username or e-mail is ``login`` if ``password`` is theirs.

    A locked-out user is refused without looking at the password, but the hash is still
    computed so that the time taken does not reveal the lockout (or a missing user).
    """
    row = await realm.pool.fetchrow(Q["user_by_login"], login.strip()[:255])
    user = User.from_record(row) if row else None
    ok = await realm.passwords.verify(user.password_hash if user else None, password)
    if user is None:
        raise LoginFailed("invalid")
    if is_locked(user):
        raise LoginFailed("invalid")
    if not ok:
        await record_failure(realm, user)
        raise LoginFailed("invalid")
    await realm.pool.execute(Q["clear_login_failures"], user.id)
    if not user.enabled:
        raise LoginFailed("disabled")
    await rehash_if_outdated(realm, user, password)
    return user


async def rehash_if_outdated(realm: Realm, user: User, password: str) -> None:
    """Store a proven password again under today's hashing parameters, if its hash was made
    under others (a change of the argon2 settings reaches each user at their next sign-in).
    Best effort: with no hashing slot free the old hash stays, as valid as before, and the
    sign-in goes on; the next one tries again."""
    if user.password_hash is None or not realm.passwords.needs_rehash(user.password_hash):
        return
    try:
        fresh = await realm.passwords.hash(password)
    except PasswordHashingBusy:
        log.info("password_rehash_deferred", user_id=user.id)
        return
    await realm.pool.execute(Q["rehash_password"], user.id, user.password_hash, fresh)


def is_locked(user: User) -> bool:
    return user.locked_until is not None and user.locked_until > datetime.now(UTC)


async def record_failure(realm: Realm, user: User) -> None:
    s = realm.settings
    await realm.pool.execute(
        Q["record_login_failure"], user.id, s.failure_window_s, s.max_login_failures, s.lockout_s
    )


def new_totp_secret() -> str:
    return pyotp.random_base32(length=32)


def totp_uri(realm: Realm, user: User, secret: str) -> str:
    return pyotp.TOTP(secret, interval=TOTP_PERIOD_S).provisioning_uri(
        name=user.email or user.username, issuer_name=realm.config.display_name
    )


def matching_step(secret: str, code: str, now: float | None = None) -> int | None:
    """The time step whose code is ``code``, within the drift window, else None."""
    code = code.strip()
    if not (code.isdigit() and len(code) == 6):
        return None
    totp = pyotp.TOTP(secret, interval=TOTP_PERIOD_S)
    current = int((now if now is not None else time.time()) // TOTP_PERIOD_S)
    for step in range(current - TOTP_WINDOW, current + TOTP_WINDOW + 1):
        if hmac.compare_digest(totp.at(step * TOTP_PERIOD_S), code):
            return step
    return None


async def check_totp(realm: Realm, user: User, code: str) -> None:
    """Accept ``code`` once for the user's secret; failures count toward the lockout."""
    if user.totp_secret is None or is_locked(user):
        raise LoginFailed("otp")
    step = matching_step(user.totp_secret, code)
    # The UPDATE only succeeds for a step later than the last used one: no replays.
    if step is None or await realm.pool.fetchval(Q["use_totp_step"], user.id, step) is None:
        await record_failure(realm, user)
        raise LoginFailed("otp")
