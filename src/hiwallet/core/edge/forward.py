"""Forwarding a request to an internal service, and its answer back.

A pool of keep-alive connections per upstream (:mod:`.wire`: HTTP/1.1 parsed by httptools;
why not httpx or aiohttp is measured there), bounded connections, connect, read and pool
timeouts.

What goes up: the method, the path the front API maps to, the query it passes on, the body's
bytes as the client sent them (not parsed here: the internal service validates, and its 400 or
422 comes back unchanged), and only these headers: ``Authorization`` (the caller's token, as
it came: the internal service verifies it again), ``Idempotency-Key``, ``Accept-Language``,
``Content-Type``, the request id (the one the edge set for this request) and
``X-Forwarded-For`` (the client's address as this process saw it, for the internal services'
own per-address limits). Nothing else a client sends is forwarded: ``X-User-Id``,
``X-Forwarded-User`` or any header a client invents never reaches an internal service (and
internal services believe only the token anyway).

What comes back: the internal status, its body and its content type unchanged (a problem+json
of 400/401/403/404/409/422/429 passes as it is), with the headers a client needs
(``Retry-After``, ``Idempotent-Replayed``, ``Location``, ``WWW-Authenticate``). An upstream
that cannot be reached, refuses the connection, times out, breaks the exchange or says it is
unavailable (502, 503, 504) is 503 ``upstream-unavailable`` with ``Retry-After``: never a 500,
never a hang. An upstream's own failure (500, or another 5xx) is a defect there, which a retry
does not cure: 502 ``upstream-failed``, logged, without ``Retry-After`` (fail closed: only what
a retry can cure is "unavailable").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import structlog
from fastapi import Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter

from hiwallet.core import tracing
from hiwallet.core.edge.wire import HttpPool, UpstreamError
from hiwallet.core.http import PROBLEM_CONTENT_TYPE, ProblemError, ServiceUnavailable
from hiwallet.core.logging import REQUEST_ID

__all__ = [
    "FORWARDED_REQUEST_HEADERS",
    "RETURNED_HEADERS",
    "Upstream",
    "UpstreamFailed",
    "UpstreamTimeouts",
    "UpstreamUnavailable",
]

log = structlog.get_logger(__name__)

# Request headers passed on as they came (lower case, as ASGI gives them).
FORWARDED_REQUEST_HEADERS = frozenset(
    {b"authorization", b"idempotency-key", b"accept-language", b"content-type"}
)
# Answer headers passed back (the rest, e.g. the internal request id or server, stay inside).
RETURNED_HEADERS = ("retry-after", "idempotent-replayed", "location", "www-authenticate", "content-language")


class UpstreamUnavailable(ServiceUnavailable):
    slug = "upstream-unavailable"
    title = "A service behind this API is not available"


class UpstreamFailed(ProblemError):
    status = 502
    slug = "upstream-failed"
    title = "A service behind this API failed"


# The answers of an upstream that say "not now" (a gateway's, a draining or starting process's):
# a retry may cure them. Any other 5xx is the upstream's own failure.
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True)
class UpstreamTimeouts:
    connect_s: float  # a new connection made
    read_s: float  # the whole answer, once the request is written
    pool_s: float  # a free connection found while all are in use


@dataclass(frozen=True)
class UpstreamAnswer:
    status: int
    headers: Mapping[str, str]  # those returned and the content type; names in lower case
    content: bytes


class Upstream:
    """One internal service: its base URL and its pooled client."""

    def __init__(
        self,
        name: str,
        base_url: str,
        timeouts: UpstreamTimeouts,
        *,
        max_connections: int,
        max_response_bytes: int,
        retry_after_s: int,
        failures: Counter,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.retry_after_s = retry_after_s
        self._failures = failures
        host, port, unix_path = _address(name, base_url)
        self._span_address = (None, None) if unix_path is not None else (host, port)
        self.pool = HttpPool(
            host,
            port,
            max_connections=max_connections,
            connect_s=timeouts.connect_s,
            read_s=timeouts.read_s,
            pool_s=timeouts.pool_s,
            max_response_bytes=max_response_bytes,
            unix_path=unix_path,
        )

    @staticmethod
    def failures_counter(registry: CollectorRegistry | None) -> Counter:
        return Counter(
            "edge_upstream_unavailable_total",
            "Requests answered 503 or 502: an upstream unreachable, timed out, unavailable or failed",
            ["upstream", "reason"],
            registry=registry,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()

    def _unavailable(self, reason: str, retry_after: str | None = None) -> UpstreamUnavailable:
        self._failures.labels(self.name, reason).inc()
        return UpstreamUnavailable(
            f"{self.name} is not available; retry later",
            headers={"Retry-After": retry_after or str(self.retry_after_s)},
        )

    async def _traced(
        self,
        tracer: Any,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
        lines: bytes,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The call as a CLIENT span, its trace context sent with it (core.tracing)."""
        host, port = self._span_address
        with tracing.client_span(
            tracer, method, host, port, lambda name, value: headers.append((name, value))
        ) as span:
            status, raw_headers, content = await self.pool.request(method, target, headers, body, lines=lines)
            span.set_attribute("http.response.status_code", status)
            return status, raw_headers, content

    async def call(
        self,
        request: Request,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> UpstreamAnswer:
        """``method path`` on this upstream with the request's forwarded headers; its answer
        unless it is 5xx (503 :class:`UpstreamUnavailable`, as for no answer at all, or 502
        :class:`UpstreamFailed`)."""
        # The header lines as uvicorn parsed them (bytes a header line may hold), not decoded
        # and encoded again.
        scope = request.scope
        forwarded = [
            b"%s: %s\r\n" % (name, value)
            for name, value in scope["headers"]
            if name in FORWARDED_REQUEST_HEADERS
        ]
        # The request id and the client's address as header lines too, made here at once (the
        # same bytes the pool would make of them).
        request_id = REQUEST_ID.get()
        if isinstance(request_id, str):
            forwarded.append(b"x-request-id: %s\r\n" % request_id.encode("latin-1"))
        client = scope.get("client")
        if client is not None:
            forwarded.append(b"x-forwarded-for: %s\r\n" % client[0].encode("latin-1"))
        lines = b"".join(forwarded)
        target = f"{path}?{urlencode(params)}" if params else path
        tracer = tracing.STATE.tracer
        try:
            if tracer is None:
                status, raw_headers, content = await self.pool.request(method, target, (), body, lines=lines)
            else:
                status, raw_headers, content = await self._traced(tracer, method, target, [], body, lines)
        except TimeoutError as exc:
            log.warning("upstream timed out", upstream=self.name, error=type(exc).__name__)
            raise self._unavailable("timeout") from exc
        except (UpstreamError, OSError) as exc:
            log.warning("upstream not reachable", upstream=self.name, error=type(exc).__name__)
            raise self._unavailable("unreachable") from exc
        # Only the headers the door reads or returns, decoded (not the upstream's date, server,
        # length or request id: a few µs a request decoded for nothing).
        answer_headers: dict[str, str] = {}
        for name, value in raw_headers:
            key = _KEPT.get(name.lower())
            if key is not None:
                answer_headers[key] = value.decode("latin-1")
        if status in _UNAVAILABLE_STATUSES:
            log.warning("upstream unavailable", upstream=self.name, status=status)
            raise self._unavailable(f"status-{status}", answer_headers.get("retry-after"))
        if status >= 500:
            log.error("upstream failed", upstream=self.name, status=status)
            self._failures.labels(self.name, f"status-{status}").inc()
            raise UpstreamFailed(f"{self.name} failed")
        return UpstreamAnswer(status, answer_headers, content)


def _address(name: str, base_url: str) -> tuple[str, int, str | None]:
    """(host, port, Unix socket path) of an upstream's URL: ``http://host:port`` (the internal
    network), or ``unix:/absolute/path`` (a socket on this host: the service on the same
    machine, e.g. under ``hiwallet up``; the Host header then names the upstream). Anything
    else stops the process at start: a misread address must not send requests elsewhere."""
    if base_url.startswith("unix:"):
        path = base_url.removeprefix("unix:")
        # A socket's path is at most 107 bytes on Linux (sun_path): a longer one could never connect.
        bad = not path.startswith("/") or path.startswith("//") or path.endswith("/")
        if bad or "\x00" in path or len(path.encode()) > 107:
            raise ValueError(f"{name}: a Unix socket upstream is unix:/absolute/path, not {base_url!r}")
        return name, 0, path
    url = urlsplit(base_url)
    if url.scheme != "http" or not url.hostname or (url.path or "/") != "/":
        raise ValueError(
            f"{name}: an upstream is http://host:port (the internal network) or unix:/absolute/path "
            f"(a socket on this host), not {base_url!r}"
        )
    return url.hostname, url.port or 80, None


# The returned headers' names, as a header line has them and as ``UpstreamAnswer.headers`` keys.
_RETURNED = tuple((name, name.encode("latin-1")) for name in RETURNED_HEADERS)
# The answer's headers an ``UpstreamAnswer`` keeps (those returned, and the content type), by
# their lower-case name's bytes.
_KEPT = {key: name for name, key in (*_RETURNED, ("content-type", b"content-type"))}


class _Relayed(Response):
    """An answer whose header lines are already made (:func:`relayed`): Starlette's
    ``Response.__init__`` would lower-case and encode each header again."""

    def __init__(self, status_code: int, body: bytes, raw_headers: list[tuple[bytes, bytes]]) -> None:
        # Not Response.__init__: what it sets, set from what relayed made.
        self.status_code = status_code
        self.background = None
        self.body = body
        self.raw_headers = raw_headers


def relayed(
    answer: UpstreamAnswer,
    content: bytes | None = None,
    extra: Mapping[str, str] | None = None,
    *,
    raw_extra: Sequence[tuple[bytes, bytes]] = (),
) -> Response:
    """The upstream's answer as this API's: its status and content type, ``content`` (its own
    body when None) and the headers a client needs, then ``extra`` and ``raw_extra`` (header
    lines already encoded, names in lower case). The headers as Starlette's ``Response`` would
    make them: the header lines in that order, then Content-Length (not on a 1xx, 204 or 304)
    and Content-Type (``; charset=utf-8`` added to a text type without one)."""
    raw = [(key, answer.headers[name].encode("latin-1")) for name, key in _RETURNED if name in answer.headers]
    if extra:
        raw += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in extra.items()]
    raw += raw_extra
    status = answer.status
    if status in (204, 304):
        return _Relayed(status, b"", raw)
    body = answer.content if content is None else content
    if status >= 200:
        raw.append((b"content-length", b"%d" % len(body)))
    media_type = answer.headers.get("content-type") or PROBLEM_CONTENT_TYPE
    if media_type.startswith("text/") and "charset=" not in media_type.lower():
        media_type += "; charset=utf-8"
    raw.append((b"content-type", media_type.encode("latin-1")))
    return _Relayed(status, body, raw)
