"""python-keycloak, the yardstick: its KeycloakOpenID and KeycloakAdmin work unchanged."""

from __future__ import annotations

import pytest
from keycloak import KeycloakAdmin
from keycloak.exceptions import (
    KeycloakAuthenticationError,
    KeycloakGetError,
    KeycloakPostError,
    KeycloakPutError,
)

from tests.identity.conftest import PASSWORD, SECRETS, IdentityServer


def test_openid_flows(customer_idp: IdentityServer) -> None:
    user_id = customer_idp.create_user("ayse", firstName="Ayşe", lastName="Yılmaz")
    oidc = customer_idp.openid("personal-mobile-api")

    well_known = oidc.well_known()
    assert well_known["issuer"] == customer_idp.issuer
    assert well_known["jwks_uri"] == customer_idp.issuer + "/protocol/openid-connect/certs"
    assert well_known["code_challenge_methods_supported"] == ["S256"]

    token = oidc.token("ayse", PASSWORD)
    assert token["token_type"] == "Bearer"
    assert token["refresh_token"] and token["id_token"]

    certs = oidc.certs()
    assert len(certs["keys"]) == 2
    assert {k["alg"] for k in certs["keys"]} == {"RS256"}

    claims = oidc.decode_token(token["access_token"])
    assert claims["iss"] == customer_idp.issuer
    assert claims["sub"] == user_id
    assert claims["aud"] == ["hiwallet-api", "personal-mobile-api"]
    assert claims["azp"] == "personal-mobile-api"
    assert claims["typ"] == "Bearer"
    assert claims["email"] == "ayse@example.com"
    assert claims["preferred_username"] == "ayse"
    assert "openid" in claims["scope"].split()
    assert claims["exp"] - claims["iat"] == customer_idp.settings.access_token_lifetime_s
    assert claims["jti"]

    info = oidc.userinfo(token["access_token"])
    assert info["sub"] == user_id
    assert info["email"] == "ayse@example.com"
    assert info["name"] == "Ayşe Yılmaz"

    refreshed = oidc.refresh_token(token["refresh_token"])
    assert refreshed["refresh_token"] != token["refresh_token"]
    assert oidc.decode_token(refreshed["access_token"])["sub"] == user_id

    assert oidc.logout(refreshed["refresh_token"]) == {}
    # The session is over: its tokens no longer refresh or answer userinfo.
    with pytest.raises(KeycloakPostError) as refused:
        oidc.refresh_token(refreshed["refresh_token"])
    assert refused.value.response_code == 400
    with pytest.raises(KeycloakAuthenticationError):
        oidc.userinfo(refreshed["access_token"])


def test_wrong_password_and_disabled_direct_grants(customer_idp: IdentityServer) -> None:
    customer_idp.create_user("mehmet")
    with pytest.raises(KeycloakAuthenticationError) as refused:
        customer_idp.openid("personal-mobile-api").token("mehmet", "wrong password")
    assert b"invalid_grant" in refused.value.response_body
    # personal-web-bff is a BFF: code flow only, no direct grants.
    with pytest.raises(KeycloakPostError) as not_allowed:
        customer_idp.openid("personal-web-bff").token("mehmet", PASSWORD)
    assert b"unauthorized_client" in not_allowed.value.response_body


def test_admin_users(customer_idp: IdentityServer) -> None:
    admin = customer_idp.admin()
    user_id = admin.create_user(
        {"username": "Zeynep", "email": "Zeynep@Example.com", "enabled": True, "firstName": "Zeynep"}
    )
    admin.set_user_password(user_id, "a new password 1", temporary=False)

    by_email = admin.get_users({"email": "zeynep@example.com", "exact": True})
    assert [u["id"] for u in by_email] == [user_id]
    assert admin.get_user_id("zeynep") == user_id
    user = admin.get_user(user_id)
    assert user["username"] == "zeynep" and user["email"] == "zeynep@example.com"
    assert "credentials" not in user and "password" not in str(user).lower()

    token = customer_idp.openid("personal-mobile-api").token("zeynep@example.com", "a new password 1")
    assert token["access_token"]

    with pytest.raises(KeycloakPostError) as duplicate:
        admin.create_user({"username": "zeynep", "enabled": True})
    assert duplicate.value.response_code == 409

    admin.disable_user(user_id)
    assert admin.get_user(user_id)["enabled"] is False
    with pytest.raises(KeycloakPostError) as disabled:
        customer_idp.openid("personal-mobile-api").token("zeynep", "a new password 1")
    assert b"Account disabled" in disabled.value.response_body
    admin.enable_user(user_id)
    assert customer_idp.openid("personal-mobile-api").token("zeynep", "a new password 1")

    with pytest.raises(KeycloakGetError) as missing:
        admin.get_user("no-such-user")
    assert missing.value.response_code == 404


