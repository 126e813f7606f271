"""A lean HTTP/1.1 protocol under uvicorn's server, for the front doors (``serve(http="lean")``).

uvicorn's httptools protocol spends about twice a minimal server's CPU on a request, nearly all
of it Python spread over its request cycle (an Event, a flow-control object and a timer a
request, a header check per header, two writes an answer), not system calls
(docs/performance.md "Front doors", bench/server_cost.py). A subclass of it recovered a tenth
of the difference; this protocol is written for the hot path instead, and plugs into
uvicorn's ``Server`` (``uvicorn.Config(http=LeanHttpProtocol)``), which keeps doing what is
around a connection: the sockets (TCP, Unix, workers), the lifespan's startup and shutdown,
the signals and the draining stop (``shutdown()`` below; the tasks waited for up to
``timeout_graceful_shutdown``), the ``date`` and ``server`` headers.

It leans on uvicorn's server interface (``Config``, ``ServerState``: connections, tasks, default
headers, the request count) and on its httptools module's header patterns and status lines;
tests/core/test_protocol.py runs on the uvicorn installed, so a release that changes them fails
there first.

What the protocol does, as uvicorn's does unless said (tests/core/test_protocol.py, real sockets):

- keep-alive HTTP/1.1 (HTTP/1.0 closes after the answer); pipelined requests queued, each
  answered in order, reading paused while one waits;
- the app started once the head is read; ``receive`` gives the body as it comes, the reading
  paused while more than 64 KiB wait for the app (flow control), ``Expect: 100-continue``
  answered when the app first asks for the body; ``http.disconnect`` once the client is gone
  or the answer is complete;
- the answer's header names and values checked against uvicorn's own patterns (an invalid one
  fails the app's ``send``); Content-Length or chunked framing, an answer longer or shorter
  than its Content-Length failing the app's ``send``; ``connection: close`` honoured; a HEAD
  answer without its body; the head written with the body's first part in one write (unlike
  uvicorn, an app that sends its head and then waits sends it with that part: a client can
  use neither without the other);
- a 500 when the app fails before it answers (or returns without answering), the connection
  closed when it fails mid-answer; writes paused while the client does not read;
- bounds (uvicorn has only the first, and only after an answer): an idle connection closed
  ``timeout_keep_alive`` after its last answer (or its opening); a head not read whole within
  ``header_timeout_s`` closed (a client trickling a head holds no connection for ever); a head
  still not whole once ``max_head_bytes`` more have arrived answered 431 (llhttp keeps a
  head's parts until they are whole: this bounds them to that and one read), a body over
  ``max_body_bytes`` answered 413 (or the connection closed if the answer has begun), and a
  declared Content-Length over it ends the connection after the app's answer, so a body no
  one reads is not swallowed for ever;
- not websockets: an ``Upgrade`` is answered as plain HTTP, and the connection then closed.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import urllib.parse
from collections import deque
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE
from uvicorn.protocols.utils import get_local_addr, get_remote_addr, is_ssl

__all__ = ["HEADER_TIMEOUT_S", "MAX_BODY_BYTES", "MAX_HEAD_BYTES", "LeanHttpProtocol"]

HEADER_TIMEOUT_S = 10.0
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 1 << 20
# Body bytes waiting for the app past which the socket is not read (uvicorn's HIGH_WATER_LIMIT).
_HIGH_WATER = 64 * 1024
# A body up to this size goes out in one write with the head (a copy is cheaper than a write).
_JOIN_MAX = 64 * 1024

# The answer's headers read besides being written (its framing and the connection's end).
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))
# The request's headers read besides being passed on.
_WATCHED = frozenset((b"expect", b"content-length"))

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

_logger = logging.getLogger("uvicorn.error")


def _plain(status: int, text: bytes, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """A whole plain-text answer that closes the connection (the server's own refusals)."""
    lines = [STATUS_LINE[status]]
    for name, value in default_headers:
        lines += (name, b": ", value, b"\r\n")
    lines.append(
        b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        % len(text)
    )
    lines.append(text)
    return b"".join(lines)


def _render_defaults(defaults: list[tuple[bytes, bytes]]) -> tuple[Any, bytes | None]:
    """The server's own headers (``date``, ``server``; uvicorn replaces the list each second),
    checked and written once for every answer until the list changes; ``None`` if one of them
    is a framing header (the answer's loop then reads them, as uvicorn does)."""
    global _DEFAULTS_RENDERED
    names = [name.lower() for name, _ in defaults]
    if HEADER_RE.search(b"-".join(names)):
        raise RuntimeError("Invalid HTTP header name.")
    if HEADER_VALUE_RE.search(b" ".join([value for _, value in defaults])):
        raise RuntimeError("Invalid HTTP header value.")
    lines = None
    if not _FRAMING.intersection(names):
        lines = b"".join(
            b"%s: %s\r\n" % (name, value) for name, (_, value) in zip(names, defaults, strict=True)
        )
    _DEFAULTS_RENDERED = (defaults, lines)
    return _DEFAULTS_RENDERED


_DEFAULTS_RENDERED: tuple[Any, bytes | None] = (None, None)


class _Cycle:
    """One request and its answer: the ASGI ``receive`` and ``send`` the app is given."""

    __slots__ = (
        "body",
        "buffered",
        "chunked",
        "complete",
        "continue_wanted",
        "delivered",
        "disconnected",
        "head",
        "keep_alive",
        "length",
        "more_body",
        "protocol",
        "received",
        "scope",
        "started",
        "transport",
        "waiters",
    )

    def __init__(
        self, protocol: LeanHttpProtocol, scope: dict[str, Any], keep_alive: bool, expect: bool
    ) -> None:
        self.protocol = protocol
        self.transport = protocol.transport
        self.scope = scope
        self.keep_alive = keep_alive
        self.continue_wanted = expect
        self.body: list[bytes] = []
        self.buffered = 0  # bytes in body, not yet given to the app
        self.received = 0  # the body's bytes so far
        self.more_body = True
        self.delivered = False  # the app was given the body's end
        # The receives waiting for something new (as many as the app has at once, as on an
        # asyncio.Event: a listener for the client's end beside the body's reader).
        self.waiters: list[asyncio.Future[None]] | None = None
        self.disconnected = False
        self.started = False
        self.complete = False
        self.chunked: bool | None = None
        self.length = 0  # what the Content-Length still allows
        self.head: bytes | None = None  # the answer's head, held for its body

    def wake(self) -> None:
        for waiter in self.waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    async def run(self, app: Any) -> None:
        """The app on this request, with uvicorn's answers to its failures."""
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            _logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.started:
                await self.send_500()
            else:
                self.abort()
        else:
            if result is not None:
                _logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.abort()
            elif not self.started and not self.disconnected:
                _logger.error("ASGI callable returned without starting response.")
                await self.send_500()
            elif not self.complete and not self.disconnected:
                _logger.error("ASGI callable returned without completing response.")
                self.abort()

    def abort(self) -> None:
        """An answer that cannot be finished: what was made of it goes, then the connection."""
        head, self.head = self.head, None
        if head is not None and not self.transport.is_closing():
            self.transport.write(head)
        self.transport.close()

    async def send_500(self) -> None:
        await self.send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", b"21"),
                    (b"connection", b"close"),
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": b"Internal Server Error", "more_body": False})

    async def receive(self) -> dict[str, Any]:
        if self.continue_wanted:
            self.continue_wanted = False
            if not self.transport.is_closing():
                self.transport.write(_CONTINUE)
        if (
            not self.disconnected
            and not self.complete
            and (self.delivered or not (self.body or not self.more_body))
        ):
            # Nothing new: wait for the body's next bytes or end, the answer's end or the client's.
            protocol = self.protocol
            if protocol.paused_for_body:
                protocol.resume_for_body()
            waiter = protocol.loop.create_future()
            if self.waiters is None:
                self.waiters = [waiter]
            else:
                self.waiters.append(waiter)
            try:
                await waiter
            finally:
                self.waiters.remove(waiter)
        if self.disconnected or self.complete:
            return {"type": "http.disconnect"}
        body = self.body
        self.body = []
        self.buffered = 0
        if self.protocol.paused_for_body:
            self.protocol.resume_for_body()
        more = self.more_body
        if not more:
            self.delivered = True
        return {"type": "http.request", "body": b"".join(body), "more_body": more}

    async def send(self, message: Any) -> None:
        protocol = self.protocol
        if protocol.write_paused and not self.disconnected:
            await protocol.drain()
        if self.disconnected:
            return

        if not self.started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self.started = True
            self.continue_wanted = False
            status = message["status"]
            defaults = protocol.server_state.default_headers
            rendered = _DEFAULTS_RENDERED
            if rendered[0] is not defaults:  # uvicorn makes a new list each second (its date)
                rendered = _render_defaults(defaults)
            if rendered[1] is not None:
                content = [STATUS_LINE[status] + rendered[1]]
                headers = list(message.get("headers", []))
            else:  # a framing header among the server's own: read with the app's
                content = [STATUS_LINE[status]]
                headers = defaults + list(message.get("headers", []))
            closing = False
            for name, value in headers:
                name = name.lower()  # the patterns below hold no letter: lower or not, the same check
                if name in _FRAMING:
                    if name == b"content-length":
                        if self.chunked is None:
                            self.length = int(value.decode())
                            self.chunked = False
                    elif name == b"transfer-encoding":
                        if value.lower() == b"chunked":
                            self.length = 0
                            self.chunked = True
                    elif b"close" in [token.lower().strip() for token in value.split(b",")]:
                        self.keep_alive = False
                        closing = True
                content += (name, b": ", value, b"\r\n")
            # uvicorn's checks, over all names at once (joined by "-") and all values (by " "):
            # neither pattern refuses the joining character, so a match is a header's own.
            # content: the status line (and the server's own headers), then name, ": ", value,
            # CRLF a header.
            if HEADER_RE.search(b"-".join(content[1::4])):
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE_RE.search(b" ".join(content[3::4])):
                raise RuntimeError("Invalid HTTP header value.")
            if not self.keep_alive and not closing:
                content.append(b"connection: close\r\n")
            if self.chunked is None and self.scope["method"] != "HEAD" and status not in (204, 304):
                self.chunked = True
                content.append(b"transfer-encoding: chunked\r\n")
            content.append(b"\r\n")
            self.head = b"".join(content)  # written with the body's first part
            return

        if self.complete:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already completed."
            )
        if message["type"] != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{message['type']}'.")
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            self.length = 0
            data = b""
        elif self.chunked:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more:
                data += b"0\r\n\r\n"
        else:
            if len(body) > self.length:
                raise RuntimeError("Response content longer than Content-Length")
            self.length -= len(body)
            data = body
        head = self.head
        if head is not None:
            self.head = None
            if len(data) <= _JOIN_MAX:
                data = head + data
            else:
                self.transport.write(head)
        if data:
            self.transport.write(data)
        if not more:
            if self.length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.complete = True
            if self.waiters:
                self.wake()  # a receive waiting now learns the answer is over
            if not self.keep_alive:
                self.transport.close()
            protocol.answered(self)


