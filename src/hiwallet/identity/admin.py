"""The admin REST subset (``/admin/realms/{realm}/users``), in Keycloak's shapes.

Only a service account whose client holds ``realm-management`` roles may call it:
``view-users`` to read, ``manage-users`` to change. A person's token never qualifies, whatever
it claims, because the check also requires the client to be a configured service account.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import asyncpg
import structlog

from hiwallet.core.auth import SERVICE_ACCOUNT_PREFIX
from hiwallet.core.ids import new_id
from hiwallet.core.logging import error_fields
from hiwallet.core.mail import MAIL_ERRORS, send_mail
from hiwallet.core.uow import in_transaction
from hiwallet.identity.context import Realm, User, fetch_user, new_secret, token_hash, verify_own_token
from hiwallet.identity.errors import (
    AdminForbidden,
    AdminUnauthorized,
    InvalidUser,
    UserExists,
    UserNotFound,
)
from hiwallet.identity.realm import MANAGE_USERS, REALM_MANAGEMENT, REQUIRED_ACTIONS, VIEW_USERS
from hiwallet.identity.sql import Q

log = structlog.get_logger(__name__)

_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,255}\.[^@\s]+$")
_USERNAME = re.compile(r"^[a-z0-9._@+-]{1,255}$")
MAX_PAGE = 100
MAX_OFFSET = 2**31 - 1


async def authorize(realm: Realm, token: str | None, role: str) -> str:
    """The calling client's id, if it is a service account of this realm holding ``role``."""
    claims = await verify_own_token(realm, token) if token else None
    if claims is None:
        raise AdminUnauthorized("a valid access token of this realm is required")
    azp = claims.get("azp")
    client = realm.config.clients.get(azp) if isinstance(azp, str) else None
    if (
        client is None
        or not client.service_account
        or claims.get("preferred_username") != client.service_account_username
    ):
        raise AdminForbidden("only a service account may use the admin API")
    # The client's roles now, from configuration: a role removed since the token was issued is
    # gone at once.
    roles = set(client.service_account_roles.get(REALM_MANAGEMENT, ()))
    if role not in roles and not (role == VIEW_USERS and MANAGE_USERS in roles):
        raise AdminForbidden(f"the client {azp} lacks the {role} role")
    return client.client_id


def _text(rep: Mapping[str, Any], key: str, limit: int = 255) -> str | None:
    value = rep.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidUser(f"{key} must be a string of at most {limit} characters")
    return value.strip() or None


def _email(rep: Mapping[str, Any]) -> str | None:
    email = _text(rep, "email")
    if email is None:
        return None
    if not _EMAIL.match(email):
        raise InvalidUser("email is not a valid e-mail address")
    return email.lower()


def _flag(rep: Mapping[str, Any], key: str, default: bool) -> bool:
    # A boolean, as Keycloak's representation has it: bool("false") would be True.
    value = rep.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidUser(f"{key} must be true or false")
    return value


def _actions(rep: Mapping[str, Any], key: str = "requiredActions") -> list[str]:
    actions = rep.get(key) or []
    if not isinstance(actions, list) or not all(
        isinstance(a, str) and a in REQUIRED_ACTIONS for a in actions
    ):
        raise InvalidUser(f"{key} may only hold {sorted(REQUIRED_ACTIONS)}")
    return list(dict.fromkeys(actions))


def _password_credential(rep: Any) -> tuple[str, bool]:
    if not isinstance(rep, Mapping):
        raise InvalidUser("a credential is a JSON object")
    if rep.get("type", "password") != "password":
        raise InvalidUser("only password credentials are supported")
    value = rep.get("value")
    if not isinstance(value, str) or not value:
        raise InvalidUser("the credential has no value")
    return value, _flag(rep, "temporary", False)


async def create_user(realm: Realm, rep: Mapping[str, Any]) -> str:
    username = (_text(rep, "username") or "").lower()
    email = _email(rep)
    if not username and email:
        username = email  # Keycloak's "email as username"
    if not _USERNAME.match(username):
        raise InvalidUser("username is required: letters, digits and . _ @ + -")
    if username.startswith(SERVICE_ACCOUNT_PREFIX):
        # Reserved: verifiers read this prefix (with azp) as "a client acting as itself".
        raise InvalidUser(f"usernames starting with {SERVICE_ACCOUNT_PREFIX} are reserved")
    actions = _actions(rep)
    password_hash = None
    credentials = rep.get("credentials") or []
    if not isinstance(credentials, list) or len(credentials) > 1:
        raise InvalidUser("credentials must hold at most one password")
    if credentials:
        password, temporary = _password_credential(credentials[0])
        _check_length(realm, password)
        password_hash = await realm.passwords.hash(password)
        if temporary and "UPDATE_PASSWORD" not in actions:
            actions.append("UPDATE_PASSWORD")
    user_id = new_id()
    try:
        await realm.pool.execute(
            Q["insert_user"],
            user_id,
            username,
            email,
            _text(rep, "firstName"),
            _text(rep, "lastName"),
            _flag(rep, "enabled", False),
            _flag(rep, "emailVerified", False),
            password_hash,
            actions,
        )
    except asyncpg.UniqueViolationError as exc:
        what = "email" if exc.constraint_name == "users_email_key" else "username"
        raise UserExists(
            f"User exists with same {what}", errorMessage=f"User exists with same {what}"
        ) from exc
    log.info("user created", realm=realm.name, user_id=user_id)
    return user_id


