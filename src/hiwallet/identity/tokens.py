"""Tokens: what goes into them, and the grants of the token endpoint.

Access and ID tokens are RS256 JWTs in Keycloak's shape. Refresh tokens are opaque random
strings stored hashed: they are only ever read by this service, and an opaque token can be
rotated and revoked by one row update. Every refresh spends the token and issues a new one in
the same family; a spent token presented again revokes the family and ends the session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any

import asyncpg
import structlog

from hiwallet.core.ids import derived_id, new_id
from hiwallet.core.uow import in_transaction
from hiwallet.identity.authn import (
    LoginFailed,
    authenticate_password,
    check_totp,
)
from hiwallet.identity.context import (
    Realm,
    User,
    fetch_user,
    new_secret,
    token_hash,
    verify_own_token,
)
from hiwallet.identity.errors import (
    InvalidGrant,
    InvalidRequest,
    InvalidScope,
    InvalidToken,
    InvalidUserCredentials,
    UnauthorizedClient,
    UnsupportedGrantType,
)
from hiwallet.identity.realm import ClientConfig
from hiwallet.identity.sql import Q

log = structlog.get_logger(__name__)

SUPPORTED_SCOPES = frozenset({"openid", "email", "profile"})
DEFAULT_SCOPES = ("email", "profile")  # Keycloak's default client scopes


def resolve_scope(requested: str | None) -> str:
    wanted = (requested or "").split()
    unknown = [s for s in wanted if s not in SUPPORTED_SCOPES]
    if unknown:
        raise InvalidScope(f"Invalid scopes: {' '.join(unknown)}")
    ordered = dict.fromkeys([*wanted, *DEFAULT_SCOPES])
    return " ".join(ordered)


def pkce_matches(verifier: str, challenge: str) -> bool:
    """RFC 7636 S256: BASE64URL(SHA256(verifier)) == challenge."""
    if not 43 <= len(verifier) <= 128:
        return False
    digest = hashlib.sha256(verifier.encode("ascii", "replace")).digest()
    computed = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return hmac.compare_digest(computed, challenge)


def service_account_subject(realm: Realm, client: ClientConfig) -> str:
    # Stable across restarts and machines, like the service-account user Keycloak creates.
    return derived_id("service-account", realm.name, client.client_id)


def _access_claims(
    realm: Realm, client: ClientConfig, user: User | None, session_id: str | None, scope: str
) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "exp": now + realm.settings.access_token_lifetime_s,
        "iat": now,
        "jti": new_id(),
        "iss": realm.issuer,
        "aud": list(client.audiences),
        "typ": "Bearer",
        "azp": client.client_id,
        "scope": scope,
    }
    if session_id:
        claims["sid"] = session_id
    if user is None:
        claims["sub"] = service_account_subject(realm, client)
        claims["preferred_username"] = client.service_account_username
        claims["client_id"] = client.client_id
        claims["email_verified"] = False
        if client.service_account_roles:
            claims["resource_access"] = {
                owner: {"roles": list(roles)} for owner, roles in client.service_account_roles.items()
            }
    else:
        claims.update(_user_claims(user))
    return claims


def _user_claims(user: User) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "sub": user.id,
        "preferred_username": user.username,
        "email_verified": user.email_verified,
    }
    if user.email:
        claims["email"] = user.email
    if user.first_name:
        claims["given_name"] = user.first_name
    if user.last_name:
        claims["family_name"] = user.last_name
    name = " ".join(p for p in (user.first_name, user.last_name) if p)
    if name:
        claims["name"] = name
    return claims


async def issue(
    realm: Realm,
    client: ClientConfig,
    user: User | None,
    *,
    session_id: str | None,
    scope: str,
    nonce: str | None = None,
    family_id: str | None = None,
) -> dict[str, Any]:
    """A Keycloak-shaped token response. No refresh token without a session (service accounts,
    as Keycloak does by default)."""
    s = realm.settings
    access = _access_claims(realm, client, user, session_id, scope)
    body: dict[str, Any] = {
        "access_token": await realm.keys.sign(access),
        "expires_in": s.access_token_lifetime_s,
        "refresh_expires_in": 0,
        "token_type": "Bearer",
        "not-before-policy": 0,
        "scope": scope,
    }
    if user is not None and "openid" in scope.split():
        id_claims = {k: v for k, v in access.items() if k not in {"scope", "resource_access", "client_id"}}
        id_claims.update({"typ": "ID", "aud": client.client_id, "jti": new_id()})
        if nonce:
            id_claims["nonce"] = nonce
        body["id_token"] = await realm.keys.sign(id_claims)
    if user is not None and session_id is not None:
        refresh = new_secret()
        await realm.pool.execute(
            Q["insert_refresh_token"],
            token_hash(refresh),
            family_id or new_id(),
            session_id,
            client.client_id,
            user.id,
            scope,
            s.refresh_token_lifetime_s,
        )
        body["refresh_token"] = refresh
        body["refresh_expires_in"] = s.refresh_token_lifetime_s
        body["session_state"] = session_id
    return body


async def start_session(realm: Realm, user: User, client: ClientConfig) -> str:
    session_id = new_id()
    await realm.pool.execute(
        Q["insert_session"],
        session_id,
        user.id,
        client.client_id,
        realm.settings.session_max_lifetime_s,
    )
    return session_id


async def end_session(realm: Realm, session_id: str) -> None:

    async def work(conn: asyncpg.Connection) -> None:
        await conn.execute(Q["end_session"], session_id)
        await conn.execute(Q["revoke_session_tokens"], session_id)

    await in_transaction(realm.pool, work)


async def token_grant(realm: Realm, client: ClientConfig, form: Mapping[str, str]) -> dict[str, Any]:
    grant = form.get("grant_type") or ""
    if grant == "password":
        return await _password_grant(realm, client, form)
    if grant == "client_credentials":
        return await _client_credentials_grant(realm, client, form)
    if grant == "authorization_code":
        return await _code_grant(realm, client, form)
    if grant == "refresh_token":
        return await _refresh_grant(realm, client, form)
    if not grant:
        raise InvalidRequest("Missing form parameter: grant_type")
    raise UnsupportedGrantType(f"Unsupported grant_type: {grant[:64]}")


def user_needs_setup(realm: Realm, user: User) -> bool:
    return bool(user.required_actions) or (realm.config.otp_required and not user.totp_secret)


async def _password_grant(realm: Realm, client: ClientConfig, form: Mapping[str, str]) -> dict[str, Any]:
    if not client.direct_grants:
        raise UnauthorizedClient("Client not allowed for direct access grants")
    scope = resolve_scope(form.get("scope"))
    try:
        user = await authenticate_password(realm, form.get("username") or "", form.get("password") or "")
        if user_needs_setup(realm, user):
            raise InvalidGrant("Account is not fully set up")
        if realm.config.otp_required or user.totp_secret:
            await check_totp(realm, user, form.get("totp") or "")
    except LoginFailed as exc:
        log.info("password grant refused", client=client.client_id, reason=exc.reason)
        if exc.reason == "disabled":
            raise InvalidGrant("Account disabled") from exc
        raise InvalidUserCredentials("Invalid user credentials") from exc
    session_id = await start_session(realm, user, client)
    return await issue(realm, client, user, session_id=session_id, scope=scope)


async def _client_credentials_grant(
    realm: Realm, client: ClientConfig, form: Mapping[str, str]
) -> dict[str, Any]:
    if client.public or not client.service_account:
        raise UnauthorizedClient("Client not enabled to retrieve service account")
    scope = resolve_scope(form.get("scope"))
    return await issue(realm, client, None, session_id=None, scope=scope)


async def _code_grant(realm: Realm, client: ClientConfig, form: Mapping[str, str]) -> dict[str, Any]:
    code = form.get("code") or ""
    if not code:
        raise InvalidRequest("Missing parameter: code")
    row = await realm.pool.fetchrow(Q["redeem_code"], token_hash(code))
    if row is None:
        spent = await realm.pool.fetchrow(Q["code_by_hash"], token_hash(code))
        if spent is not None:
            # RFC 6749 §4.1.2: a code used twice was intercepted; what it bought is revoked.
            log.warning("authorization code replayed", client=client.client_id)
            await end_session(realm, spent["session_id"])
        raise InvalidGrant("Code not valid")
    if not row["fresh"]:
        raise InvalidGrant("Code not valid")
    if row["client_id"] != client.client_id:
        raise InvalidGrant("Code was issued to another client")
    if form.get("redirect_uri") != row["redirect_uri"]:
        raise InvalidGrant("Incorrect redirect_uri")
    challenge = row["code_challenge"]
    if challenge is not None:
        verifier = form.get("code_verifier") or ""
        if not verifier:
            raise InvalidGrant("PKCE code verifier not specified")
        if not pkce_matches(verifier, challenge):
            raise InvalidGrant("PKCE verification failed")
    user = await _active_user(realm, row["user_id"], row["session_id"])
    return await issue(
        realm, client, user, session_id=row["session_id"], scope=row["scope"], nonce=row["nonce"]
    )


async def _active_user(realm: Realm, user_id: str, session_id: str) -> User:
    if await realm.pool.fetchrow(Q["active_session"], session_id) is None:
        raise InvalidGrant("Session not active")
    user = await fetch_user(realm, user_id)
    if user is None or not user.enabled:
        raise InvalidGrant("User disabled")
    return user


async def _refresh_grant(realm: Realm, client: ClientConfig, form: Mapping[str, str]) -> dict[str, Any]:
    presented = form.get("refresh_token") or ""
    if not presented:
        raise InvalidRequest("Missing parameter: refresh_token")
    hashed = token_hash(presented)
    known = await realm.pool.fetchrow(Q["refresh_token_by_hash"], hashed)
    if known is None:
        raise InvalidGrant("Invalid refresh token")
    if known["client_id"] != client.client_id:
        raise InvalidGrant("Invalid refresh token. Token client and authorized client don't match")
    row = await realm.pool.fetchrow(Q["use_refresh_token"], hashed)
    if row is None:
        # Read again: ``known`` was read before this use, and a concurrent refresh with the same
        # token may have spent it since. That is a reuse too, and its family must go; the first
        # read would say "unused" and let the winner's new token live.
        known = await realm.pool.fetchrow(Q["refresh_token_by_hash"], hashed) or known
        if known["used_at"] is not None:
            # Reuse: either the client or a thief holds a newer token. Revoke them all.
            log.warning("refresh token reused; revoking its family", client=client.client_id)
            await realm.pool.execute(Q["revoke_family"], known["family_id"])
            await end_session(realm, known["session_id"])
            raise InvalidGrant("Maximum allowed refresh token reuse exceeded")
        raise InvalidGrant("Token is not active")
    user = await _active_user(realm, row["user_id"], row["session_id"])
    return await issue(
        realm,
        client,
        user,
        session_id=row["session_id"],
        scope=row["scope"],
        family_id=row["family_id"],
    )


async def logout(realm: Realm, client: ClientConfig, form: Mapping[str, str]) -> None:
    presented = form.get("refresh_token") or ""
    if not presented:
        raise InvalidRequest("Missing parameter: refresh_token")
    known = await realm.pool.fetchrow(Q["refresh_token_by_hash"], token_hash(presented))
    if known is None or known["client_id"] != client.client_id:
        raise InvalidGrant("Invalid refresh token")
    await end_session(realm, known["session_id"])


async def userinfo(realm: Realm, access_token: str) -> dict[str, Any]:
    claims = await verify_own_token(realm, access_token)
    if claims is None:
        raise InvalidToken("Token verification failed")
    sid = claims.get("sid")
    if isinstance(sid, str) and await realm.pool.fetchrow(Q["active_session"], sid) is None:
        raise InvalidToken("User session not found or doesn't have client attached on it")
    info: dict[str, Any] = {
        k: claims[k]
        for k in (
            "sub",
            "email_verified",
            "name",
            "preferred_username",
            "given_name",
            "family_name",
            "email",
        )
        if k in claims
    }
    if "azp" not in claims or claims.get("preferred_username") != "service-account-" + str(claims["azp"]):
        user = await fetch_user(realm, str(claims["sub"]))
        if user is None or not user.enabled:
            raise InvalidToken("User not found or disabled")
    return info


async def introspect(realm: Realm, client: ClientConfig, form: Mapping[str, str]) -> dict[str, Any]:
    """RFC 7662. Only confidential clients may ask; an inactive token is just ``active: false``.

    Any confidential client of the realm may introspect any of its tokens, access or refresh, as
    Keycloak did before 26.6.2 (which began to require the caller in ``aud``, or for a refresh
    token in ``azp``): business-api, the resource server, introspects the mobile app's tokens. A
    refresh token is active exactly while the refresh grant would accept it, and is answered
    with the claims Keycloak's refresh JWT carries (``typ: Refresh``); ours are opaque, so the
    claims come from its row.
    """
    if client.public:
        raise UnauthorizedClient("Public clients may not introspect tokens")
    token = form.get("token") or ""
    claims = await verify_own_token(realm, token)
    if claims is not None:
        sid = claims.get("sid")
        if isinstance(sid, str) and await realm.pool.fetchrow(Q["active_session"], sid) is None:
            return {"active": False}
        return {**claims, "active": True, "client_id": claims.get("azp"), "token_type": "Bearer"}
    if not token or len(token) > 16_384:
        return {"active": False}
    row = await realm.pool.fetchrow(Q["live_refresh_token"], token_hash(token))
    if row is None:
        return {"active": False}
    return {
        "exp": row["exp"],
        "iat": row["iat"],
        "iss": realm.issuer,
        "aud": realm.issuer,  # Keycloak's refresh tokens are addressed to the realm itself
        "sub": row["user_id"],
        "typ": "Refresh",
        "azp": row["client_id"],
        "sid": row["session_id"],
        "scope": row["scope"],
        "client_id": row["client_id"],
        "username": row["username"],
        "active": True,
    }
