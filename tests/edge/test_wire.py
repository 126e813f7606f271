"""core.edge.wire, the forwarding client, against a real server: chunked and closing answers,
keep-alive reuse, and its bounds (a connection waited for at most pool_s, an answer at most
read_s), after which the pool still serves."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from typing import Any
from urllib.parse import urlsplit

import pytest

from hiwallet.core.edge.wire import HttpPool, UpstreamError
from tests.edge.conftest import Stub, stub_app
from tests.servers import free_port, serve, stop


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


async def test_the_read_bound_counts_from_each_request_on_a_kept_connection(stub: Stub) -> None:
    """One timer a connection watches its answers' deadlines: a request sent on a kept
    connection, while the timer armed for an earlier answer is still pending, has its own
    read_s (not the earlier request's, and not none)."""
    pool = _pool(stub.url, max_connections=1, read_s=0.4)
    try:
        loop = asyncio.get_running_loop()
        for _ in range(3):  # answered at once: the timer armed by the first stays pending
            assert (await pool.request("GET", "/x/ok", [], None))[0] == 200
        await asyncio.sleep(0.25)  # the first request's deadline is now 0.15 s away
        started = loop.time()
        with pytest.raises(TimeoutError, match="no whole answer in time"):  # the pool's, not wait_for's
            await asyncio.wait_for(pool.request("GET", "/x/hang", [], None), 10)
        assert loop.time() - started >= 0.35  # its own 0.4 s, not what was left of the first's
        status, _, _ = await pool.request("GET", "/x/ok", [], None)  # a new connection serves
        assert status == 200
    finally:
        await pool.aclose()


async def test_a_refused_connection_is_an_upstream_error() -> None:
    pool = _pool(f"http://127.0.0.1:{free_port()}")
    with pytest.raises((UpstreamError, OSError)):
        await pool.request("GET", "/", [], None)
    assert pool._count == 0


def _unix_pool(path: str, *, max_connections: int, read_s: float) -> HttpPool:
    return HttpPool(
        "wallet-api",
        0,
        max_connections=max_connections,
        connect_s=1.0,
        read_s=read_s,
        pool_s=1.0,
        max_response_bytes=1 << 16,
        unix_path=path,
    )


async def test_a_unix_socket_upstream_answers_and_a_missing_one_is_refused() -> None:
    """An upstream at a Unix socket path (``unix_path``): the same exchange; the Host header
    names it; a path nothing listens on is an OSError (the front's 503), its slot given back."""
    seen: list[dict[str, Any]] = []
    directory = tempfile.mkdtemp(prefix="wire-")  # short: a socket's path is at most 107 bytes
    path = f"{directory}/up.sock"
    _, server, thread = serve(stub_app(seen), "stub-unix", uds=path, timeout_graceful_shutdown=1)
    try:
        pool = _unix_pool(path, max_connections=2, read_s=5.0)
        try:
            for _ in range(3):
                status, _, body = await pool.request("POST", "/x/ok", [], b"{}")
                assert status == 200 and b'"/x/ok"' in body
            assert pool._count == 1  # kept alive and reused
        finally:
            await pool.aclose()
        assert [call["headers"]["host"] for call in seen] == ["wallet-api"] * 3
    finally:
        stop(server, thread)
        shutil.rmtree(directory, ignore_errors=True)
    gone = _unix_pool(path, max_connections=1, read_s=1.0)
    with pytest.raises(OSError):
        await gone.request("GET", "/", [], None)
    assert gone._count == 0
