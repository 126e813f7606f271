"""core.auth while the identity service is down (issue 9, item 7), against a real identity
server over HTTP that is stopped and started again on its port.

A valid token is 503 ``issuer-unavailable`` (with Retry-After) while its keys cannot be had,
never 401 (a 401 makes a client throw a good token away); it is 200 once the keys were fetched,
and stays 200 when the issuer goes away again (the last good keys are kept across a failed
refresh). A forged token is 401 in every state; refetches stay bounded however many requests
come.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import signal
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from hiwallet.core.auth import TokenVerifier
from tests import pgtemplate
from tests.identity.conftest import IdentityServer, run_sync, start_server
from tests.identity.test_verifier import (
    assert_refused,
    b64,
    claims_of,
    customer_token,
    issuer,
    protected_app,
    unsigned,
)
from tests.servers import free_port
from tests.waiting import Clock, until

INTERVAL_S = 5.0


class Outage:
    """One realm's identity server on a fixed port, stopped and started at will, and a service
    in-process whose verifier counts its JWKS fetch attempts."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.port = free_port()
        self.server: IdentityServer | None = None
        self.fetches = 0
        self.clock = Clock()

        async def count(request: httpx.Request) -> None:
            self.fetches += 1

        self.http = httpx.AsyncClient(timeout=2, event_hooks={"request": [count]})

    def start(self) -> IdentityServer:
        self.server = start_server("hiwallet", self.database, port=self.port)
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def service(self, idp: IdentityServer) -> httpx.AsyncClient:
        self.verifier = TokenVerifier(
            [issuer(idp, "customer")],
            http_client=self.http,
            refetch_interval_seconds=INTERVAL_S,
            clock=self.clock,
        )
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=protected_app(self.verifier)), base_url="http://svc"
        )


@pytest.fixture
def outage(identity_template: str) -> Iterator[Outage]:
    database = run_sync(pgtemplate.clone(identity_template))
    state = Outage(database)
    yield state
    state.stop()
    run_sync(state.http.aclose())
    run_sync(pgtemplate.drop_database(database))


def kid_of(token: str) -> str:
    part = token.split(".")[0]
    return str(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))["kid"])


def forgeries(idp: IdentityServer, access: str, public_pem: bytes) -> dict[str, str]:
    """Tokens that must never pass, made from a real one's claims."""
    claims = claims_of(access)
    kid = kid_of(access)
    stranger = RSAKey.generate_key(2048, private=True)
    signing_input = unsigned({"alg": "HS256", "typ": "JWT", "kid": kid}, claims)
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    now = int(time.time())
    return {
        "alg-none": unsigned({"alg": "none", "typ": "JWT", "kid": kid}, claims) + ".",
        "hs256-with-the-public-key": f"{signing_input}.{b64(mac)}",
        "expired": jwt.encode(
            {"alg": "RS256", "kid": kid}, claims | {"iat": now - 900, "exp": now - 600}, stranger
        ),
        "id-token-typ": jwt.encode({"alg": "RS256", "kid": kid}, claims | {"typ": "ID"}, stranger),
        "wrong-audience": jwt.encode({"alg": "RS256", "kid": kid}, claims | {"aud": "elsewhere"}, stranger),
        # Signed by a stranger's key under the issuer's real kid: refusable only with the keys.
        "stranger-key-real-kid": jwt.encode({"alg": "RS256", "kid": kid}, claims, stranger),
    }


WITHOUT_KEYS = ("alg-none", "hs256-with-the-public-key", "expired", "id-token-typ", "wrong-audience")


