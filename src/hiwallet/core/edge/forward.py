"""Forwarding a request to an internal service, and its answer back.

One pooled aiohttp session per upstream, with bounded connections and connect, read and pool
timeouts. Why aiohttp and not httpx (the platform's usual client): measured on this machine
(docs/performance.md, "Front doors"), one forwarded transfer cost 973 µs of CPU through an
httpx AsyncClient over core.http.AiohttpTransport (httpx's own pool costs more still) and 252 µs
through aiohttp alone, on the same keep-alive connection to the same upstream: httpx's request
and response models, URL parsing and header normalisation cost three times the exchange itself,
on a path where the whole edge must stay under a few ms at p99 and within 0.8x of wallet-api's
throughput on 2 shared cores.

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
that cannot be reached, refuses the connection, times out, breaks the exchange or answers 5xx
is 503 ``upstream-unavailable`` with ``Retry-After``: never a 500, never a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
import structlog
from fastapi import Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter

from hiwallet.core.http import PROBLEM_CONTENT_TYPE, ServiceUnavailable
from hiwallet.core.logging import REQUEST_ID

__all__ = [
    "FORWARDED_REQUEST_HEADERS",
    "RETURNED_HEADERS",
    "Upstream",
    "UpstreamTimeouts",
    "UpstreamUnavailable",
]

log = structlog.get_logger(__name__)

# Request headers passed on as they came (lower case, as ASGI gives them).
FORWARDED_REQUEST_HEADERS = frozenset({"authorization", "idempotency-key", "accept-language", "content-type"})
# Answer headers passed back (the rest, e.g. the internal request id or server, stay inside).
RETURNED_HEADERS = ("retry-after", "idempotent-replayed", "location", "www-authenticate", "content-language")


class UpstreamUnavailable(ServiceUnavailable):
    slug = "upstream-unavailable"
    title = "A service behind this API is not available"


class UpstreamTimeouts:
    def __init__(self, connect_s: float, read_s: float, pool_s: float) -> None:
        # connect: a pooled connection found (pool_s) and a new one made (connect_s); sock_read:
        # no byte of the answer for read_s; total: the whole exchange, so an upstream that
        # trickles bytes cannot hold a request forever.
        self.timeout = aiohttp.ClientTimeout(
            total=connect_s + pool_s + 2 * read_s,
            connect=connect_s + pool_s,
            sock_connect=connect_s,
            sock_read=read_s,
        )


@dataclass(frozen=True)
class UpstreamAnswer:
    status: int
    headers: Mapping[str, str]  # case-insensitive (aiohttp's)
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
        self.max_response_bytes = max_response_bytes
        self.timeout = timeouts.timeout
        # Made in the running loop (the front API's start); no cookies kept, no redirect
        # followed, bodies passed as they are (no decompression), no header added but Host and
        # Content-Length.
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=15.0),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            trust_env=False,
        )

    @staticmethod
    def failures_counter(registry: CollectorRegistry | None) -> Counter:
        return Counter(
            "edge_upstream_unavailable_total",
            "Requests answered 503 because an upstream was unreachable, timed out or answered 5xx",
            ["upstream", "reason"],
            registry=registry,
        )

    async def aclose(self) -> None:
        await self.session.close()

    def _unavailable(self, reason: str, retry_after: str | None = None) -> UpstreamUnavailable:
        self._failures.labels(self.name, reason).inc()
        return UpstreamUnavailable(
            f"{self.name} is not available; retry later",
            headers={"Retry-After": retry_after or str(self.retry_after_s)},
        )

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
        unless it is 5xx (503 :class:`UpstreamUnavailable`, as for no answer at all)."""
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in request.scope["headers"]
            if name.decode("latin-1") in FORWARDED_REQUEST_HEADERS
        }
        request_id = REQUEST_ID.get()
        if isinstance(request_id, str):
            headers["x-request-id"] = request_id
        if request.client is not None:
            headers["x-forwarded-for"] = request.client.host
        try:
            async with self.session.request(
                method,
                self.base_url + path,
                params=params or None,
                data=body or None,
                headers=headers,
                allow_redirects=False,
                timeout=self.timeout,
            ) as answer:
                if (answer.content_length or 0) > self.max_response_bytes:
                    raise aiohttp.ClientPayloadError("the answer is larger than allowed")
                content = bytearray()
                async for chunk in answer.content.iter_any():
                    content += chunk
                    if len(content) > self.max_response_bytes:
                        raise aiohttp.ClientPayloadError("the answer is larger than allowed")
                status, answer_headers = answer.status, answer.headers
        except TimeoutError as exc:  # aiohttp's connect, socket-read and total timeouts
            log.warning("upstream timed out", upstream=self.name, error=type(exc).__name__)
            raise self._unavailable("timeout") from exc
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
            log.warning("upstream not reachable", upstream=self.name, error=type(exc).__name__)
            raise self._unavailable("unreachable") from exc
        if status >= 500:
            log.warning("upstream answered a server error", upstream=self.name, status=status)
            raise self._unavailable(f"status-{status}", answer_headers.get("retry-after"))
        return UpstreamAnswer(status, answer_headers, bytes(content))


def relayed(
    answer: UpstreamAnswer, content: bytes | None = None, extra: Mapping[str, str] | None = None
) -> Response:
    """The upstream's answer as this API's: its status and content type, ``content`` (its own
    body when None) and the headers a client needs."""
    headers = {name: answer.headers[name] for name in RETURNED_HEADERS if name in answer.headers}
    if extra:
        headers.update(extra)
    media_type = answer.headers.get("content-type")
    if answer.status in (204, 304):
        return Response(status_code=answer.status, headers=headers)
    return Response(
        answer.content if content is None else content,
        status_code=answer.status,
        headers=headers,
        media_type=media_type or PROBLEM_CONTENT_TYPE,
    )