def test_temporary_password_requires_update(customer_idp: IdentityServer) -> None:
    admin = customer_idp.admin()
    user_id = customer_idp.create_user("fatma", password=None)
    admin.set_user_password(user_id, "temporary pass", temporary=True)
    assert admin.get_user(user_id)["requiredActions"] == ["UPDATE_PASSWORD"]
    with pytest.raises(KeycloakPostError) as refused:
        customer_idp.openid("personal-mobile-api").token("fatma", "temporary pass")
    assert b"Account is not fully set up" in refused.value.response_body


def test_admin_api_needs_a_service_account_with_the_role(customer_idp: IdentityServer) -> None:
    # A client with a service account but no realm-management role.
    merchant = KeycloakAdmin(
        server_url=customer_idp.base_url + "/",
        realm_name="hiwallet",
        client_id="merchant-demo",
        client_secret_key=SECRETS["merchant-demo"],
    )
    with pytest.raises(KeycloakPostError) as forbidden:
        merchant.create_user({"username": "mallory", "enabled": True})
    assert forbidden.value.response_code == 403
    # A person's token, whatever its claims, is not a service account.
    customer_idp.create_user("ali")
    token = customer_idp.openid("personal-mobile-api").token("ali", PASSWORD)
    import httpx

    users_url = f"{customer_idp.base_url}/admin/realms/hiwallet/users"
    as_user = httpx.get(users_url, headers={"Authorization": f"Bearer {token['access_token']}"})
    assert as_user.status_code == 403
    assert as_user.headers["content-type"] == "application/problem+json"
    anonymous = httpx.get(users_url)
    assert anonymous.status_code == 401
    # Nobody may take the reserved service-account prefix.
    with pytest.raises(KeycloakPostError) as reserved:
        customer_idp.admin().create_user({"username": "service-account-merchant-demo"})
    assert reserved.value.response_code == 400


def test_execute_actions_email_refuses_a_foreign_redirect(customer_idp: IdentityServer) -> None:
    user_id = customer_idp.create_user("emre")
    with pytest.raises(KeycloakPutError) as refused:
        customer_idp.admin().send_update_account(
            user_id,
            ["UPDATE_PASSWORD"],
            client_id="personal-web-bff",
            redirect_uri="https://evil.example/callback",
        )
    assert refused.value.response_code == 400
    assert customer_idp.sql("SELECT 1 FROM action_tokens") == []


def test_admin_search_by_substring_and_paging(customer_idp: IdentityServer) -> None:
    admin = customer_idp.admin()
    for name in ("can.demir", "can.kaya", "cansu"):
        customer_idp.create_user(name)
    found = admin.get_users({"search": "can."})
    assert sorted(u["username"] for u in found) == ["can.demir", "can.kaya"]
    # "_" and "%" are plain characters, not wildcards.
    assert admin.get_users({"username": "c_n"}) == []
    assert admin.get_users({"username": "%"}) == []
    page = admin.get_users({"search": "can", "first": 1, "max": 1})
    assert [u["username"] for u in page] == ["can.kaya"]


def test_passwords_are_hashed_and_never_logged(
    customer_idp: IdentityServer, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "a-very-recognisable-secret-42"
    user_id = customer_idp.create_user("gizem", password=secret)
    oidc = customer_idp.openid("personal-mobile-api")
    with pytest.raises(KeycloakAuthenticationError):
        oidc.token("gizem", secret + "-wrong")
    oidc.token("gizem", secret)
    customer_idp.admin().set_user_password(user_id, secret + "-2", temporary=False)
    captured = capsys.readouterr()
    assert "password grant refused" in captured.err  # the log (JSON lines on stderr) is here...
    assert secret not in captured.out + captured.err  # ...and holds no password
    [row] = customer_idp.sql("SELECT * FROM users WHERE id = $1", user_id)
    assert row["password_hash"].startswith("$argon2id$")
    assert all(secret not in str(value) for value in row.values())
