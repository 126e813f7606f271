"""What passes a front API and what does not: the headers forwarded (and the ones that are not),
the internal answers passed through unchanged, and 503 with Retry-After for an upstream that is
stopped, refuses, hangs or fails: never a 500, never a hang."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from hiwallet.core.edge.forward import Upstream, UpstreamTimeouts
from tests.core.test_tracing import spans as spans  # the fixture
from tests.edge.conftest import (
    STUB_PROBLEM,
    People,
    RedisServer,
    Stub,
    bearer,
    edge_settings,
    nowhere,
    running_front,
    stub_app,
    upstreams,
)
from tests.servers import serve, stop

PROBLEM = "https://hiwallet.dev/problems/"
FORGED = {
    "X-User-Id": "someone-else",
    "X-Forwarded-User": "someone-else",
    "X-Authenticated-Subject": "someone-else",
    "X-Hiwallet-Caller": "staff",
    "X-Real-Ip": "10.0.0.1",
    "Cookie": "session=stolen",
}


async def test_what_is_forwarded_and_what_is_not(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    token = people.customer_token()
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        key = str(uuid.uuid4())
        sent = {
            **bearer(token),
            "Idempotency-Key": key,
            "Accept-Language": "tr-TR",
            "X-Request-Id": "req-edge-1",
            "Content-Type": "application/json",
            **FORGED,
        }
        answer = await http.post("/v1/transfers", content=b'{"any": "body", "as": "sent"}', headers=sent)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-request-id"] == "req-edge-1"
    [call] = stub.seen
    got = call["headers"]
    assert call["path"] == "/v1/transfers"
    assert call["body"] == '{"any": "body", "as": "sent"}'  # the bytes as sent: not parsed, not re-made
    assert got["authorization"] == f"Bearer {token}"  # unchanged
    assert got["idempotency-key"] == key
    assert got["accept-language"] == "tr-TR"
    assert got["x-request-id"] == "req-edge-1"
    assert got["x-forwarded-for"] == "127.0.0.1"  # what the front API saw, not what was claimed
    for name in FORGED:
        assert name.lower() not in got, name


async def test_query_parameters_pass_by_name_only(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        answer = await http.get(
            "/v1/wallets/w1/movements",
            params={"cursor": "12", "limit": "3", "purse": "promo", "admin": "true"},
            headers=bearer(people.customer_token()),
        )
    assert answer.status_code == 200, answer.text
    [call] = stub.seen
    assert call["path"] == "/v1/wallets/w1/statement"
    assert sorted(answer.json()["query"].split("&")) == ["cursor=12", "limit=3", "purse=promo"]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 429])
async def test_internal_refusals_pass_through_unchanged(
    stub: Stub, people: People, redis_server: RedisServer, status: int
) -> None:
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        answer = await http.get(f"/v1/wallets/status-{status}", headers=bearer(people.customer_token()))
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json() == {"type": f"{STUB_PROBLEM}{status}", "title": "stub", "status": status, "n": 7}
    assert "RateLimit" in answer.headers and "RateLimit-Policy" in answer.headers


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_an_internal_service_unavailable_is_503_with_retry_after(
    stub: Stub, people: People, redis_server: RedisServer, status: int
) -> None:
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        answer = await http.get(f"/v1/wallets/status-{status}", headers=bearer(people.customer_token()))
    _assert_unavailable(answer)


@pytest.mark.parametrize("status", [500, 501])
async def test_an_internal_failure_is_502_without_retry_after(
    stub: Stub, people: People, redis_server: RedisServer, status: int
) -> None:
    """A defect behind the door is not "retry later" (fail closed): 502, nothing of its body."""
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        answer = await http.get(f"/v1/wallets/status-{status}", headers=bearer(people.customer_token()))
    assert answer.status_code == 502, answer.text
    assert answer.json()["type"].endswith("/upstream-failed")
    assert "retry-after" not in answer.headers
    assert "stub" not in answer.text


async def test_an_upstream_that_hangs_is_503_after_the_read_timeout(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(
        people.idp, redis_server.url, upstream_read_timeout_s=0.3, **upstreams("personal", stub.url)
    )
    async with (
        running_front("personal", **settings) as front,
        httpx.AsyncClient(base_url=front.url, timeout=30) as http,
    ):
        answer = await http.get("/v1/wallets/hang", headers=bearer(people.customer_token()))
        _assert_unavailable(answer)
        assert await front.metric('edge_upstream_unavailable_total{reason="timeout"') == 1


@pytest.mark.parametrize(
    ("kind", "path", "upstream"),
    [
        ("personal", "/v1/me/accounts", "wallet_api_url"),
        ("personal", "/v1/withdrawals/0190a0b0-0000-7000-8000-000000000000", "withdrawals_url"),
        ("personal", "/v1/me", "onboarding_url"),
        ("business", "/v1/accounts", "wallet_api_url"),
        ("business", "/v1/withdrawals/0190a0b0-0000-7000-8000-000000000000", "withdrawals_url"),
    ],
)
async def test_each_internal_service_stopped_is_503_with_retry_after(
    stub: Stub, people: People, redis_server: RedisServer, kind: str, path: str, upstream: str
) -> None:
    settings = edge_settings(
        people.idp, redis_server.url, **{**upstreams(kind, stub.url), upstream: nowhere()}
    )
    token = people.customer_token() if kind == "personal" else people.merchant_token()
    async with running_front(kind, **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        answer = await http.get(path, headers=bearer(token))
        _assert_unavailable(answer)
        assert await front.metric('edge_upstream_unavailable_total{reason="unreachable"') == 1
        # the others still answer
        other = "/v1/wallets/w1" if upstream != "wallet_api_url" else "/v1/withdrawals?wallet=w1"
        assert (await http.get(other, headers=bearer(token))).status_code == 200
    assert all(call["path"] != path for call in stub.seen)


async def test_anonymous_registration_is_forwarded_without_a_token(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        answer = await http.post("/v1/registrations", json={"email": "a@b.cd"}, headers=FORGED)
        assert answer.status_code == 200, answer.text
        dotted = await http.post("/v1/registrations/../complete", json={})
        assert dotted.status_code == 404
    [call] = stub.seen
    assert call["path"] == "/v1/registrations"
    assert "authorization" not in call["headers"]


def _assert_unavailable(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"] == PROBLEM + "upstream-unavailable"
    assert int(answer.headers["retry-after"]) >= 1
    assert "RateLimit" in answer.headers


async def test_a_traced_request_is_one_trace_through_the_front_to_its_upstream(
    stub: Stub, people: People, redis_server: RedisServer, spans: InMemorySpanExporter
) -> None:
    """With tracing on (core.tracing), the front continues the caller's traceparent (here the
    test's own httpx call, traced too) and sends its own CLIENT span's with the forwarded request."""
    settings = edge_settings(people.idp, redis_server.url, **upstreams("personal", stub.url))
    token = people.customer_token()
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        answer = await http.post("/v1/transfers", content=b"{}", headers=bearer(token))
        assert answer.status_code == 200, answer.text
    finished = spans.get_finished_spans()
    [server] = [s for s in finished if s.kind == SpanKind.SERVER and s.name == "POST /v1/transfers"]
    trace = [s for s in finished if s.context.trace_id == server.context.trace_id]
    [caller] = [s for s in trace if s.parent is None]
    [forward] = [
        s
        for s in trace
        if s.kind == SpanKind.CLIENT
        and s.attributes
        and s.attributes.get("server.port") == int(stub.url.rsplit(":", 1)[1])
    ]
    assert caller.kind == SpanKind.CLIENT  # the test's call
    assert server.parent is not None and server.parent.span_id == caller.context.span_id
    assert forward.parent is not None and forward.parent.span_id == server.context.span_id
    [call] = stub.seen
    assert call["headers"]["traceparent"].startswith(
        f"00-{server.context.trace_id:032x}-{forward.context.span_id:016x}-"
    )


async def test_an_upstream_on_a_unix_socket_is_forwarded_to_and_503_once_it_is_gone(
    people: People, redis_server: RedisServer
) -> None:
    """``unix:/path`` (wallet-api on the same host): the same forwarding, the same 503 with
    Retry-After once nothing listens there (the stale socket file refused, then no file)."""
    seen: list[dict[str, Any]] = []
    directory = tempfile.mkdtemp(prefix="front-")  # short: a socket's path is at most 107 bytes
    path = f"{directory}/wallet-api.sock"
    _, server, thread = serve(stub_app(seen), "stub-unix", uds=path, timeout_graceful_shutdown=1)
    token = people.customer_token()
    try:
        settings = edge_settings(
            people.idp,
            redis_server.url,
            **{**upstreams("personal", nowhere()), "wallet_api_url": f"unix:{path}"},
        )
        async with (
            running_front("personal", **settings) as front,
            httpx.AsyncClient(base_url=front.url) as http,
        ):
            sent = {**bearer(token), "X-Request-Id": "req-unix-1", "Content-Type": "application/json"}
            answer = await http.post("/v1/transfers", content=b'{"as": "sent"}', headers=sent)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-request-id"] == "req-unix-1"
            [call] = seen
            assert call["path"] == "/v1/transfers" and call["body"] == '{"as": "sent"}'
            assert call["headers"]["x-request-id"] == "req-unix-1"
            assert call["headers"]["authorization"] == f"Bearer {token}"
            stop(server, thread)
            _assert_unavailable(await http.post("/v1/transfers", content=b"{}", headers=bearer(token)))
            os.unlink(path)
            _assert_unavailable(await http.get("/v1/wallets/w1", headers=bearer(token)))
            assert await front.metric('edge_upstream_unavailable_total{reason="unreachable"') == 2
    finally:
        stop(server, thread)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize(
    "url",
    [
        "unix:relative.sock",
        "unix://host/x.sock",
        "unix:/dir/",
        "unix:/" + "x" * 120,
        "http+unix://x",
        "https://a:1",
    ],
)
def test_an_upstream_address_misread_stops_the_front_at_start(url: str) -> None:
    failures = Upstream.failures_counter(CollectorRegistry())
    timeouts = UpstreamTimeouts(1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="wallet-api"):
        Upstream(
            "wallet-api",
            url,
            timeouts,
            max_connections=1,
            max_response_bytes=1,
            retry_after_s=1,
            failures=failures,
        )
