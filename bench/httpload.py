"""A lean HTTP/1.1 load client for the benchmarks: one keep-alive connection per worker.

Why not httpx: at a few hundred requests per second httpx spends more CPU per request than
wallet-api does (measured: with the transfer endpoint answering at once, 8 httpx clients
topped out at ~600 requests/s on this 2-core machine while wallet-api was mostly idle). The
load generator shares the machine with the server and PostgreSQL, so its CPU is taken from
what it measures. This client does what wrk does: writes the request bytes on a persistent
connection and parses the answer with httptools (llhttp, the parser uvicorn uses), so the
figures are the server's, not the client's.

It speaks only what the benchmarks need: Content-Length bodies (no chunked requests), one
request in flight per connection, status and body of each answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httptools

CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
MAX_BODY_BYTES = 1 << 20


class HttpLoadError(Exception):
    """The connection broke, timed out or answered what is not HTTP/1.1."""


@dataclass
class _Answer:
    status: int = 0
    body: bytearray = field(default_factory=bytearray)
    keep_alive: bool = True


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer = _Answer()
        self.done: asyncio.Future[_Answer] | None = None
        self.lost: BaseException | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpLoadError(f"not HTTP: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionResetError("the server closed the connection")
        self._fail(HttpLoadError(str(self.lost)))

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        if len(self.answer.body) + len(body) > MAX_BODY_BYTES:
            self._fail(HttpLoadError("answer body too large"))
            return
        self.answer.body += body

    def on_message_complete(self) -> None:
        self.answer.status = self.parser.get_status_code()
        self.answer.keep_alive = self.parser.should_keep_alive()
        if self.done is not None and not self.done.done():
            self.done.set_result(self.answer)

    def _fail(self, exc: BaseException) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(exc)


class Connection:
    """One keep-alive HTTP/1.1 connection to ``host:port``; ``request`` one at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._protocol: _Protocol | None = None

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        transport, protocol = await asyncio.wait_for(
            loop.create_connection(_Protocol, self.host, self.port), CONNECT_TIMEOUT_S
        )
        protocol.transport = transport  # uvloop may call connection_made after returning
        return protocol

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, bytes]:
        if self._protocol is None or self._protocol.lost is not None:
            self._protocol = await self._connect()
        protocol = self._protocol
        protocol.answer = _Answer()
        protocol.parser = httptools.HttpResponseParser(protocol)
        protocol.done = asyncio.get_running_loop().create_future()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head.append(f"Content-Length: {len(body)}")
        assert protocol.transport is not None
        protocol.transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        try:
            answer = await asyncio.wait_for(protocol.done, REQUEST_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        if not answer.keep_alive:
            self.close()
        return answer.status, bytes(answer.body)

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
