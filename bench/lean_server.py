"""A candidate measured, not adopted (bench/server_cost.py ``--servers uvicorn lean``,
docs/performance.md "Front doors"): the least an ASGI HTTP/1.1 server over httptools can be, to
bound what a lean server under the front door could save against uvicorn's.

What it does: keep-alive connections, one request at a time (reading paused while one is
served), the request's body whole before the app runs (Content-Length or chunked, as llhttp
decodes them), the answer's head and body written once the body is complete. What it does not
do, and a server in production must: pipelining, ``Expect: 100-continue``, streamed bodies,
bounds (the body's size, the keep-alive and request timeouts), flow control, upgrades, the
checks of the app's header names and values, a 500 when the app fails, the lifespan's
shutdown, graceful shutdown. It serves the bench's plain endpoint, and nothing else.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools

__all__ = ["serve"]

_REASONS = {
    200: b"OK",
    201: b"Created",
    400: b"Bad Request",
    404: b"Not Found",
    500: b"Internal Server Error",
}


class _Lean(asyncio.Protocol):
    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.app, self.loop = app, loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.client = transport.get_extra_info("peername")
        self.server = transport.get_extra_info("sockname")

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url = httptools.parse_url(self.url)
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": self.parser.get_method().decode("ascii"),
            "scheme": "http",
            "path": url.path.decode("ascii"),
            "raw_path": url.path,
            "root_path": "",
            "query_string": url.query or b"",
            "server": self.server,
            "client": self.client,
            "headers": self.headers,
        }
        self.transport.pause_reading()
        self.loop.create_task(self.run(scope, b"".join(self.body), self.parser.should_keep_alive()))

    async def run(self, scope: dict[str, Any], body: bytes, keep_alive: bool) -> None:
        given = False
        head: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal given
            if given:
                await asyncio.Future()  # a disconnect is never reported here
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                head.append(b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"")))
                for name, value in message.get("headers", ()):
                    head.append(b"%s: %s\r\n" % (name, value))
                if not keep_alive:
                    head.append(b"connection: close\r\n")
                head.append(b"\r\n")
            elif not message.get("more_body", False):
                self.transport.write(b"".join(head) + message.get("body", b""))
                if keep_alive:
                    self.transport.resume_reading()
                else:
                    self.transport.close()

        await self.app(scope, receive, send)


async def _started(app: Any) -> None:
    """The app's lifespan started (its startup complete), and left running until the process ends."""
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    messages = [{"type": "lifespan.startup"}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Future()  # no shutdown: the bench ends the process
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set_result(None)
        elif message["type"] == "lifespan.startup.failed":
            started.set_exception(RuntimeError(message.get("message", "startup failed")))

    asyncio.get_running_loop().create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    )
    await started


def serve(app: Any, host: str, port: int, *, lifespan: bool = False) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if lifespan:
            await _started(app)
        server = await loop.create_server(lambda: _Lean(app, loop), host, port)
        await server.serve_forever()

    uvloop.run(main())