class LeanHttpProtocol(asyncio.Protocol):
    """An HTTP/1.1 connection for uvicorn's ``Server`` (``Config(http=LeanHttpProtocol)``;
    ``functools.partial`` sets the bounds)."""

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        max_head_bytes: int = MAX_HEAD_BYTES,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.app_state = app_state
        self.server_state = server_state
        self.connections = server_state.connections
        self.tasks = server_state.tasks
        self.root_path = config.root_path
        self.asgi_version = config.asgi_version
        self.limit_concurrency = config.limit_concurrency
        self.fresh_context = getattr(config, "reset_contextvars", False)  # uvicorn 0.38+
        self.keep_alive_s = config.timeout_keep_alive
        self.header_timeout_s = header_timeout_s
        self.max_head_bytes = max_head_bytes
        self.max_body_bytes = max_body_bytes

        self.parser = httptools.HttpRequestParser(self)
        # As uvicorn: an answer to the first of pipelined requests even if a later one closes.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: Any = None
        self.server: Any = None
        self.client: Any = None
        self.scheme = "http"
        self.cycle: _Cycle | None = None  # the request last read: its body's bytes go to it
        self.serving: _Cycle | None = None  # the request whose app runs
        self.pipeline: deque[tuple[_Cycle, Any]] = deque()
        self.paused_for_body = False
        self.paused_for_pipeline = False
        self.write_paused = False
        self.writable: asyncio.Future[None] | None = None
        # The bounds' clock: one timer a connection, re-armed for what is left when it fires.
        self.idle_since: float | None = None  # the last answer's end, no request begun since
        self.head_since: float | None = None  # a head began and is not read whole
        self.head_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        # The head being read.
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.scope: dict[str, Any] = {}
        self.expect = False
        self.declared = 0

    # asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self.connections.add(self)
        self.transport = transport
        self.server = get_local_addr(transport)
        self.client = get_remote_addr(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        self.idle_since = self.loop.time()
        self.arm(self.keep_alive_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        for cycle in {self.serving, self.cycle}:
            if cycle is not None and not cycle.complete:
                cycle.disconnected = True
                cycle.wake()
        self.pipeline.clear()
        self.resume_writing()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if exc is None:
            self.transport.close()
        self.parser = None  # type: ignore[assignment]

    def eof_received(self) -> None:
        pass

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        writable, self.writable = self.writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def drain(self) -> None:
        if self.writable is None:
            self.writable = self.loop.create_future()
        await self.writable

    def data_received(self, data: bytes) -> None:
        self.idle_since = None
        if self.head_since is not None:
            # A head in progress: llhttp keeps its parts until they are whole, so its size is
            # bounded here, by what arrives while it is read.
            self.head_bytes += len(data)
            if self.head_bytes > self.max_head_bytes:
                self.refuse(431, b"Request Header Fields Too Large")
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            _logger.warning("Invalid HTTP request received.")
            self.refuse(400, b"Invalid HTTP request received.")
        except httptools.HttpParserUpgrade:
            # No websockets here: the request is answered as plain HTTP, and the connection
            # closed after it (what follows the head is the other protocol's, not HTTP).
            _logger.warning("Unsupported upgrade request.")
            cycle = self.cycle
            if cycle is not None and not cycle.complete:
                cycle.keep_alive = False
                if cycle.more_body:
                    cycle.more_body = False
                    cycle.wake()

    def refuse(self, status: int, text: bytes) -> None:
        """The server's own answer, and the connection's end (the parser cannot go on)."""
        if not self.transport.is_closing():
            self.transport.write(_plain(status, text, self.server_state.default_headers))
            self.transport.close()

    # httptools' callbacks

    def on_message_begin(self) -> None:
        self.url = b""
        self.expect = False
        self.declared = 0
        self.headers = []
        self.scope = {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }
        now = self.head_since = self.loop.time()
        self.head_bytes = 0
        if self.timer is None or self.timer_at > now + self.header_timeout_s:
            self.arm(self.header_timeout_s)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in _WATCHED:
            if name == b"expect":
                if value.lower() == b"100-continue":
                    self.expect = True
            elif value.isdigit():  # llhttp refuses a malformed or repeated Content-Length
                self.declared = int(value)
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_since = None
        parser = self.parser
        scope = self.scope
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        url = httptools.parse_url(self.url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path if self.root_path else raw_path
        scope["query_string"] = url.query or b""

        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency or len(self.tasks) >= self.limit_concurrency
        ):
            app = service_unavailable
            _logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app

        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        if self.declared > self.max_body_bytes:
            keep_alive = False  # the app answers; the rest of this body is not read
        previous = self.cycle
        cycle = self.cycle = _Cycle(self, scope, keep_alive, self.expect)
        if previous is None or previous.complete:
            self.serving = cycle
            self.start(cycle, app)
        else:
            # Pipelined: answered in order, after the one being served; reading waits.
            self.paused_for_pipeline = True
            self.transport.pause_reading()
            self.pipeline.appendleft((cycle, app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.complete or cycle.disconnected:
            return
        cycle.received += len(body)
        if cycle.received > self.max_body_bytes:
            self.too_large(cycle)
            return
        cycle.body.append(body)
        cycle.buffered += len(body)
        if cycle.buffered > _HIGH_WATER and not self.paused_for_body:
            self.paused_for_body = True
            self.transport.pause_reading()
        if cycle.waiters:
            cycle.wake()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.complete:
            return
        cycle.more_body = False
        if cycle.waiters:
            cycle.wake()

    # The connection's own work

    def start(self, cycle: _Cycle, app: Any) -> None:
        if self.fresh_context:
            task = self.loop.create_task(cycle.run(app), context=contextvars.Context())
        else:
            task = self.loop.create_task(cycle.run(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def too_large(self, cycle: _Cycle) -> None:
        """A body past ``max_body_bytes``: 413 if the app has not begun its answer, and the
        connection's end either way (the app's next ``receive`` says the client is gone)."""
        cycle.disconnected = True
        cycle.wake()
        if cycle is self.serving and not cycle.started:
            self.refuse(413, b"Request Entity Too Large")
        else:
            self.transport.close()

    def resume_for_body(self) -> None:
        self.paused_for_body = False
        if not self.paused_for_pipeline:
            self.transport.resume_reading()

    def answered(self, cycle: _Cycle) -> None:
        """``cycle``'s answer is written whole: the next pipelined request, or idle."""
        self.server_state.total_requests += 1
        if cycle is not self.serving:
            return
        self.serving = None
        if self.transport.is_closing():
            return
        if self.pipeline:
            following, app = self.pipeline.pop()
            self.serving = following
            self.start(following, app)
            if not self.pipeline:
                self.resume_after_pipeline()
        else:
            if self.paused_for_pipeline:
                self.resume_after_pipeline()
            now = self.idle_since = self.loop.time()
            if self.timer is None or self.timer_at > now + self.keep_alive_s:
                self.arm(self.keep_alive_s)

    def resume_after_pipeline(self) -> None:
        self.paused_for_pipeline = False
        if not self.paused_for_body:
            self.transport.resume_reading()
        if self.head_since is not None:
            # A head begun before the reading paused: its time counts from now (it was not
            # the client's to send faster).
            self.head_since = self.loop.time()
            self.arm(self.header_timeout_s)

    def arm(self, delay: float) -> None:
        """The timer due at most ``delay`` from now (an earlier one stays: it re-arms)."""
        at = self.loop.time() + delay
        if self.timer is not None:
            if self.timer_at <= at:
                return
            self.timer.cancel()
        self.timer = self.loop.call_later(delay, self.due)
        self.timer_at = at

    def due(self) -> None:
        self.timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        left: float | None = None
        if self.idle_since is not None:
            left = self.idle_since + self.keep_alive_s - now
            if left <= 0:
                self.transport.close()
                return
        if self.head_since is not None and not self.paused_for_pipeline:
            head_left = self.head_since + self.header_timeout_s - now
            if head_left <= 0:
                _logger.info(
                    "A request's head not read whole within %.0f s: the connection closed.",
                    self.header_timeout_s,
                )
                self.transport.close()
                return
            left = head_left if left is None else min(left, head_left)
        if left is not None:
            self.timer = self.loop.call_later(left, self.due)
            self.timer_at = now + left

    def shutdown(self) -> None:
        """The server stops (uvicorn's ``Server.shutdown``): an idle connection closes now, one
        serving a request closes after its answer (uvicorn then waits for the tasks)."""
        serving = self.serving
        if serving is None or serving.complete:
            self.transport.close()
        else:
            serving.keep_alive = False