async def test_valid_tokens_are_503_not_401_while_the_keys_cannot_be_had(outage: Outage) -> None:
    idp = outage.start()
    first = customer_token(idp, "ozan")["access_token"]
    second = customer_token(idp, "pelin")["access_token"]
    async with httpx.AsyncClient(timeout=5) as client:
        certs = (await client.get(f"{idp.issuer}/protocol/openid-connect/certs")).json()
    public_pem = RSAKey.import_key(next(k for k in certs["keys"] if k["kid"] == kid_of(first))).as_pem(
        private=False
    )
    forged = forgeries(idp, first, public_pem)
    made_up_kid = jwt.encode(
        {"alg": "RS256", "kid": "made-up"}, claims_of(first), RSAKey.generate_key(2048, private=True)
    )
    outage.stop()

    async def get(service: httpx.AsyncClient, token: str) -> httpx.Response:
        return await service.get("/customers-only", headers={"Authorization": f"Bearer {token}"})

    def assert_unavailable(response: httpx.Response) -> None:
        assert_refused(response, "issuer-unavailable", 503)
        assert 1 <= int(response.headers["retry-after"]) <= INTERVAL_S

    # 1. A service started while identity is down: no key set yet. Every valid token is 503,
    #    the first request and every one after it (it was 401 from the second on), and the
    #    requests cost one fetch attempt per interval, not one each.
    service = outage.service(idp)
    try:
        for _ in range(20):
            assert_unavailable(await get(service, first))
        assert_unavailable(await get(service, made_up_kid))
        assert outage.fetches == 1
        outage.clock.advance(INTERVAL_S)
        assert_unavailable(await get(service, second))
        assert outage.fetches == 2
        for name in WITHOUT_KEYS:
            assert (await get(service, forged[name])).status_code == 401, name
        # Signed with a stranger's key under the real kid: without the keys nobody can tell it
        # from a good token, so it is answered as one would be: 503, never 200.
        assert_unavailable(await get(service, forged["stranger-key-real-kid"]))

        # 2. Identity back: the next fetch (once the interval has passed) brings the keys.
        outage.start()
        assert_unavailable(await get(service, first))  # within the interval: no new attempt yet
        assert outage.fetches == 2
        outage.clock.advance(INTERVAL_S)
        ok = await get(service, first)
        assert ok.status_code == 200, ok.text
        assert outage.fetches == 3
        for name in forged:
            assert (await get(service, forged[name])).status_code == 401, name
        # A kid the issuer does not publish, just confirmed by a successful fetch: 401.
        assert_refused(await get(service, made_up_kid), "invalid-token")

        # 3. Identity gone again. A kid that needs a refresh cannot be judged (503), but the
        #    failed refresh keeps the last good keys: a token never seen before verifies.
        outage.stop()
        outage.clock.advance(INTERVAL_S)
        assert_unavailable(await get(service, made_up_kid))
        assert outage.fetches == 4
        fresh = await get(service, second)
        assert fresh.status_code == 200, fresh.text
        assert (await get(service, first)).status_code == 200
        for name in forged:
            assert (await get(service, forged[name])).status_code == 401, name
        # And a storm of made-up kids within the interval costs no fetch at all.
        stranger = RSAKey.generate_key(2048, private=True)
        for i in range(50):
            storm = jwt.encode({"alg": "RS256", "kid": f"storm-{i}"}, claims_of(first), stranger)
            assert (await get(service, storm)).status_code == 503
        assert outage.fetches == 4
    finally:
        await service.aclose()
        await outage.verifier.aclose()


async def test_wallet_api_started_while_identity_is_down(outage: Outage, wallet_db: str) -> None:
    """The fault as it was seen: `hiwallet run wallet-api` (its own process) started while the
    identity service is unreachable answers a valid token 503 issuer-unavailable, not 401; once
    identity is back, 200; identity gone again, still 200 (the last good keys)."""
    idp = outage.start()
    token = customer_token(idp, "rana")["access_token"]
    forged = forgeries(idp, token, b"not the key")
    outage.stop()
    port = free_port()
    env = {
        **os.environ,
        "HIWALLET_WALLET_API_PORT": str(port),
        "HIWALLET_WALLET_API_DATABASE": wallet_db,
        "HIWALLET_WALLET_API_CUSTOMER_ISSUER_BASE": idp.base_url,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hiwallet.cli", "run", "wallet-api", env=env, start_new_session=True
    )
    me = {"Authorization": f"Bearer {token}"}

    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as api:

            async def up() -> bool:
                try:
                    return (await api.get("/health")).status_code == 200
                except httpx.HTTPError:
                    return False

            await until(up, 30, "wallet-api up")

            async def refusals_are_401() -> None:
                for name in WITHOUT_KEYS:
                    bad = {"Authorization": f"Bearer {forged[name]}"}
                    assert (await api.get("/v1/accounts", headers=bad)).status_code == 401, name

            for _ in range(3):
                down = await api.get("/v1/accounts", headers=me)
                assert_refused(down, "issuer-unavailable", 503)
                assert int(down.headers["retry-after"]) >= 1
            await refusals_are_401()

            outage.start()

            async def served() -> bool:
                answer = await api.get("/v1/accounts", headers=me)
                assert answer.status_code in (200, 503), answer.text  # never 401
                return answer.status_code == 200

            await until(served, 30, "200 once identity is back")  # within the refetch interval
            await refusals_are_401()

            outage.stop()
            assert (await api.get("/v1/accounts", headers=me)).status_code == 200
            await refusals_are_401()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
