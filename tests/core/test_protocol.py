"""core.http.protocol.LeanHttpProtocol under uvicorn's server, on real sockets: each behaviour a
server under a front door must have, byte for byte where it is uvicorn's too (those tests run
against uvicorn's own httptools protocol as well), and the bounds uvicorn lacks."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hiwallet.core.http.protocol import LeanHttpProtocol
from tests.servers import serve, stop
from tests.waiting import until

LEAN = functools.partial(LeanHttpProtocol, header_timeout_s=0.5, max_head_bytes=8_192, max_body_bytes=100_000)
BOTH = pytest.mark.parametrize("protocol", [LEAN, HttpToolsProtocol], ids=["lean", "uvicorn"])

lifespan_log: list[str] = []
listened: list[str] = []


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """/echo answers the body; /slow waits 0.3 s; /fail raises before answering; /fail-later
    after its head; /bad-name and /bad-value send a header uvicorn refuses; /short a body
    shorter than its Content-Length; /stream a chunked answer; /big 4 MB; /nothing returns
    without answering; /no-read answers without reading the body; /slow-read reads the body
    a part every 10 ms."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                lifespan_log.append("startup")
                await send({"type": "lifespan.startup.complete"})
            else:
                lifespan_log.append("shutdown")
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    body = b""
    if path == "/cancel-receive":  # a receive given up on before the body came: the next one has it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(receive(), 0.05)
    if path not in ("/no-read", "/slow-read"):
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
    if path == "/slow-read":
        more = True
        while more:
            await asyncio.sleep(0.01)
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
    if path == "/slow":
        await asyncio.sleep(0.3)
    if path == "/fail":
        raise RuntimeError("the app failed")
    if path == "/nothing":
        return
    headers = [(b"content-type", b"text/plain")]
    if path == "/bad-name":
        headers.append((b"bad name", b"x"))
    if path == "/bad-value":
        headers.append((b"x-bad", b"a\r\nset-cookie: injected"))
    answer = b"%s %s %d" % (scope["method"].encode(), path.encode(), len(body))
    if path == "/big":
        answer = b"x" * 4_000_000
    if path == "/listen":  # a listener for the client's end beside the answer (Starlette's, streaming)
        listener = asyncio.ensure_future(receive())
        await asyncio.sleep(0)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        listened.append((await asyncio.wait_for(listener, 5))["type"])
        return
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    length = len(answer) + (5 if path == "/short" else 0)
    headers.append((b"content-length", str(length).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if path == "/fail-later":
        raise RuntimeError("the app failed mid-answer")
    await send({"type": "http.response.body", "body": answer})


class Server:
    def __init__(self, protocol: Any, **config: Any) -> None:
        self.url, self.server, self.thread = serve(
            app, "protocol", http=protocol, timeout_keep_alive=config.pop("keep_alive", 5), **config
        )
        self.port = int(self.url.rsplit(":", 1)[1])

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    def stop(self) -> None:
        stop(self.server, self.thread)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    running = Server(getattr(request, "param", LEAN))
    yield running
    running.stop()


@pytest.fixture
def either(protocol: Any) -> Iterator[Server]:
    running = Server(protocol)
    yield running
    running.stop()


def _request(
    path: str, body: bytes = b"", method: str = "POST", extra: bytes = b"", version: bytes = b"1.1"
) -> bytes:
    return b"%s %s HTTP/%s\r\nhost: test\r\ncontent-length: %d\r\n%s\r\n%s" % (
        method.encode(),
        path.encode(),
        version,
        len(body),
        extra,
        body,
    )


async def _answer(
    reader: asyncio.StreamReader, *, to_head: bool = False
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One answer: status, headers (names lower-case), body (by Content-Length or chunks; none
    for a HEAD request's)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b": ")
            headers[name.lower()] = value
    if to_head:
        body = b""
    elif b"content-length" in headers:
        body = await asyncio.wait_for(reader.readexactly(int(headers[b"content-length"])), 5)
    elif headers.get(b"transfer-encoding") == b"chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            part = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += part[:-2]
    else:
        body = b""
    return status, headers, body


async def _closed(reader: asyncio.StreamReader, within_s: float = 5) -> bytes:
    """What is left before the server closes the connection (AssertionError if it does not)."""
    return await asyncio.wait_for(reader.read(), within_s)


@BOTH
async def test_keep_alive_and_http_1_0_closes(either: Server) -> None:
    reader, writer = await either.connect()
    for n in range(3):
        writer.write(_request("/echo", b"x" * n))
        status, headers, body = await _answer(reader)
        assert (status, body) == (200, b"POST /echo %d" % n) and b"connection" not in headers
        assert b"date" in headers
    writer.write(_request("/echo", version=b"1.0"))
    status, headers, _ = await _answer(reader)
    assert status == 200 and headers[b"connection"] == b"close"
    assert await _closed(reader) == b""
    writer.close()


@BOTH
async def test_pipelined_requests_answered_in_order(either: Server) -> None:
    reader, writer = await either.connect()
    writer.write(
        _request("/slow", b"a") + _request("/echo", b"bb") + _request("/stream") + _request("/echo", b"d")
    )
    answers = [await _answer(reader) for _ in range(4)]
    assert [body for _, _, body in answers] == [
        b"POST /slow 1",
        b"POST /echo 2",
        b"one two three",
        b"POST /echo 1",
    ]
    writer.close()


@BOTH
async def test_expect_100_continue_when_the_app_asks_for_the_body(either: Server) -> None:
    reader, writer = await either.connect()
    writer.write(b"POST /echo HTTP/1.1\r\nhost: test\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"hello")
    assert (await _answer(reader))[2] == b"POST /echo 5"
    # An app that answers without reading: no 100, the answer.
    writer.write(b"POST /no-read HTTP/1.1\r\nhost: test\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n")
    status, _, body = await _answer(reader)
    assert (status, body) == (200, b"POST /no-read 0")
    writer.close()


@BOTH
async def test_receives_waiting_at_once_or_given_up(either: Server) -> None:
    reader, writer = await either.connect()
    writer.write(b"POST /cancel-receive HTTP/1.1\r\nhost: test\r\ncontent-length: 5\r\n\r\n")
    await asyncio.sleep(0.2)
    writer.write(b"hello")
    assert (await _answer(reader))[2] == b"POST /cancel-receive 5"
    listened.clear()
    writer.write(_request("/listen", b"body"))
    assert (await _answer(reader))[2] == b"ok"
    await until(lambda: listened == ["http.disconnect"], 5, "the listener told the answer is over")
    writer.write(_request("/echo"))  # the connection goes on
    assert (await _answer(reader))[2] == b"POST /echo 0"
    writer.close()


@BOTH
async def test_a_500_when_the_app_fails_before_answering_a_close_after(either: Server) -> None:
    for path in ("/fail", "/nothing"):
        reader, writer = await either.connect()
        writer.write(_request(path))
        status, headers, body = await _answer(reader)
        assert (status, body, headers[b"connection"]) == (500, b"Internal Server Error", b"close")
        assert await _closed(reader) == b""
        writer.close()
    reader, writer = await either.connect()
    writer.write(_request("/fail-later"))
    left = await _closed(reader)
    assert b"HTTP/1.1 200" in left or left == b""  # the head at most, never a whole answer
    writer.close()


@BOTH
async def test_answers_header_checks_and_framing(either: Server) -> None:
    for path in ("/bad-name", "/bad-value", "/short"):
        reader, writer = await either.connect()
        writer.write(_request(path))
        left = await _closed(reader)
        assert b"set-cookie" not in left and (path == "/short" or left == b""), (path, left)
        writer.close()
    reader, writer = await either.connect()
    writer.write(_request("/echo", method="HEAD"))
    status, headers, _ = await _answer(reader, to_head=True)
    assert status == 200 and headers[b"content-length"] == b"12"  # len(b"HEAD /echo 0")
    writer.write(_request("/stream"))  # no body came with the HEAD answer: this one is next
    status, headers, body = await _answer(reader)
    assert headers[b"transfer-encoding"] == b"chunked" and body == b"one two three"
    writer.close()


@BOTH
async def test_flow_control_both_ways(either: Server) -> None:
    reader, writer = await either.connect()
    writer.write(_request("/big"))
    await asyncio.sleep(0.3)  # the client does not read: the server's writes wait
    status, _, body = await _answer(reader)
    assert status == 200 and body == b"x" * 4_000_000
    part = b"y" * 90_000
    writer.write(b"POST /slow-read HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n")
    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(part), part))  # past 64 KiB: reading waits for the app
    await writer.drain()
    assert (await _answer(reader))[2] == b"POST /slow-read 90000"
    writer.close()


@BOTH
async def test_draining_stop_finishes_in_flight_and_closes_idle(protocol: Any) -> None:
    running = Server(protocol)
    lifespan_log.clear()
    try:
        busy_reader, busy_writer = await running.connect()
        idle_reader, idle_writer = await running.connect()
        idle_writer.write(_request("/echo"))
        await _answer(idle_reader)
        busy_writer.write(_request("/slow"))
        await asyncio.sleep(0.1)
        stopping = asyncio.get_running_loop().run_in_executor(None, running.stop)
        assert await _closed(idle_reader) == b""
        status, headers, body = await _answer(busy_reader)
        assert (status, body, headers[b"connection"]) == (200, b"POST /slow 0", b"close")
        assert await _closed(busy_reader) == b""
        await stopping
        assert not running.thread.is_alive() and lifespan_log[-1:] == ["shutdown"]
        with pytest.raises(OSError):
            await running.connect()
    finally:
        running.stop()


async def test_lifespan_started_before_the_first_request() -> None:
    lifespan_log.clear()
    running = Server(LEAN)
    try:
        assert lifespan_log == ["startup"]
        reader, writer = await running.connect()
        writer.write(_request("/echo"))
        assert (await _answer(reader))[0] == 200
        writer.close()
    finally:
        running.stop()
    assert lifespan_log == ["startup", "shutdown"]


async def test_idle_and_slow_heads_closed() -> None:
    running = Server(LEAN, keep_alive=0.3)
    try:
        reader, writer = await running.connect()  # never sends
        assert await _closed(reader, 3) == b""
        reader, writer = await running.connect()
        writer.write(_request("/echo"))
        await _answer(reader)
        assert await _closed(reader, 3) == b""  # idle after its answer
        reader, writer = await running.connect()
        writer.write(b"POST /echo HTTP/1.1\r\nhost: te")  # a head trickled, never whole

        async def trickle() -> None:
            for _ in range(50):
                await asyncio.sleep(0.1)
                writer.write(b"s")

        trickling = asyncio.create_task(trickle())
        assert await _closed(reader, 3) == b""  # within the head's 0.5 s, not the trickle's 5
        trickling.cancel()
        # A pipelined head waiting while the one before is served is not the client's delay.
        reader, writer = await running.connect()
        writer.write(
            _request("/slow")
            + _request("/slow")
            + b"POST /echo HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n"
        )
        assert [(await _answer(reader))[0] for _ in range(2)] == [200, 200]
        writer.write(b"\r\n")
        assert (await _answer(reader))[2] == b"POST /echo 0"
    finally:
        running.stop()


@pytest.mark.parametrize("server", [LEAN], indirect=True)
async def test_heads_and_bodies_bounded(server: Server) -> None:
    reader, writer = await server.connect()
    writer.write(b"GET /echo HTTP/1.1\r\nhost: test\r\nx-long: ")
    await writer.drain()
    await asyncio.sleep(0.05)  # the rest in reads of its own
    writer.write(b"a" * 20_000 + b"\r\n\r\n")
    status, headers, _ = await _answer(reader)
    assert (status, headers[b"connection"]) == (431, b"close")
    assert await _closed(reader) == b""
    # A chunked body past the bound: 413, the connection's end.
    reader, writer = await server.connect()
    writer.write(b"POST /slow-read HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n")
    part = b"z" * 60_000
    for _ in range(2):
        writer.write(b"%x\r\n%s\r\n" % (len(part), part))
    status, headers, _ = await _answer(reader)
    assert (status, headers[b"connection"]) == (413, b"close")
    assert await _closed(reader) == b""
    # A declared length past it: the app answers (here without reading), then the end.
    reader, writer = await server.connect()
    writer.write(b"POST /no-read HTTP/1.1\r\nhost: test\r\ncontent-length: 500000\r\n\r\n" + b"z" * 1000)
    status, headers, body = await _answer(reader)
    assert (status, body, headers[b"connection"]) == (200, b"POST /no-read 0", b"close")
    assert await _closed(reader) == b""


@pytest.mark.parametrize("server", [LEAN], indirect=True)
async def test_malformed_and_upgrade_requests(server: Server) -> None:
    reader, writer = await server.connect()
    writer.write(b"NOT HTTP\r\n\r\n")
    status, headers, _ = await _answer(reader)
    assert (status, headers[b"connection"]) == (400, b"close")
    reader, writer = await server.connect()
    writer.write(b"GET /echo HTTP/1.1\r\nhost: test\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n")
    status, headers, body = await _answer(reader)
    assert (status, body, headers[b"connection"]) == (200, b"GET /echo 0", b"close")
    assert await _closed(reader) == b""


async def test_serve_runs_the_lean_protocol_or_refuses_an_unknown_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hiwallet.core.http import runtime

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.update(options))
    runtime.serve(app, host="127.0.0.1", port=1, http="lean")
    assert seen["http"] is LeanHttpProtocol
    seen.clear()
    runtime.serve(app, host="127.0.0.1", port=1)
    assert "http" not in seen  # uvicorn's own
    with pytest.raises(ValueError, match="'uvicorn' or 'lean'"):
        runtime.serve(app, host="127.0.0.1", port=1, http="h2")


def test_the_front_doors_default_to_the_lean_protocol_with_a_switch_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hiwallet.business_api.settings import BusinessApiSettings
    from hiwallet.personal_mobile_api.settings import PersonalMobileApiSettings

    assert PersonalMobileApiSettings().http_server == "lean" == BusinessApiSettings().http_server
    monkeypatch.setenv("HIWALLET_PERSONAL_MOBILE_API_HTTP_SERVER", "uvicorn")
    assert PersonalMobileApiSettings().http_server == "uvicorn"
