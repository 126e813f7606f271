"""A TCP proxy in front of PostgreSQL that a test can break, as a server restart looks to its
clients: every open connection is cut at once, and new ones are refused until it "comes back".

It runs in the test's event loop on a free loopback port; a service under test is pointed at it
(``HIWALLET_DATABASE_URL``) while the test itself keeps talking to PostgreSQL directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

CHUNK_BYTES = 65_536


class FaultProxy:
    def __init__(self, upstream_host: str = "127.0.0.1", upstream_port: int = 5432) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.accepting = True
        self.connections_cut = 0
        self.connections_refused = 0
        self._pipes: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    def cut(self) -> int:
        """Close every open connection, both ways, as a crashing server would."""
        pipes = list(self._pipes)
        for client, server in pipes:
            for writer in (client, server):
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        self._pipes.clear()
        self.connections_cut += len(pipes)
        return len(pipes)

    @asynccontextmanager
    async def down(self) -> AsyncIterator[None]:
        """The server is down for the block: open connections cut, new ones refused."""
        self.accepting = False
        self.cut()
        try:
            yield
        finally:
            self.accepting = True

    @property
    def open_connections(self) -> int:
        return len(self._pipes)

    @property
    def upstream_ports(self) -> list[int]:
        """The local ports of the open connections to PostgreSQL (``pg_stat_activity.client_port``),
        to terminate exactly those backends, as a shutting-down server does (FATAL 57P01)."""
        return [server.get_extra_info("sockname")[1] for _, server in self._pipes]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.accepting:
            self.connections_refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        pipe = (writer, up_writer)
        self._pipes.add(pipe)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._copy(src, dst, pipe))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _before_passing(self, *, upstream: bool) -> None:
        """Called before each chunk is passed on (``upstream``: from a client to the server); a
        subclass may hold it here (tests/e2e/harness.py's StallingProxy)."""

    async def _copy(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        pipe: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        upstream = dst is pipe[1]
        try:
            while data := await src.read(CHUNK_BYTES):
                await self._before_passing(upstream=upstream)
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._pipes.discard(pipe)
            for writer in pipe:
                with contextlib.suppress(Exception):
                    writer.close()
