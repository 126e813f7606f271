"""HTTP/1.1 to an upstream over a pool of keep-alive connections, parsed by httptools (llhttp,
the parser uvicorn uses): the front APIs' forwarding client.

Why not aiohttp or httpx: measured on this machine with the same upstream and request
(docs/performance.md, "Front doors"), a forwarded transfer cost 973 µs of CPU through an httpx
AsyncClient over core.http.AiohttpTransport, 337-389 µs through aiohttp alone and 132 µs
through this client. The front door's whole budget is a fraction of wallet-api's ~150 µs of
CPU per transfer on the same 2 cores (the target: at least 0.8 of wallet-api's throughput).

What it does, and only that: one request at a time per connection (no pipelining); a body
written with Content-Length; the answer read whole (Content-Length or chunked, as llhttp
decodes them), at most ``max_response_bytes``; a connection kept while the answer allows it and
dropped after ``idle_s`` unused (before the server's own keep-alive timeout, uvicorn's 5 s, can
close it under a request). Bounded everywhere: ``max_connections`` (a request waits at most
``pool_s`` for one), ``connect_s`` to connect, ``read_s`` for the whole answer. Failures are
:class:`UpstreamError` (refused, reset, not HTTP, too large) or ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence

import httptools

from hiwallet.core.timeouts import within

__all__ = ["HttpPool", "UpstreamError"]


class UpstreamError(Exception):
    """The upstream refused or broke the exchange, or answered what is not HTTP/1.1."""


class _Connection(asyncio.Protocol):
    def __init__(self, max_response_bytes: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.max_response_bytes = max_response_bytes
        self.closed = False
        self.last_used = 0.0
        self._done: asyncio.Future[tuple[int, list[tuple[bytes, bytes]], bytes]] | None = None
        # One parser for the connection's answers, one after another (llhttp reads a keep-alive
        # connection's messages in turn, as uvicorn's does its requests); ``_done`` says whether
        # an answer is awaited.
        self._parser = httptools.HttpResponseParser(self)
        self._loop = asyncio.get_running_loop()
        self._headers: list[tuple[bytes, bytes]] = []
        self._body = bytearray()
        self.keep_alive = True
        # The read timeout: the awaited answer's deadline, watched by one timer a connection that
        # re-arms itself while a later deadline stands (not a timer made and cancelled a request:
        # uvloop's call_later and cancel were about 2 µs of each forwarded request).
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._done is None:
            self.close()  # bytes nobody asked for: not a connection to keep
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"not HTTP: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(UpstreamError("the upstream closed the connection"))

    # httptools' callbacks
    def on_message_begin(self) -> None:
        if self._done is None or self._done.done():  # a second answer to one request
            self.keep_alive = False  # a connection out of step: never used again

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        if len(self._body) + len(body) > self.max_response_bytes:
            self._fail(UpstreamError("the answer is larger than allowed"))
            return
        self._body += body

    def on_message_complete(self) -> None:
        done = self._done
        if done is None or done.done():
            return
        self.keep_alive = self.keep_alive and self._parser.should_keep_alive()
        done.set_result((self._parser.get_status_code(), self._headers, bytes(self._body)))

    def _fail(self, exc: BaseException) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        self.close()

    def _watch(self) -> None:
        """The read timer's callback: the awaited answer timed out if its deadline has passed;
        otherwise the timer is armed again for it (none while no answer is awaited)."""
        self._timer = None
        if self._done is None or self._done.done() or self.closed:
            return
        if self._loop.time() >= self._deadline:
            self._fail(TimeoutError("no whole answer in time"))
        else:
            self._arm(self._deadline)

    def _arm(self, when: float) -> None:
        self._timer = self._loop.call_at(when, self._watch)
        self._timer_at = when

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()

    def usable(self, now: float, idle_s: float) -> bool:
        return (
            not self.closed
            and self.transport is not None
            and not self.transport.is_closing()
            and (now - self.last_used < idle_s)
        )

    async def exchange(self, request: bytes, read_s: float) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        # Before any state is set: exchange is only called on a connection made (HttpPool).
        if self.transport is None:
            raise RuntimeError("an upstream connection with no transport")
        loop = self._loop
        self._done = done = loop.create_future()
        self._headers, self._body = [], bytearray()
        self.keep_alive = True
        self._deadline = deadline = loop.time() + read_s
        timer = self._timer
        if timer is None or self._timer_at > deadline:  # none armed, or armed for later
            if timer is not None:
                timer.cancel()
            self._arm(deadline)
        self.transport.write(request)
        try:
            answer: tuple[int, list[tuple[bytes, bytes]], bytes] = await done
            return answer
        finally:
            self._done = None


class HttpPool:
    """Keep-alive connections to one ``host:port``, or to the Unix domain socket at
    ``unix_path`` (an upstream on the same host: a request and its answer cost the kernel less
    than over loopback TCP, docs/performance.md "Front doors"); ``host`` is then only the
    ``Host`` header's."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int,
        connect_s: float,
        read_s: float,
        pool_s: float,
        max_response_bytes: int,
        idle_s: float = 4.0,
        unix_path: str | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be positive")
        self.host, self.port, self.unix_path = host, port, unix_path
        self.max_connections = max_connections
        self.connect_s, self.read_s, self.pool_s, self.idle_s = connect_s, read_s, pool_s, idle_s
        self.max_response_bytes = max_response_bytes
        authority = host if unix_path is not None else f"{host}:{port}"
        self._host_header = f"Host: {authority}\r\n".encode("latin-1")
        self._idle: list[_Connection] = []
        self._count = 0  # connections open or opening
        self._waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()

    async def request(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
        *,
        lines: bytes = b"",
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers, body) of ``method target``. ``target`` and the headers must be
        what a request line and header lines may hold (the caller's: a path it built, headers
        uvicorn already parsed); ``lines`` are more header lines, each ``name: value\\r\\n``,
        already encoded (the forwarded request's: its bytes as uvicorn parsed them, not decoded
        and encoded again)."""
        head = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), self._host_header, lines]
        head += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers]
        payload = body or b""
        if payload or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(payload)}\r\n".encode("latin-1"))
        head.append(b"\r\n")
        request = b"".join(head) + payload
        conn = await self._acquire()
        reusable = False
        try:
            answer = await conn.exchange(request, self.read_s)
            reusable = conn.keep_alive and not conn.closed
            return answer
        finally:
            self._release(conn, reusable)

    async def _acquire(self) -> _Connection:
        if self._idle:
            now = self._idle[-1]._loop.time()
            while self._idle:
                conn = self._idle.pop()
                if conn.usable(now, self.idle_s):
                    return conn
                self._discard(conn)
        loop = asyncio.get_running_loop()
        if self._count >= self.max_connections:
            waiter: asyncio.Future[_Connection | None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                handed = await within(waiter, self.pool_s)
            except BaseException as exc:
                # Timed out or cancelled just as a connection (or a slot) was handed over: pass
                # it on, or it would be lost to the pool.
                if waiter.done() and not waiter.cancelled():
                    given = waiter.result()
                    if given is not None:
                        self._release(given, True)
                    else:
                        self._wake(None)
                if isinstance(exc, TimeoutError):
                    raise TimeoutError("no connection to the upstream free in time") from None
                raise
            if handed is not None:
                return handed
        self._count += 1
        try:
            _, conn = await within(self._connect(loop), self.connect_s)
        except BaseException:
            self._count -= 1
            self._wake(None)
            raise
        return conn

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> tuple[asyncio.BaseTransport, _Connection]:
        def made() -> _Connection:
            return _Connection(self.max_response_bytes)

        if self.unix_path is not None:
            return await loop.create_unix_connection(made, self.unix_path)
        return await loop.create_connection(made, self.host, self.port)

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if not reusable or conn.closed:
            self._discard(conn)
            return
        conn.last_used = conn._loop.time()
        if not self._wake(conn):
            self._idle.append(conn)

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._count -= 1
        self._wake(None)  # a waiter may open one in its place

    def _wake(self, conn: _Connection | None) -> bool:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    async def aclose(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