def _check_length(realm: Realm, password: str) -> None:
    if len(password) > realm.settings.max_password_length:
        raise InvalidUser("the password is too long")


async def find_users(realm: Realm, query: Mapping[str, str]) -> list[dict[str, Any]]:
    exact = query.get("exact", "false").lower() == "true"
    try:
        first = int(query.get("first", "0"))
        limit = int(query.get("max", str(MAX_PAGE)))
    except ValueError as exc:
        raise InvalidUser("first and max must be integers") from exc
    # Bounded as the document says (a page offset past 2**31 would overflow the query's integer).
    if not (0 <= first <= MAX_OFFSET and 0 <= limit <= MAX_OFFSET):
        raise InvalidUser(f"first and max must be integers from 0 to {MAX_OFFSET}")
    limit = min(MAX_PAGE, limit)
    rows = await realm.pool.fetch(
        Q["find_users"],
        query.get("username") or None,
        query.get("email") or None,
        query.get("search") or None,
        exact,
        first,
        limit,
    )
    return [User.from_record(r).representation() for r in rows]


async def get_user(realm: Realm, user_id: str) -> User:
    user = await fetch_user(realm, user_id)
    if user is None:
        raise UserNotFound("User not found")
    return user


async def update_user(realm: Realm, user_id: str, rep: Mapping[str, Any]) -> None:
    """A partial update, as Keycloak's PUT: fields left out keep their values."""
    user = await get_user(realm, user_id)
    email = _email(rep) if "email" in rep else user.email
    try:
        await realm.pool.execute(
            Q["update_user"],
            user.id,
            email,
            _text(rep, "firstName") if "firstName" in rep else user.first_name,
            _text(rep, "lastName") if "lastName" in rep else user.last_name,
            _flag(rep, "enabled", user.enabled),
            _flag(rep, "emailVerified", user.email_verified),
            _actions(rep) if "requiredActions" in rep else list(user.required_actions),
        )
    except asyncpg.UniqueViolationError as exc:
        raise UserExists("User exists with same email", errorMessage="User exists with same email") from exc


async def reset_password(realm: Realm, user_id: str, rep: Mapping[str, Any]) -> None:
    user = await get_user(realm, user_id)
    password, temporary = _password_credential(rep)
    _check_length(realm, password)
    hashed = await realm.passwords.hash(password)
    actions = [a for a in user.required_actions if a != "UPDATE_PASSWORD"]
    if temporary:
        actions.append("UPDATE_PASSWORD")
    await realm.pool.execute(Q["set_password"], user.id, hashed, actions)


async def execute_actions_email(realm: Realm, user_id: str, actions: Any, query: Mapping[str, str]) -> str:
    """Mail the user a link to carry out ``actions``. Returns the mail's id."""
    user = await get_user(realm, user_id)
    wanted = _actions({"actions": actions}, "actions")
    if not wanted:
        raise InvalidUser("no actions given")
    if not user.email:
        raise InvalidUser("User email missing")
    client_id = query.get("client_id") or None
    redirect_uri = query.get("redirect_uri") or None
    if redirect_uri is not None:
        client = realm.config.clients.get(client_id or "")
        if client is None or redirect_uri not in client.redirect_uris:
            raise InvalidUser("Invalid redirect uri.")
    lifespan = realm.settings.action_token_lifetime_s
    if query.get("lifespan", "").isdigit():
        lifespan = min(int(query["lifespan"]), 7 * 86_400)  # a week at most
    key = new_secret()
    link = f"{realm.issuer}/login-actions/action-token?key={key}"
    mail_id = new_id()
    body = (
        f"Your administrator has asked you to update your {realm.config.display_name} account.\n"
        f"Open this link to do so: {link}\n\n"
        f"The link is valid for {lifespan // 60} minutes. If you did not expect this e-mail, "
        "ignore it.\n"
    )

    async def work(conn: asyncpg.Connection) -> None:
        await conn.execute(
            Q["insert_action_token"], token_hash(key), user.id, wanted, client_id, redirect_uri, lifespan
        )
        await conn.execute(
            Q["insert_mail"], mail_id, user.email, f"Update your {realm.config.display_name} account", body
        )

    await in_transaction(realm.pool, work)
    await deliver_mail(realm, mail_id, user.email, f"Update your {realm.config.display_name} account", body)
    return mail_id


async def deliver_mail(realm: Realm, mail_id: str, to: str, subject: str, body: str) -> None:
    """Best effort over SMTP (the mail catcher locally). The mail stays in outgoing_mail either
    way, unsent rows showing what to resend."""
    s = realm.settings
    if not s.smtp_enabled:
        return
    try:
        await send_mail(s, to=to, subject=subject, body=body)
    except MAIL_ERRORS as exc:
        log.warning("mail not delivered", mail_id=mail_id, **error_fields(exc))
        return
    await realm.pool.execute(Q["mark_mail_sent"], mail_id)
