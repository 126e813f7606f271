"""withdrawal-orchestrator tests: the app in-process (its lifespan run, requests through httpx's
ASGI transport), a fresh hiwallet_withdrawal per test (the root ``withdrawal_db``), real
PostgreSQL; the broker tests (test_saga_broker.py) a RabbitMQ virtual host of their own (the
saga's queue names are fixed).

Tokens are signed here with a key of the test's own, and the verifier under test (the real
core.auth.TokenVerifier) fetches its JWKS through an httpx MockTransport. wallet-api's one
answer ("is this caller a member of this wallet") is stood in for the same way: the unit tests
of visibility only (CONTRACT-11); the end-to-end tests use the real one."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.consumer import IncomingMessage
from hiwallet.core.ids import new_id
from hiwallet.withdrawals.app import create_withdrawal_app
from hiwallet.withdrawals.settings import WithdrawalSettings
from tests import pgtemplate

ISSUER_BASE = "http://identity.test"
ISSUER = f"{ISSUER_BASE}/realms/hiwallet"
STAFF_ISSUER = f"{ISSUER_BASE}/realms/hiwallet-staff"
# A valid Turkish IBAN (the checksum and the country's format), and one with a wrong checksum.
IBAN = "TR330006100519786457841326"
BAD_IBAN = "TR330006100519786457841327"
PROBLEM = "https://hiwallet.dev/problems/"

_KEY = RSAKey.generate_key(2048, private=True, parameters={"kid": "test-key"})


def token(
    subject: str, *, issuer: str = ISSUER, audience: str = "hiwallet-api", expires_in_s: int = 600
) -> str:
    now = int(time.time())
    claims = {
        "iss": issuer,
        "sub": subject,
        "aud": audience,
        "typ": "Bearer",
        "iat": now,
        "exp": now + expires_in_s,
        "azp": "personal-mobile-api",
    }
    return jwt.encode({"alg": "RS256", "kid": "test-key"}, claims, _KEY, algorithms=["RS256"])


def subject_of(bearer: str) -> str:
    payload = bearer.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sub"])


def verifier() -> TokenVerifier:
    jwks = KeySet([_KEY]).as_dict(private=False)
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(200, json=jwks)))
    issuers = [
        TrustedIssuer.keycloak(ISSUER_BASE, "hiwallet", "customer", "hiwallet-api"),
        TrustedIssuer.keycloak(ISSUER_BASE, "hiwallet-staff", "staff", "hiwallet-api"),
    ]
    return TokenVerifier(issuers, http_client=http)


@dataclass
class WalletApiStub:
    """wallet-api's ``GET /v1/wallets/{wallet}``: 200 for a member, 404 for anyone else;
    ``status`` forces an answer, ``down`` a connection failure. It records who asked."""

    members: set[tuple[str, str]] = field(default_factory=set)  # (subject, wallet)
    status: int | None = None
    down: bool = False
    asked: list[tuple[str, str]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("wallet-api is down", request=request)
        wallet = request.url.path.removeprefix("/v1/wallets/")
        subject = subject_of(request.headers["authorization"].removeprefix("Bearer "))
        self.asked.append((subject, wallet))
        if self.status is not None:
            return httpx.Response(self.status, json={})
        if (subject, wallet) in self.members:
            return httpx.Response(200, json={"id": wallet})
        return httpx.Response(404, json={"type": f"{PROBLEM}not-found"})

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.MockTransport(self.handle), base_url="http://wallet-api.test"
        )


def settings_for(database: str, **overrides: Any) -> WithdrawalSettings:
    values: dict[str, Any] = {"database": database, "customer_issuer_base": ISSUER_BASE, **overrides}
    return WithdrawalSettings(**values)


@dataclass
class Customer:
    subject: str
    wallet: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {token(self.subject)}"}


def customer() -> Customer:
    return Customer(subject=str(uuid.uuid4()), wallet=f"0421:w:{uuid.uuid4()}")


def withdrawal(
    c: Customer, *, amount: int = 10_000, iban: str = IBAN, currency: str = "TRY"
) -> dict[str, Any]:
    return {"wallet": c.wallet, "amount_minor": amount, "currency": currency, "destination_iban": iban}


def key_header(key: str | None = None) -> dict[str, str]:
    return {"Idempotency-Key": key or str(uuid.uuid4())}


@asynccontextmanager
async def running(
    settings: WithdrawalSettings, stub: WalletApiStub | None = None, *, background: bool = False
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan (pool, service), without the broker, the consumer, the relay
    and the jobs unless ``background``."""
    stub = stub or WalletApiStub()
    wallet_api = stub.client()
    app = create_withdrawal_app(settings, background=background, verifier=verifier(), wallet_api=wallet_api)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://withdrawal") as client:
            client.app = app  # type: ignore[attr-defined]
            client.stub = stub  # type: ignore[attr-defined]
            yield client
    await wallet_api.aclose()


@pytest.fixture
def stub() -> WalletApiStub:
    return WalletApiStub()


@pytest.fixture
async def client(withdrawal_db: str, stub: WalletApiStub) -> AsyncIterator[httpx.AsyncClient]:
    async with running(settings_for(withdrawal_db), stub) as c:
        yield c


@pytest.fixture
async def owner(withdrawal_db: str) -> AsyncIterator[asyncpg.Connection]:
    async with pgtemplate.owner_connection(withdrawal_db) as conn:
        yield conn


def result(kind: str, body: dict[str, Any]) -> IncomingMessage:
    """A result as the consumer hands it to the handler."""
    return IncomingMessage(
        message_id=new_id(),
        type=kind,
        routing_key=kind,
        body=body,
        headers={},
        redelivered=False,
        delivery_count=0,
    )
