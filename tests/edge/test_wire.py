"""core.edge.wire, the forwarding client, against a real server: chunked and closing answers,
keep-alive reuse, and its bounds (a connection waited for at most pool_s, an answer at most
read_s), after which the pool still serves."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from hiwallet.core.edge.wire import HttpPool, UpstreamError
from tests.edge.conftest import Stub
from tests.servers import free_port


def _pool(url: str, **overrides: float) -> HttpPool:
    parts = urlsplit(url)
    settings = {"max_connections": 2, "connect_s": 1.0, "read_s": 5.0, "pool_s": 1.0, **overrides}
    return HttpPool(parts.hostname or "", parts.port or 80, max_response_bytes=1 << 16, **settings)  # type: ignore[arg-type]


async def test_answers_whole_chunked_or_closing_and_connections_reused(stub: Stub) -> None:
    pool = _pool(stub.url)
    try:
        status, _, body = await pool.request("GET", "/x/chunked", [], None)
        assert (status, body) == (200, b'{"parts": "in pieces"}')
        status, _, body = await pool.request(
            "POST", "/x/close", [("content-type", "application/json")], b"{}"
        )
        assert status == 200 and body == b'{"closing":true}'
        for _ in range(5):
            status, headers, _ = await pool.request("GET", "/x/status-404?q=1", [], None)
            assert status == 404 and (b"content-type", b"application/problem+json") in headers
        assert len({call["path"] for call in stub.seen}) == 3
        assert pool._count <= 2  # the closing one was not kept; the rest reused one connection
    finally:
        await pool.aclose()


async def test_bounds_and_the_pool_serves_after_them(stub: Stub) -> None:
    pool = _pool(stub.url, max_connections=1, read_s=0.3, pool_s=0.1)
    try:
        hanging = asyncio.create_task(pool.request("GET", "/x/hang", [], None))
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):  # the one connection is busy: no wait past pool_s
            await pool.request("GET", "/x/ok", [], None)
        with pytest.raises(TimeoutError):  # no answer within read_s
            await hanging
        status, _, _ = await pool.request("GET", "/x/ok", [], None)  # the slot came back
        assert status == 200
    finally:
        await pool.aclose()


async def test_a_refused_connection_is_an_upstream_error() -> None:
    pool = _pool(f"http://127.0.0.1:{free_port()}")
    with pytest.raises((UpstreamError, OSError)):
        await pool.request("GET", "/", [], None)
    assert pool._count == 0
