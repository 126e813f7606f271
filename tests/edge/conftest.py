"""Front API tests: the front APIs served in-process over real HTTP, real tokens from the real
identity servers (tests/wallet_api/conftest.py's), real wallet-api behind them (or a stub
upstream where a test needs an upstream that misbehaves on purpose), and a redis-server of the
module's own on a free port.

The stub upstream answers every path; what it does is read from the path's segments: a segment
``status-NNN`` answers NNN with a problem body of its own, ``hang`` never answers (until the
test ends), anything else answers 200 with the headers it received (so a test sees what the
front API forwarded)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hiwallet.business_api.app import create_business_api_app
from hiwallet.business_api.settings import BusinessApiSettings
from hiwallet.core.http.runtime import http_protocol
from hiwallet.personal_mobile_api.app import create_personal_mobile_api_app
from hiwallet.personal_mobile_api.settings import PersonalMobileApiSettings
from tests.identity.conftest import IdentityServer
from tests.onboarding.conftest import fakes, onb, onboarding_settings  # noqa: F401 (fixtures)
from tests.servers import free_port, serve, stop
from tests.waiting import until_sync
from tests.wallet_api.conftest import (  # noqa: F401 (fixtures)
    api,
    client_token,
    customer_idp,
    idps,
    password_token,
    staff_idp,
    wallet_api_settings,
)

STUB_PROBLEM = "https://hiwallet.dev/problems/stub-"


# --- Redis ---------------------------------------------------------------------------------------


class RedisServer:
    """A redis-server of the test's own (no persistence), stopped and started again on its port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        until_sync(self.answers, 10.0, "redis-server answering")

    def answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def keys(self) -> dict[str, int]:
        import redis

        client = redis.Redis(port=self.port)
        try:
            return {k.decode(): int(client.get(k) or 0) for k in client.keys("*")}
        finally:
            client.close()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


# --- the stub upstream ---------------------------------------------------------------------------


@dataclass
class Stub:
    url: str
    seen: list[dict[str, Any]]


def stub_app(seen: list[dict[str, Any]]) -> Starlette:
    async def anything(request: Request) -> Response:
        body = await request.body()
        segments = request.url.path.split("/")
        seen.append({"path": request.url.path, "headers": dict(request.headers), "body": body.decode()})
        for segment in segments:
            if segment.startswith("status-"):
                status = int(segment.removeprefix("status-"))
                problem = {"type": f"{STUB_PROBLEM}{status}", "title": "stub", "status": status, "n": 7}
                return JSONResponse(problem, status_code=status, media_type="application/problem+json")
            if segment == "hang":
                await asyncio.sleep(3600)
            if segment == "chunked":

                async def parts() -> Any:
                    for part in (b'{"parts": ', b'"in pieces"', b"}"):
                        yield part

                return StreamingResponse(parts(), media_type="application/json")
            if segment == "close":
                return JSONResponse({"closing": True}, headers={"Connection": "close"})
        return JSONResponse(
            {"path": request.url.path, "query": str(request.url.query), "headers": dict(request.headers)}
        )

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", anything, methods=methods)])


@pytest.fixture
def stub() -> Iterator[Stub]:
    seen: list[dict[str, Any]] = []
    url, server, thread = serve(stub_app(seen), "stub-upstream", timeout_graceful_shutdown=1)
    yield Stub(url, seen)
    stop(server, thread)


# --- the front APIs ------------------------------------------------------------------------------


@dataclass
class Front:
    url: str
    app: FastAPI
    server: uvicorn.Server
    thread: Any

    async def metric(self, name: str) -> float:
        async with httpx.AsyncClient(base_url=self.url) as http:
            text = (await http.get("/metrics")).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def edge_settings(idp: IdentityServer, redis_url: str, **overrides: Any) -> dict[str, Any]:
    return {
        "issuer_base": idp.base_url,
        "redis_url": redis_url,
        "upstream_read_timeout_s": 2.0,
        "redis_retry_s": 0.2,
        # Redis given seconds, not the default 50 ms: on a loaded CI machine one call slower than
        # that counts Redis as away and this instance limits alone (the outage test's subject, by
        # stopping Redis: refused at once, whatever this timeout), which breaks a shared count.
        "redis_timeout_s": 5.0,
        **overrides,
    }


@asynccontextmanager
async def running_front(kind: str, **settings: Any) -> AsyncIterator[Front]:
    made: PersonalMobileApiSettings | BusinessApiSettings
    if kind == "personal":
        made = PersonalMobileApiSettings(**settings)
        app = create_personal_mobile_api_app(made)
    else:
        made = BusinessApiSettings(**settings)
        app = create_business_api_app(made)
    # proxy_headers=False: as core.http.serve runs a service (a client cannot claim an address);
    # the HTTP protocol the front's settings name, as its process entry point serves it.
    url, server, thread = serve(
        app,
        f"{kind}-front",
        timeout_graceful_shutdown=1,
        proxy_headers=False,
        http=http_protocol(made.http_server),
    )
    try:
        yield Front(url, app, server, thread)
    finally:
        stop(server, thread)


def upstreams(kind: str, url: str) -> dict[str, str]:
    """Every upstream of the front API ``kind`` at ``url``."""
    names = ["wallet_api_url", "withdrawals_url"] + (["onboarding_url"] if kind == "personal" else [])
    return dict.fromkeys(names, url)


def nowhere() -> str:
    """The address of a port nothing listens on (an upstream that is stopped)."""
    return f"http://127.0.0.1:{free_port()}"


@dataclass
class People:
    idp: IdentityServer
    staff_idp: IdentityServer

    def customer_token(self) -> str:
        username = f"c{uuid.uuid4().hex[:12]}"
        self.idp.create_user(username)
        return password_token(self.idp, username)

    def merchant_token(self) -> str:
        return client_token(self.idp, "merchant-demo")

    def staff_token(self) -> str:
        """An employee's token (the staff realm, TOTP), made once per staff realm: its user has
        one fixed name."""
        from tests.identity.test_verifier import staff_person_token

        if self.staff_idp.base_url not in _STAFF_TOKENS:
            _STAFF_TOKENS[self.staff_idp.base_url] = staff_person_token(self.staff_idp)
        return _STAFF_TOKENS[self.staff_idp.base_url]


_STAFF_TOKENS: dict[str, str] = {}


@pytest.fixture
def people(customer_idp: IdentityServer, staff_idp: IdentityServer) -> People:  # noqa: F811
    return People(customer_idp, staff_idp)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def wait(predicate: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
