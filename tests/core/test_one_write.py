"""core.http.protocol: an answer's head waits for its body and both go in one write; what must
not wait (100 Continue, a head whose app then fails) does not; a stream arrives whole.

A raw socket is the client, so what the server wrote, and when, is what it receives."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import serve, stop

_events: dict[str, threading.Event] = {}


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if path == "/broken":  # a head, then the app fails without its body
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        raise RuntimeError("no body")
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-length", str(len(body) + 3).encode()), (b"x-held", b"yes")]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    # /slow: the body only once the test has looked for the head
    if path == "/slow":
        await asyncio.to_thread(_events["body"].wait, 10)
    await send({"type": "http.response.body", "body": b"ok:" + body})


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    url, srv, thread = serve(_app, "one-write")
    host, port = url.removeprefix("http://").split(":")
    try:
        yield host, int(port)
    finally:
        stop(srv, thread)


def _connect(server: tuple[str, int]) -> socket.socket:
    s = socket.create_connection(server, timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_all(s: socket.socket) -> bytes:
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return got
        got += chunk


def test_the_head_waits_for_the_body_and_both_arrive_together(server: tuple[str, int]) -> None:
    _events["body"] = threading.Event()
    with _connect(server) as s:
        s.sendall(b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(65536)  # the head alone is not sent
        _events["body"].set()
        s.settimeout(5)
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 201 ")
        assert b"x-held: yes\r\n" in first
        assert first.endswith(b"\r\n\r\nok:hi")  # head and body in one segment
        assert _read_all(s) == b""


def test_keep_alive_answers_each_whole_and_in_order(server: tuple[str, int]) -> None:
    with _connect(server) as s:
        for i in range(3):
            s.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n" + str(i).encode())
            answer = s.recv(65536)
            assert answer.startswith(b"HTTP/1.1 201 ")
            assert answer.endswith(b"ok:" + str(i).encode())


def test_a_head_answer_is_sent_without_a_body(server: tuple[str, int]) -> None:
    with _connect(server) as s:
        s.sendall(b"HEAD /x HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = s.recv(65536)  # on a kept-alive connection: the head, not a wait for a body
        assert answer.startswith(b"HTTP/1.1 201 ")
        assert answer.endswith(b"x-held: yes\r\n\r\n")


def test_100_continue_is_not_held(server: tuple[str, int]) -> None:
    with _connect(server) as s:
        s.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n")
        assert s.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"  # before the body is sent
        s.sendall(b"go")
        answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 201 ")
        assert answer.endswith(b"ok:go")


def test_a_stream_arrives_whole(server: tuple[str, int]) -> None:
    with _connect(server) as s:
        s.sendall(b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        answer = _read_all(s)
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert b"transfer-encoding: chunked" in answer
        assert answer.endswith(b"4\r\none,\r\n4\r\ntwo,\r\n5\r\nthree\r\n0\r\n\r\n")


def test_an_app_failing_after_its_head_still_sends_it_and_closes(server: tuple[str, int]) -> None:
    with _connect(server) as s:
        s.sendall(b"GET /broken HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = _read_all(s)  # the connection is closed: the client is not left waiting
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert answer.endswith(b"content-length: 5\r\n\r\n")
