"""The fakes, each served in-process on a free port, and a receiver that records what they send."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request, Response

from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.fakes.stripe import StripeFakeSettings, create_stripe_fake_app

STRIPE_SECRET = "whsec_test_stripe_fake_secret_one"
STRIPE_SECRET_NEW = "whsec_test_stripe_fake_secret_two"
BANK_SECRET = "whsec_dGVzdC1iYW5rLWZha2Utc2VjcmV0LW9uZQ=="
BANK_SECRET_NEW = "whsec_dGVzdC1iYW5rLWZha2Utc2VjcmV0LXR3bw=="
STRIPE_KEY = "sk_test_fakes_suite"
BANK_KEY = "bank_test_key"
# Deliveries in tests: no wait before the first, quick retries.
FAST = {"notify_after_s": 0.0, "retry_initial_s": 0.05, "retry_max_delay_s": 0.2, "reorder_hold_s": 2.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(app: Any, name: str) -> tuple[str, uvicorn.Server, threading.Thread]:
    port = free_port()
    server = uvicorn.Server(
        # log_config=None: uvicorn leaves logging to ours (JSON), as in a service
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", log_config=None)
    )
    thread = threading.Thread(target=server.run, name=f"{name}-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server, thread


def stop(server: uvicorn.Server, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(timeout=10)


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
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.requests)} requests received, {count} expected")
            time.sleep(0.01)
        return list(self.requests)


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

    def faults(self, **faults: Any) -> None:
        httpx.post(f"{self.base_url}/_control/faults", json=faults, timeout=10).raise_for_status()


@pytest.fixture
def stripe_overrides() -> dict[str, Any]:
    """A test's own StripeFakeSettings (parametrize it directly)."""
    return {}


@pytest.fixture
def stripe_settings(receiver: Receiver, stripe_overrides: dict[str, Any]) -> dict[str, Any]:
    return {
        "webhook_url": receiver.url,
        "signing_secrets": [STRIPE_SECRET],
        "api_key": STRIPE_KEY,
        **FAST,
        **stripe_overrides,
    }


@pytest.fixture
def stripe_fake(stripe_settings: dict[str, Any]) -> Iterator[Fake]:
    app = create_stripe_fake_app(StripeFakeSettings(**stripe_settings))
    base, server, thread = serve(app, "stripe-fake")
    yield Fake(base, {"Authorization": f"Bearer {STRIPE_KEY}"}, app)
    stop(server, thread)


@pytest.fixture
def bank_overrides() -> dict[str, Any]:
    """A test's own BankFakeSettings (parametrize it directly)."""
    return {}


@pytest.fixture
def bank_settings(receiver: Receiver, bank_overrides: dict[str, Any]) -> dict[str, Any]:
    return {
        "webhook_url": receiver.url,
        "signing_secrets": [BANK_SECRET],
        "api_key": BANK_KEY,
        **FAST,
        **bank_overrides,
    }


@pytest.fixture
def bank_fake(bank_settings: dict[str, Any]) -> Iterator[Fake]:
    app = create_bank_fake_app(BankFakeSettings(**bank_settings))
    base, server, thread = serve(app, "bank-fake")
    yield Fake(base, {"Authorization": f"Bearer {BANK_KEY}"}, app)
    stop(server, thread)
