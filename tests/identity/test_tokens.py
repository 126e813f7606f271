"""Refresh rotation and reuse detection, client credentials, introspection, lockout."""

from __future__ import annotations

import time

import httpx
import pytest
from keycloak.exceptions import KeycloakAuthenticationError, KeycloakPostError

from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer, ServerFactory


def refresh(idp: IdentityServer, token: str, client_id: str = "personal-mobile-api") -> httpx.Response:
    return httpx.post(
        idp.token_url,
        data={"grant_type": "refresh_token", "client_id": client_id, "refresh_token": token},
    )


def test_refresh_rotation_and_reuse_revokes_the_family(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("hakan")
    oidc = customer_idp.openid("personal-mobile-api")
    first = oidc.token("hakan", PASSWORD)
    other_session = oidc.token("hakan", PASSWORD)

    second = refresh(customer_idp, first["refresh_token"])
    assert second.status_code == 200
    third = refresh(customer_idp, second.json()["refresh_token"])
    assert third.status_code == 200
    assert len({first["refresh_token"], second.json()["refresh_token"], third.json()["refresh_token"]}) == 3

    # The first token, already spent, comes back: someone copied it. The family dies.
    replay = refresh(customer_idp, first["refresh_token"])
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    newest = refresh(customer_idp, third.json()["refresh_token"])
    assert newest.status_code == 400 and newest.json()["error"] == "invalid_grant"
    with pytest.raises(KeycloakAuthenticationError):
        oidc.userinfo(third.json()["access_token"])
    # Another login of the same user is its own family and is untouched.
    assert refresh(customer_idp, other_session["refresh_token"]).status_code == 200


def test_refresh_token_is_bound_to_its_client(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("irem")
    token = customer_idp.openid("personal-mobile-api").token("irem", PASSWORD)
    stolen = httpx.post(
        customer_idp.token_url,
        auth=("personal-web-bff", SECRETS["personal-web-bff"]),
        data={"grant_type": "refresh_token", "refresh_token": token["refresh_token"]},
    )
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"
    # The refused attempt did not spend it.
    assert refresh(customer_idp, token["refresh_token"]).status_code == 200


def test_expired_refresh_token(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("kaan")
    token = customer_idp.openid("personal-mobile-api").token("kaan", PASSWORD)
    customer_idp.sql("UPDATE refresh_tokens SET expires_at = now() - interval '1 second'")
    expired = refresh(customer_idp, token["refresh_token"])
    assert expired.json() == {"error": "invalid_grant", "error_description": "Token is not active"}


def test_client_credentials(customer_idp: IdentityServer) -> None:
    oidc = customer_idp.openid("merchant-demo")
    token = oidc.token(grant_type="client_credentials")
    assert "refresh_token" not in token  # as Keycloak: no session, no refresh token
    claims = oidc.decode_token(token["access_token"])
    assert claims["azp"] == "merchant-demo"
    assert claims["preferred_username"] == "service-account-merchant-demo"
    assert claims["aud"] == ["hiwallet-api", "business-api"]
    # The same subject every time: the client's service-account identity is stable.
    assert (
        oidc.decode_token(oidc.token(grant_type="client_credentials")["access_token"])["sub"] == claims["sub"]
    )

    basic = httpx.post(
        customer_idp.token_url,
        auth=("merchant-demo", SECRETS["merchant-demo"]),
        data={"grant_type": "client_credentials"},
    )
    assert basic.status_code == 200
    wrong = httpx.post(
        customer_idp.token_url,
        auth=("merchant-demo", "not-the-secret"),
        data={"grant_type": "client_credentials"},
    )
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    # A public client has no secret to prove, hence no service account.
    public = httpx.post(
        customer_idp.token_url,
        data={"grant_type": "client_credentials", "client_id": "personal-mobile-api"},
    )
    assert public.status_code == 400 and public.json()["error"] == "unauthorized_client"
    # A confidential client without a service account.
    no_sa = httpx.post(
        customer_idp.token_url,
        auth=("personal-web-bff", SECRETS["personal-web-bff"]),
        data={"grant_type": "client_credentials"},
    )
    assert no_sa.json()["error"] == "unauthorized_client"
    unsupported = httpx.post(
        customer_idp.token_url,
        auth=("merchant-demo", SECRETS["merchant-demo"]),
        data={"grant_type": "implicit"},
    )
    assert unsupported.json()["error"] == "unsupported_grant_type"


def test_introspection(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("leyla")
    token = customer_idp.openid("personal-mobile-api").token("leyla", PASSWORD)
    business_api = customer_idp.openid("business-api")
    active = business_api.introspect(token["access_token"])
    assert active["active"] is True and active["preferred_username"] == "leyla"
    assert business_api.introspect("not-a-token") == {"active": False}
    customer_idp.openid("personal-mobile-api").logout(token["refresh_token"])
    assert business_api.introspect(token["access_token"]) == {"active": False}


def test_a_live_refresh_token_is_active_with_keycloaks_claims(customer_idp: IdentityServer) -> None:
    """A refresh token the refresh grant still accepts is ``active: true`` with the claims of
    Keycloak's refresh token (``typ: Refresh``), to the resource server (business-api) as to a
    BFF, through python-keycloak; spent, logged out, expired or of a disabled user, it is not."""
    user_id = customer_idp.create_user("elif")
    mobile = customer_idp.openid("personal-mobile-api")
    token = mobile.token("elif", PASSWORD)
    business_api = customer_idp.openid("business-api")
    before = int(time.time())
    live = business_api.introspect(token["refresh_token"])
    assert live["active"] is True, live
    assert live["typ"] == "Refresh"
    assert (live["sub"], live["azp"], live["client_id"]) == (user_id, *["personal-mobile-api"] * 2)
    assert live["sid"] == token["session_state"] and live["username"] == "elif"
    assert live["iss"] == customer_idp.issuer and live["aud"] == customer_idp.issuer
    assert live["scope"].split() == token["scope"].split()
    assert live["exp"] - live["iat"] == customer_idp.settings.refresh_token_lifetime_s
    assert abs(live["iat"] - before) <= 5
    assert "token_type" not in live  # a refresh token is not a bearer credential
    assert customer_idp.openid("personal-web-bff").introspect(token["refresh_token"])["active"] is True

    # It still works, and once spent by that use it is inactive; its successor is active.
    rotated = refresh(customer_idp, token["refresh_token"])
    assert rotated.status_code == 200
    assert business_api.introspect(token["refresh_token"]) == {"active": False}
    successor = rotated.json()["refresh_token"]
    assert business_api.introspect(successor)["active"] is True

    # A disabled user's token does not refresh, so it is not active; enabled again, it is.
    customer_idp.admin().disable_user(user_id)
    assert business_api.introspect(successor) == {"active": False}
    customer_idp.admin().enable_user(user_id)
    assert business_api.introspect(successor)["active"] is True

    mobile.logout(successor)
    assert business_api.introspect(successor) == {"active": False}

    expiring = mobile.token("elif", PASSWORD)["refresh_token"]
    assert business_api.introspect(expiring)["active"] is True
    customer_idp.sql("UPDATE refresh_tokens SET expires_at = now() - interval '1 s' WHERE used_at IS NULL")
    assert business_api.introspect(expiring) == {"active": False}


def test_lockout_after_repeated_failures(identity_factory: ServerFactory) -> None:
    idp = identity_factory("hiwallet", max_login_failures=3, lockout_s=600)
    idp.create_user("murat")
    oidc = idp.openid("personal-mobile-api")
    for _ in range(3):
        with pytest.raises(KeycloakAuthenticationError):
            oidc.token("murat", "wrong")
    # Locked: even the right password is refused, with the same answer as a wrong one.
    with pytest.raises(KeycloakAuthenticationError) as locked:
        oidc.token("murat", PASSWORD)
    assert b"Invalid user credentials" in locked.value.response_body
    [row] = idp.sql("SELECT locked_until > now() AS locked FROM users WHERE username = 'murat'")
    assert row["locked"]
    # The lock's end is the row's locked_until: moved into the past, as time passing would.
    idp.sql("UPDATE users SET locked_until = now() - interval '1 s' WHERE username = 'murat'")
    assert oidc.token("murat", PASSWORD)["access_token"]


def test_failures_below_the_limit_do_not_lock(identity_factory: ServerFactory) -> None:
    idp = identity_factory("hiwallet", max_login_failures=3)
    idp.create_user("nur")
    oidc = idp.openid("personal-mobile-api")
    for _ in range(2):
        with pytest.raises(KeycloakAuthenticationError):
            oidc.token("nur", "wrong")
    assert oidc.token("nur", PASSWORD)  # resets the count
    for _ in range(2):
        with pytest.raises(KeycloakAuthenticationError):
            oidc.token("nur", "wrong")
    assert oidc.token("nur", PASSWORD)


def test_unknown_user_and_oversized_body(customer_idp: IdentityServer) -> None:
    with pytest.raises(KeycloakAuthenticationError):
        customer_idp.openid("personal-mobile-api").token("ghost", PASSWORD)
    huge = httpx.post(customer_idp.token_url, data={"grant_type": "password", "password": "x" * 100_000})
    assert huge.status_code == 413
    assert huge.headers["content-type"] == "application/problem+json"
    with pytest.raises(KeycloakPostError):
        customer_idp.openid("personal-mobile-api").token("ghost", PASSWORD, scope="openid admin")


def test_purge_removes_only_what_has_expired(customer_idp: IdentityServer) -> None:
    from hiwallet.core.db import app_role, create_pool
    from hiwallet.identity.housekeeping import purge_once
    from tests.identity.conftest import run_sync

    customer_idp.create_user("oya")
    oidc = customer_idp.openid("personal-mobile-api")
    old = oidc.token("oya", PASSWORD)
    current = oidc.token("oya", PASSWORD)
    old_session = oidc.decode_token(old["access_token"])["sid"]
    customer_idp.sql("UPDATE sessions SET expires_at = now() - interval '2 days' WHERE id = $1", old_session)

    async def purge() -> int:
        pool = await create_pool(customer_idp.database, role=app_role("identity"), min_size=1, max_size=1)
        try:
            return await purge_once(pool)
        finally:
            await pool.close()

    assert run_sync(purge()) == 1
    sessions = {r["id"] for r in customer_idp.sql("SELECT id FROM sessions")}
    assert old_session not in sessions and len(sessions) == 1
    assert refresh(customer_idp, current["refresh_token"]).status_code == 200


def test_concurrent_refreshes_of_one_token_cannot_both_win(customer_idp: IdentityServer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    customer_idp.create_user("sibel")
    token = customer_idp.openid("personal-mobile-api").token("sibel", PASSWORD)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: refresh(customer_idp, token["refresh_token"]), range(4)))
    assert sorted(r.status_code for r in results).count(200) <= 1
    assert any(r.status_code == 400 for r in results)
    # Whoever lost saw a spent token: the family is gone, including the winner's new token.
    winners = [r.json()["refresh_token"] for r in results if r.status_code == 200]
    for newer in winners:
        assert refresh(customer_idp, newer).status_code == 400


def test_service_endpoints(customer_idp: IdentityServer) -> None:
    assert httpx.get(customer_idp.base_url + "/health").json() == {"status": "ok"}
    ready = httpx.get(customer_idp.base_url + "/ready")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "background": "ok"}
    customer_idp.openid("merchant-demo").token(grant_type="client_credentials")
    metrics = httpx.get(customer_idp.base_url + "/metrics").text
    assert 'route="/realms/{realm_name}/protocol/openid-connect/token"' in metrics
