"""A front API accepts only a token issued for it (docs/front-apis.md, "Tokens"):

- 401 ``WWW-Authenticate: Bearer error="invalid_token"``: a token not for this door: a merchant's
  token on the personal API, a customer's on the merchants' API (their audiences lack the
  front API's name), a staff token on either (another issuer), a token without the internal
  audience, an expired one, a malformed one; no token at all is 401 too.
- 403 ``caller-not-allowed``: a token for this door (both audiences) of the wrong kind of caller.

Nothing refused reaches the upstream."""

from __future__ import annotations

import time

import httpx
import pytest

from hiwallet.core.auth import TokenVerifier
from hiwallet.core.edge import FrontTokens
from hiwallet.personal_mobile_api.app import create_personal_mobile_api_app
from hiwallet.personal_mobile_api.settings import PersonalMobileApiSettings
from tests.edge.conftest import People, RedisServer, Stub, bearer, edge_settings, running_front, upstreams
from tests.servers import serve, stop
from tests.wallet_api.conftest import client_token

PROBLEM = "https://hiwallet.dev/problems/"


def _refused(answer: httpx.Response, slug: str, status: int = 401) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"] == PROBLEM + slug
    if status == 401:
        assert answer.headers["www-authenticate"].startswith("Bearer ")
        if slug != "token-missing":
            assert 'error="invalid_token"' in answer.headers["www-authenticate"]


async def test_the_personal_api_takes_only_customers_tokens_for_it(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        ok = await http.get("/v1/me/accounts", headers=bearer(people.customer_token()))
        assert ok.status_code == 200, ok.text
        _refused(await http.get("/v1/me/accounts"), "token-missing")
        _refused(await http.get("/v1/me/accounts", headers=bearer("not.a.jwt")), "invalid-token")
        # a merchant's token: its audience is business-api and hiwallet-api
        _refused(await http.get("/v1/me/accounts", headers=bearer(people.merchant_token())), "wrong-audience")
        # a service account whose token is for hiwallet-api only (onboarding's)
        onboarding = client_token(people.idp, "onboarding")
        _refused(await http.get("/v1/me/accounts", headers=bearer(onboarding)), "wrong-audience")
        # staff: another issuer altogether
        staff = people.staff_token()
        _refused(await http.get("/v1/me/accounts", headers=bearer(staff)), "untrusted-issuer")
        staff_service = client_token(people.staff_idp, "staff-admin")
        _refused(await http.get("/v1/me/accounts", headers=bearer(staff_service)), "untrusted-issuer")
        # and on a money route, with a key and a body: refused before anything is forwarded
        _refused(
            await http.post(
                "/v1/transfers", json={}, headers={**bearer(people.merchant_token()), "Idempotency-Key": "k1"}
            ),
            "wrong-audience",
        )
    assert [c["path"] for c in stub.seen] == ["/v1/accounts"]


async def test_the_business_api_takes_only_clients_tokens_for_it(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(people.idp, redis_server.url, **upstreams("business", stub.url))
    async with running_front("business", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        ok = await http.get("/v1/accounts", headers=bearer(people.merchant_token()))
        assert ok.status_code == 200, ok.text
        _refused(await http.get("/v1/accounts"), "token-missing")
        _refused(await http.get("/v1/accounts", headers=bearer(people.customer_token())), "wrong-audience")
        staff = people.staff_token()
        _refused(await http.get("/v1/accounts", headers=bearer(staff)), "untrusted-issuer")
    assert [c["path"] for c in stub.seen] == ["/v1/accounts"]


async def test_a_token_for_this_door_of_the_wrong_kind_of_caller_is_403(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    """The merchant's token names business-api and hiwallet-api: on a door named business-api
    that serves people (a test's configuration), the token is good but the caller is not."""
    settings = PersonalMobileApiSettings(
        **edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    )
    verifier = TokenVerifier(FrontTokens.issuers(people.idp.base_url, "hiwallet", "business-api"))
    app = create_personal_mobile_api_app(settings, verifier=verifier)
    url, server, thread = serve(app, "people-door-named-business-api", timeout_graceful_shutdown=1)
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            # the verifier accepts business-api's audience; the door serves people only
            _refused(
                await http.get("/v1/me/accounts", headers=bearer(people.merchant_token())),
                "caller-not-allowed",
                403,
            )
    finally:
        stop(server, thread)
        await verifier.aclose()
    assert stub.seen == []


@pytest.mark.parametrize("ahead_s", [3600])
async def test_an_expired_token_is_401(
    stub: Stub, people: People, redis_server: RedisServer, ahead_s: int
) -> None:
    """The verifier's clock an hour ahead: the customer's token has expired."""
    settings = PersonalMobileApiSettings(
        **edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    )
    verifier = TokenVerifier(
        FrontTokens.issuers(people.idp.base_url, "hiwallet", "personal-mobile-api"),
        wall_clock=lambda: time.time() + ahead_s,
    )
    url, server, thread = serve(
        create_personal_mobile_api_app(settings, verifier=verifier), "later", timeout_graceful_shutdown=1
    )
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            _refused(
                await http.get("/v1/me/accounts", headers=bearer(people.customer_token())), "token-expired"
            )
    finally:
        stop(server, thread)
        await verifier.aclose()
    assert stub.seen == []
