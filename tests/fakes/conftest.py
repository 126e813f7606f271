"""The fakes, each served in-process on a free port, and a receiver that records what they send."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.fakes.stripe import StripeFakeSettings, create_stripe_fake_app
from tests.servers import serve, stop
from tests.waiting import stays_sync, until_sync

STRIPE_SECRET = "whsec_test_stripe_fake_secret_one"
STRIPE_SECRET_NEW = "whsec_test_stripe_fake_secret_two"
BANK_SECRET = "whsec_dGVzdC1iYW5rLWZha2Utc2VjcmV0LW9uZQ=="
BANK_SECRET_NEW = "whsec_dGVzdC1iYW5rLWZha2Utc2VjcmV0LXR3bw=="
STRIPE_KEY = "sk_test_fakes_suite"
BANK_KEY = "bank_test_key"
# A delivery answered 500 twice, then 202 (what the retry tests make the receiver answer).
FAILED_TWICE_THEN_DELIVERED = [(1, 500, "retry"), (2, 500, "retry"), (3, 202, "delivered")]
# Deliveries in tests: no wait before the first, quick retries.
FAST = {"notify_after_s": 0.0, "retry_initial_s": 0.05, "retry_max_delay_s": 0.2, "reorder_hold_s": 2.0}


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every request; answers what ``respond`` says (202 unless told)."""

    url: str = ""
    requests: list[Received] = field(default_factory=list)
    respond: Callable[[Received, list[Received]], int] = lambda _r, _all: 202

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Received]:
        until_sync(lambda: len(self.requests) >= count, timeout_s, f"{count} requests received")
        return list(self.requests)

    def exactly(self, count: int, quiet_s: float, timeout_s: float = 10.0) -> list[Received]:
        """``count`` requests, and no more within ``quiet_s`` after them."""
        received = self.wait_for(count, timeout_s)
        stays_sync(lambda: len(self.requests) == count, quiet_s, f"exactly {count} requests")
        return received

    def none_within(self, quiet_s: float) -> None:
        """No request within ``quiet_s``: what a refused or held-back one must not cause."""
        stays_sync(lambda: not self.requests, quiet_s, "no request received")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    recorder = Receiver()
    app = FastAPI()

    @app.post("/hook")
    async def hook(request: Request) -> Response:
        received = Received(await request.body(), dict(request.headers), time.monotonic())
        recorder.requests.append(received)
        return Response(status_code=recorder.respond(received, recorder.requests))

    base, server, thread = serve(app, "receiver")
    recorder.url = f"{base}/hook"
    yield recorder
    stop(server, thread)


@dataclass
class Fake:
    base_url: str
    headers: dict[str, str]
    app: Any

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers, timeout=10)

    def deliveries(self, event_id: str | None = None) -> list[dict[str, Any]]:
        params = {"event_id": event_id} if event_id else {}
        response = httpx.get(f"{self.base_url}/_control/deliveries", params=params, timeout=10)
        response.raise_for_status()
        return list(response.json()["data"])

    def dropped(self) -> list[dict[str, Any]]:
        """The deliveries a drop fault (or a lost callback) dropped."""
        return [a for a in self.deliveries() if a["outcome"] == "dropped"]

    def attempts(self, event_id: str | None = None) -> list[tuple[int, int | None, str]]:
        """(attempt, status, outcome) of each delivery attempt, in order."""
        return [(a["attempt"], a["status"], a["outcome"]) for a in self.deliveries(event_id)]

    def faults(self, **faults: Any) -> None:
        httpx.post(f"{self.base_url}/_control/faults", json=faults, timeout=10).raise_for_status()


def fake_settings(receiver: Receiver, secret: str, api_key: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A fake's settings: notifying ``receiver``, quick (FAST), then the test's own."""
    return {"webhook_url": receiver.url, "signing_secrets": [secret], "api_key": api_key, **FAST, **overrides}


@contextmanager
def served_fake(app: Any, name: str, api_key: str) -> Iterator[Fake]:
    base, server, thread = serve(app, name)
    try:
        yield Fake(base, {"Authorization": f"Bearer {api_key}"}, app)
    finally:
        stop(server, thread)


@pytest.fixture
def stripe_overrides() -> dict[str, Any]:
    """A test's own StripeFakeSettings (parametrize it directly)."""
    return {}


@pytest.fixture
def stripe_settings(receiver: Receiver, stripe_overrides: dict[str, Any]) -> dict[str, Any]:
    return fake_settings(receiver, STRIPE_SECRET, STRIPE_KEY, stripe_overrides)


@pytest.fixture
def stripe_fake(stripe_settings: dict[str, Any]) -> Iterator[Fake]:
    with served_fake(
        create_stripe_fake_app(StripeFakeSettings(**stripe_settings)), "stripe-fake", STRIPE_KEY
    ) as fake:
        yield fake


@pytest.fixture
def bank_overrides() -> dict[str, Any]:
    """A test's own BankFakeSettings (parametrize it directly)."""
    return {}


@pytest.fixture
def bank_settings(receiver: Receiver, bank_overrides: dict[str, Any]) -> dict[str, Any]:
    return fake_settings(receiver, BANK_SECRET, BANK_KEY, bank_overrides)


@pytest.fixture
def bank_fake(bank_settings: dict[str, Any]) -> Iterator[Fake]:
    with served_fake(create_bank_fake_app(BankFakeSettings(**bank_settings)), "bank-fake", BANK_KEY) as fake:
        yield fake
