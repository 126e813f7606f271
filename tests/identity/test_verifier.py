"""core.auth: every service's token verification, against the real identity servers.

Each refusal the issue lists gets a 401 problem+json with its own type; the caller's kind comes
from the issuer that verified the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from joserfc import jwt
from joserfc.jwk import RSAKey

from hiwallet.core.auth import Principal, TokenVerifier, TrustedIssuer, require_principal
from hiwallet.core.http import create_app
from tests.identity.conftest import PASSWORD, IdentityServer
from tests.identity.test_staff_totp import code_at, finish, secret_on, start_login
from tests.waiting import Clock

PROBLEM = "https://hiwallet.dev/problems/"


def issuer(idp: IdentityServer, kind: Any, audience: str = "hiwallet-api") -> TrustedIssuer:
    return TrustedIssuer.keycloak(idp.base_url, idp.realm, kind, audience)


def protected_app(verifier: TokenVerifier) -> FastAPI:
    app = create_app("verifier-test")

    def show(p: Principal) -> dict[str, Any]:
        return {"sub": p.subject, "kind": p.kind, "caller": p.caller, "azp": p.azp, "email": p.email}

    @app.get("/customers-only")
    async def customers_only(p: Principal = Depends(require_principal(verifier))) -> dict[str, Any]:
        return show(p)

    everyone = require_principal(verifier, kinds={"customer", "staff", "service_account"})

    @app.get("/anyone")
    async def anyone(p: Principal = Depends(everyone)) -> dict[str, Any]:
        return show(p)

    bff_only = require_principal(verifier, azp={"personal-web-bff"})

    @app.get("/bff-only")
    async def bff(p: Principal = Depends(bff_only)) -> dict[str, Any]:
        return show(p)

    return app


class Service:
    """A HiWallet service in-process, with a verifier that counts its JWKS fetches."""

    def __init__(self, issuers: list[TrustedIssuer]) -> None:
        self.fetches = 0

        async def count(request: httpx.Request) -> None:
            self.fetches += 1

        self.http = httpx.AsyncClient(timeout=5, event_hooks={"request": [count]})
        self.clock = Clock()  # the JWKS refetches' pacing, moved by the tests
        self.verifier = TokenVerifier(
            issuers, http_client=self.http, refetch_interval_seconds=2, clock=self.clock
        )
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=protected_app(self.verifier)), base_url="http://svc"
        )

    async def get(self, path: str, token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.client.get(path, headers=headers)

    async def close(self) -> None:
        await self.client.aclose()
        await self.http.aclose()


@pytest.fixture
async def service(customer_idp: IdentityServer, staff_idp: IdentityServer) -> AsyncIterator[Service]:
    svc = Service([issuer(customer_idp, "customer"), issuer(staff_idp, "staff")])
    yield svc
    await svc.close()


def customer_token(idp: IdentityServer, username: str = "tolga") -> dict[str, Any]:
    idp.create_user(username)
    token: dict[str, Any] = idp.openid("personal-mobile-api").token(username, PASSWORD)
    return token


def staff_person_token(idp: IdentityServer) -> str:
    idp.create_user("staffer")
    with httpx.Client() as browser:
        setup, verifier = start_login(idp, browser, "staffer")
        callback = post_otp(idp, browser, setup)
    return finish(idp, callback, verifier)["access_token"]


def post_otp(idp: IdentityServer, browser: httpx.Client, setup: httpx.Response) -> httpx.Response:
    from tests.identity.conftest import post_form

    return post_form(browser, idp.base_url, setup, otp=code_at(secret_on(setup), 0))


def assert_refused(response: httpx.Response, slug: str, status: int = 401) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == PROBLEM + slug, body
    assert body["status"] == status and body["detail"]
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")


async def jwks(idp: IdentityServer) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"{idp.issuer}/protocol/openid-connect/certs")
    result: dict[str, Any] = response.json()
    return result


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    result: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return result


def active_key(idp: IdentityServer) -> tuple[str, RSAKey]:
    [row] = idp.sql("SELECT kid, private_pem FROM signing_keys WHERE status = 'active'")
    return row["kid"], RSAKey.import_key(row["private_pem"])


def sign(idp: IdentityServer, claims: dict[str, Any]) -> str:
    kid, key = active_key(idp)
    return jwt.encode({"alg": "RS256", "kid": kid, "typ": "JWT"}, claims, key, algorithms=["RS256"])


async def test_callers_are_told_apart_by_issuer(
    service: Service, customer_idp: IdentityServer, staff_idp: IdentityServer
) -> None:
    customer = customer_token(customer_idp)["access_token"]
    ok = await service.get("/customers-only", customer)
    assert ok.status_code == 200, ok.text
    assert ok.json()["kind"] == "customer" and ok.json()["caller"] == "customer"
    assert ok.json()["email"] == "tolga@example.com"

    staff = staff_person_token(staff_idp)
    as_staff = await service.get("/anyone", staff)
    assert as_staff.json()["kind"] == "staff" and as_staff.json()["caller"] == "staff"
    # A new endpoint is closed to employees by default.
    assert_refused(await service.get("/customers-only", staff), "caller-not-allowed", 403)

    merchant = customer_idp.openid("merchant-demo").token(grant_type="client_credentials")
    as_merchant = await service.get("/anyone", merchant["access_token"])
    assert as_merchant.json() | {"sub": None} == {
        "sub": None,
        "kind": "customer",
        "caller": "service_account",
        "azp": "merchant-demo",
        "email": None,
    }
    assert_refused(await service.get("/customers-only", merchant["access_token"]), "caller-not-allowed", 403)

    staff_admin = staff_idp.openid("staff-admin").token(grant_type="client_credentials")
    as_staff_admin = await service.get("/anyone", staff_admin["access_token"])
    assert as_staff_admin.json()["kind"] == "staff"
    assert as_staff_admin.json()["caller"] == "service_account"


async def test_claims_inside_a_token_do_not_make_a_customer_staff(
    service: Service, customer_idp: IdentityServer
) -> None:
    # A customer-realm token that names itself staff in every way a claim could.
    token = customer_token(customer_idp)["access_token"]
    forged = claims_of(token) | {"kind": "staff", "realm_access": {"roles": ["staff"]}}
    response = await service.get("/anyone", sign(customer_idp, forged))
    assert response.status_code == 200 and response.json()["kind"] == "customer"


async def test_refusals(service: Service, customer_idp: IdentityServer, staff_idp: IdentityServer) -> None:
    token = customer_token(customer_idp)
    access = token["access_token"]
    claims = claims_of(access)
    kid = json.loads(base64.urlsafe_b64decode(access.split(".")[0] + "==="))["kid"]

    assert_refused(await service.get("/customers-only", None), "token-missing")
    assert_refused(await service.get("/customers-only", "not.a.jwt"), "invalid-token")

    alg_none = unsigned({"alg": "none", "typ": "JWT", "kid": kid}, claims) + "."
    assert_refused(await service.get("/customers-only", alg_none), "invalid-token")

    # HS256 "signed" with the issuer's public key, the classic algorithm confusion.
    certs = await jwks(customer_idp)
    public_pem = RSAKey.import_key(next(k for k in certs["keys"] if k["kid"] == kid)).as_pem(private=False)
    signing_input = unsigned({"alg": "HS256", "typ": "JWT", "kid": kid}, claims)
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    refused = await service.get("/customers-only", f"{signing_input}.{b64(mac)}")
    assert_refused(refused, "invalid-token")
    assert "RS256" in refused.json()["detail"]

    tampered_claims = claims | {"sub": "someone-else"}
    tampered = ".".join(
        [access.split(".")[0], b64(json.dumps(tampered_claims).encode()), access.split(".")[2]]
    )
    assert_refused(await service.get("/customers-only", tampered), "invalid-token")

    now = int(time.time())
    expired = sign(customer_idp, claims | {"iat": now - 400, "exp": now - 60})
    assert_refused(await service.get("/customers-only", expired), "token-expired")
    within_leeway = sign(customer_idp, claims | {"iat": now - 300, "exp": now - 5})
    assert (await service.get("/customers-only", within_leeway)).status_code == 200

    assert_refused(await service.get("/customers-only", token["id_token"]), "invalid-token")
    assert_refused(await service.get("/bff-only", access), "wrong-client")

    from_the_future = sign(customer_idp, claims | {"iat": now + 600, "exp": now + 900})
    assert_refused(await service.get("/customers-only", from_the_future), "invalid-token")

    no_exp = {k: v for k, v in claims.items() if k != "exp"}
    assert_refused(await service.get("/customers-only", sign(customer_idp, no_exp)), "invalid-token")


async def test_token_for_another_audience(customer_idp: IdentityServer) -> None:
    # business-api accepts only tokens issued for it; the mobile app's are not.
    business_api = Service([issuer(customer_idp, "customer", audience="business-api")])
    try:
        mobile = customer_token(customer_idp)["access_token"]
        assert_refused(await business_api.get("/anyone", mobile), "wrong-audience")
        merchant = customer_idp.openid("merchant-demo").token(grant_type="client_credentials")
        assert (await business_api.get("/anyone", merchant["access_token"])).status_code == 200
    finally:
        await business_api.close()


async def test_token_from_the_other_realm(customer_idp: IdentityServer, staff_idp: IdentityServer) -> None:
    # A customer front API does not recognise the staff realm at all.
    front_api = Service([issuer(customer_idp, "customer")])
    try:
        staff_sa = staff_idp.openid("staff-admin").token(grant_type="client_credentials")["access_token"]
        assert_refused(await front_api.get("/anyone", staff_sa), "untrusted-issuer")
        # Signed by the staff realm's key but claiming the customers' issuer: no such key there.
        posing = sign(staff_idp, claims_of(staff_sa) | {"iss": customer_idp.issuer})
        assert_refused(await front_api.get("/anyone", posing), "invalid-token")
    finally:
        await front_api.close()


async def test_jwks_is_cached_and_refetched_only_for_an_unknown_kid(
    service: Service, customer_idp: IdentityServer
) -> None:
    access = customer_token(customer_idp)["access_token"]
    for _ in range(10):
        assert (await service.get("/customers-only", access)).status_code == 200
    assert service.fetches == 1

    # Past the refetch interval, an unknown kid (as after a rotation) triggers one refetch...
    service.clock.advance(2.1)
    stranger = RSAKey.generate_key(2048, private=True)
    unknown = jwt.encode(
        {"alg": "RS256", "kid": "unknown-kid"}, claims_of(access), stranger, algorithms=["RS256"]
    )
    for _ in range(5):
        assert_refused(await service.get("/customers-only", unknown), "invalid-token")
    # ...and only one: made-up kids cannot make the verifier hammer the issuer.
    assert service.fetches == 2


async def test_key_rotation_without_downtime(service: Service, customer_idp: IdentityServer) -> None:
    from hiwallet.identity.keys import ensure_keys, rotate_keys
    from tests.identity.conftest import run_sync

    old = customer_token(customer_idp, "umut")
    old_kid = json.loads(base64.urlsafe_b64decode(old["access_token"].split(".")[0] + "==="))["kid"]
    assert (await service.get("/customers-only", old["access_token"])).status_code == 200

    async def rotate() -> str:
        from hiwallet.core.db import app_role, create_pool

        pool = await create_pool(customer_idp.database, role=app_role("identity"), min_size=1, max_size=1)
        try:
            return await rotate_keys(
                pool, 2048, publish_for_s=customer_idp.settings.access_token_lifetime_s + 60
            )
        finally:
            await pool.close()

    new_kid = run_sync(rotate())
    assert new_kid != old_kid
    certs = await jwks(customer_idp)
    assert {k["kid"] for k in certs["keys"]} == {old_kid, new_kid}

    new = customer_idp.openid("personal-mobile-api").token("umut", PASSWORD)
    assert json.loads(base64.urlsafe_b64decode(new["access_token"].split(".")[0] + "==="))["kid"] == new_kid
    # The verifier already knew the new key (it was published as "next"): no refetch needed.
    assert (await service.get("/customers-only", new["access_token"])).status_code == 200
    # The old key's token keeps verifying until it expires.
    assert (await service.get("/customers-only", old["access_token"])).status_code == 200
    assert service.fetches == 1

    # Once its tokens have expired the old key leaves the JWKS, and a next key takes its place.
    customer_idp.sql(
        "UPDATE signing_keys SET publish_until = now() - interval '1 second' WHERE kid = $1", old_kid
    )

    async def refill() -> None:
        from hiwallet.core.db import app_role, create_pool

        pool = await create_pool(customer_idp.database, role=app_role("identity"), min_size=1, max_size=1)
        try:
            await ensure_keys(pool, 2048)
        finally:
            await pool.close()

    run_sync(refill())
    certs = await jwks(customer_idp)
    kids = {k["kid"] for k in certs["keys"]}
    assert len(kids) == 2 and new_kid in kids and old_kid not in kids
    fresh_service = Service([issuer(customer_idp, "customer")])
    try:
        assert_refused(await fresh_service.get("/anyone", old["access_token"]), "invalid-token")
        assert (await fresh_service.get("/anyone", new["access_token"])).status_code == 200
    finally:
        await fresh_service.close()


async def test_a_verified_token_is_remembered_until_it_expires_or_its_key_goes(
    customer_idp: IdentityServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verifier keeps what it verified (the whole token is the key), so a client's repeated
    requests skip the signature; but a remembered token stops at its expiry, and when its
    issuer no longer publishes its key."""
    from hiwallet.core import auth

    decoded: list[str] = []
    real_decode = auth.jwt.decode

    def counting_decode(token: Any, *args: Any, **kwargs: Any) -> Any:
        decoded.append(token)
        return real_decode(token, *args, **kwargs)

    monkeypatch.setattr(auth.jwt, "decode", counting_decode)
    trusted = issuer(customer_idp, "customer")
    wall = Clock(time.time())
    verifier = TokenVerifier([trusted], leeway_seconds=0, wall_clock=wall)
    try:
        claims = claims_of(customer_token(customer_idp)["access_token"])
        now = int(wall())
        short = sign(customer_idp, claims | {"iat": now, "exp": now + 2})
        decoded.clear()  # (the identity server, in this process, decodes tokens of its own)
        first = await verifier.verify(short)
        assert await verifier.verify(short) == first and len(decoded) == 1  # remembered

        # Tampered bytes are another key: verified in full, and refused.
        head, _, signature = short.split(".")
        with pytest.raises(auth.TokenRejected):
            await verifier.verify(".".join([head, b64(b'{"sub": "x"}'), signature]))

        wall.advance(2.2)
        with pytest.raises(auth.TokenExpired):
            await verifier.verify(short)

        lasting = sign(customer_idp, claims | {"iat": now, "exp": now + 600})
        await verifier.verify(lasting)
        # The issuer drops the key (as a JWKS fetch would find): the remembered token stops.
        jwks_cache = verifier._caches[trusted.issuer_url]
        jwks_cache.keys = {}
        jwks_cache.last_fetch = time.monotonic()  # and no refetch within the interval
        with pytest.raises(auth.TokenRejected):
            await verifier.verify(lasting)
    finally:
        await verifier.aclose()
