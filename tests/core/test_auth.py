"""core.auth without an identity server: what happens when the issuer cannot be reached."""

from __future__ import annotations

import httpx
import pytest
from fastapi import Depends
from joserfc import jwt
from joserfc.jwk import RSAKey

from hiwallet.core.auth import Principal, TokenVerifier, TrustedIssuer, require_principal
from hiwallet.core.http import create_app
from tests.servers import free_port  # no server is started on it: closed


async def test_unreachable_issuer_is_503_not_401() -> None:
    base = f"http://127.0.0.1:{free_port()}"
    issuer = TrustedIssuer.keycloak(base, "hiwallet", "customer", "hiwallet-api")
    verifier = TokenVerifier([issuer], timeout_seconds=1)
    app = create_app("auth-test")

    @app.get("/me")
    async def me(p: Principal = Depends(require_principal(verifier))) -> str:
        return p.subject

    key = RSAKey.generate_key(2048, private=True)
    claims = {
        "iss": issuer.issuer_url,
        "sub": "x",
        "aud": "hiwallet-api",
        "typ": "Bearer",
        "exp": 4_000_000_000,
    }
    token = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key, algorithms=["RS256"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/me", headers={"Authorization": f"Bearer {token}"})
    await verifier.aclose()
    # The caller did nothing wrong: the provider is down, so this is ours to report.
    assert response.status_code == 503
    assert response.json()["type"] == "https://hiwallet.dev/problems/issuer-unavailable"


def test_a_verifier_needs_an_issuer() -> None:
    with pytest.raises(ValueError):
        TokenVerifier([])


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, json={"keys": []}),  # a half-started issuer, or a proxy's stub
        httpx.Response(200, json=[1, 2]),  # not a JWKS at all (was a 500)
        httpx.Response(200, json={"keys": [{"kty": "RSA", "kid": "k1", "n": "bad", "e": "AQAB"}]}),
        httpx.Response(200, text="<html>gateway</html>"),
        httpx.Response(502),
    ],
)
async def test_a_broken_jwks_answer_is_503_not_401(answer: httpx.Response) -> None:
    """An answer with no usable signing key is a failed fetch: the caller's token might be good,
    so 503 issuer-unavailable, never 401 (and never 500)."""
    base = "http://issuer.test"
    issuer = TrustedIssuer.keycloak(base, "hiwallet", "customer", "hiwallet-api")
    # The issuer's side of HTTP is stood in for; the verifier under test is the real one.
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: answer))
    verifier = TokenVerifier([issuer], http_client=http)
    app = create_app("auth-test")

    @app.get("/me")
    async def me(p: Principal = Depends(require_principal(verifier))) -> str:
        return p.subject

    key = RSAKey.generate_key(2048, private=True)
    claims = {
        "iss": issuer.issuer_url,
        "sub": "x",
        "aud": "hiwallet-api",
        "typ": "Bearer",
        "exp": 4_000_000_000,
    }
    token = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key, algorithms=["RS256"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        responses = [await client.get("/me", headers={"Authorization": f"Bearer {token}"}) for _ in range(2)]
    await http.aclose()
    for response in responses:
        assert response.status_code == 503, response.text
        assert response.json()["type"] == "https://hiwallet.dev/problems/issuer-unavailable"
        assert int(response.headers["retry-after"]) >= 1
