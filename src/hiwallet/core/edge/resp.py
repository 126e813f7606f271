"""Redis for the rate limits: one pipelined connection speaking RESP2, for one command (EVAL of
a counting script, answered by an integer).

Why not redis-py's asyncio client: measured on this machine, one rate-limit check cost 165 µs of
CPU through it (a connection taken from its pool and given back, its command packer, its
parser and retry machinery on every call) and 77 µs here, on a path that runs on
every request of every front API (docs/performance.md, "Front doors"). What it gives up it does
not need: one connection, so commands are pipelined and answered in order (Redis's own
guarantee); a command not answered in ``timeout_s`` closes the connection and fails every
command on it (an answer arriving later cannot be taken for another's); the next command
connects again. Errors are :class:`RedisUnavailable` or ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import collections
from urllib.parse import unquote, urlsplit

__all__ = ["RedisUnavailable", "RespClient"]


class RedisUnavailable(Exception):
    """Redis refused, broke the connection, or answered with an error."""


def _command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.pending: collections.deque[asyncio.Future[int | bytes | None]] = collections.deque()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisUnavailable("the connection to Redis closed"))

    def fail(self, exc: BaseException) -> None:
        self.closed = True
        while self.pending:
            waiter = self.pending.popleft()
            if not waiter.done():
                waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.pending:
            parsed = self._reply()
            if parsed is None:
                return
            value, used = parsed
            del self.buffer[:used]
            waiter = self.pending.popleft()
            if not waiter.done():
                if isinstance(value, RedisUnavailable):
                    waiter.set_exception(value)
                else:
                    waiter.set_result(value)

    def _reply(self) -> tuple[int | bytes | RedisUnavailable | None, int] | None:
        """The first whole reply in the buffer and its length; None while incomplete."""
        end = self.buffer.find(b"\r\n")
        if end < 0:
            return None
        kind, line = self.buffer[:1], bytes(self.buffer[1:end])
        if kind == b":":
            return int(line), end + 2
        if kind == b"+":
            return line, end + 2
        if kind == b"-":
            return RedisUnavailable(line.decode("utf-8", "replace")), end + 2
        if kind == b"$":
            size = int(line)
            if size < 0:
                return None, end + 2
            if len(self.buffer) < end + 2 + size + 2:
                return None
            return bytes(self.buffer[end + 2 : end + 2 + size]), end + 2 + size + 2
        # arrays and the rest: not asked for; the connection is not to be trusted
        self.fail(RedisUnavailable(f"unexpected reply type {bytes(kind)!r}"))
        return None


class RespClient:
    def __init__(self, url: str, *, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError("a redis:// URL (TLS is not supported here)")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.password = unquote(parts.password) if parts.password else None
        self.username = unquote(parts.username) if parts.username else None
        self.db = int(parts.path.lstrip("/") or 0)
        self.timeout_s = timeout_s
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connection(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            return protocol
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._protocol is not None and not self._protocol.closed:
                return self._protocol
            loop = asyncio.get_running_loop()
            try:
                _, fresh = await asyncio.wait_for(
                    loop.create_connection(_Protocol, self.host, self.port), self.timeout_s
                )
            except OSError as exc:
                raise RedisUnavailable(f"cannot connect to Redis: {type(exc).__name__}") from exc
            self._protocol = fresh
            if self.password is not None:
                auth = (
                    [self.username.encode(), self.password.encode()]
                    if self.username
                    else [self.password.encode()]
                )
                await self._send(fresh, _command(b"AUTH", *auth))
            if self.db:
                await self._send(fresh, _command(b"SELECT", str(self.db).encode()))
            return fresh

    async def _send(self, protocol: _Protocol, command: bytes) -> int | bytes | None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[int | bytes | None] = loop.create_future()
        protocol.pending.append(waiter)
        assert protocol.transport is not None
        protocol.transport.write(command)
        timer = loop.call_later(self.timeout_s, protocol.fail, TimeoutError("Redis did not answer in time"))
        try:
            return await waiter
        finally:
            timer.cancel()

    async def eval_int(self, script: bytes, key: str, arg: int) -> int:
        """``EVAL script 1 key arg``, answered by an integer."""
        protocol = await self._connection()
        answer = await self._send(protocol, _command(b"EVAL", script, b"1", key.encode(), str(arg).encode()))
        if not isinstance(answer, int):
            raise RedisUnavailable("the script did not answer an integer")
        return answer

    async def aclose(self) -> None:
        if self._protocol is not None:
            self._protocol.fail(RedisUnavailable("closed"))
            self._protocol = None
