"""core.http.AiohttpTransport against a real server on the loopback: what httpx's API promises
(the request as httpx built it, the answer, timeouts and errors as httpx's exceptions), over
aiohttp's pool (one connection kept for requests one after another)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import orjson
import pytest

from hiwallet.core.http.client import AiohttpTransport
from tests.servers import free_port

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict[str, object]], Awaitable[None]]


@asynccontextmanager
async def server(answer: Answer) -> AsyncIterator[tuple[str, dict[str, object]]]:
    """A raw HTTP/1.1 server: ``answer`` reads and writes each connection; ``seen`` keeps the
    connections' count and the last request."""
    seen: dict[str, object] = {"connections": 0}

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] = int(seen["connections"]) + 1  # type: ignore[call-overload]
        try:
            await answer(reader, writer, seen)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    port = free_port()
    srv = await asyncio.start_server(on_connection, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        srv.close()
        await srv.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return head[0], headers, body


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: dict[str, object]) -> None:
    while True:  # keep-alive: requests one after another on this connection
        line, headers, body = await read_request(reader)
        seen.update(line=line, headers=headers, body=body)
        payload = orjson.dumps({"line": line, "body": body.decode()})
        writer.write(
            b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Reply: yes\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        await writer.drain()


async def test_a_request_and_its_answer_as_httpx_builds_and_reads_them() -> None:
    async with (
        server(echo) as (url, seen),
        httpx.AsyncClient(
            base_url=url, transport=AiohttpTransport(max_connections=4), headers={"authorization": "Bearer t"}
        ) as client,
    ):
        answer = await client.post(
            "/v1/transfers?x=1", json={"amount_minor": 1}, headers={"idempotency-key": "k1"}
        )
        again = await client.get("/v1/transfers/r1")
    assert answer.status_code == 201
    assert answer.headers["x-reply"] == "yes"
    assert answer.json() == {"line": "POST /v1/transfers?x=1 HTTP/1.1", "body": '{"amount_minor":1}'}
    assert answer.request.url.path == "/v1/transfers"
    assert again.json()["line"] == "GET /v1/transfers/r1 HTTP/1.1"
    headers = seen["headers"]
    assert isinstance(headers, dict)
    assert headers["authorization"] == "Bearer t" and headers["host"] == url.removeprefix("http://")
    assert seen["connections"] == 1  # the connection kept between the two requests


async def test_a_refused_connection_is_httpx_connect_error() -> None:
    async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{free_port()}/")


async def test_a_server_that_does_not_answer_is_a_read_timeout() -> None:
    async def silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: dict[str, object]
    ) -> None:
        await read_request(reader)
        await asyncio.sleep(5)  # a server that does not answer: the behaviour under test

    async with (
        server(silent) as (url, _),
        httpx.AsyncClient(transport=AiohttpTransport(), timeout=0.3) as client,
    ):
        started = asyncio.get_running_loop().time()
        with pytest.raises(httpx.ReadTimeout):
            await client.get(url)
        assert asyncio.get_running_loop().time() - started < 3


async def test_a_hang_up_and_an_oversized_answer_are_protocol_errors() -> None:
    async def hang_up(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: dict[str, object]
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()

    async def too_big(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: dict[str, object]
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(8):
            writer.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with server(hang_up) as (url, _), httpx.AsyncClient(transport=AiohttpTransport()) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(url)
    transport = AiohttpTransport(max_response_bytes=4096)
    async with server(too_big) as (url, _), httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.RemoteProtocolError, match="larger than allowed"):
            await client.get(url)


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        AiohttpTransport(max_connections=0)
