"""Forwarding a request to an internal service, and its answer back.

One pooled client per upstream (httpx over ``core.http.AiohttpTransport``: the transport the
platform measured at about half httpx's own pool's CPU a request; see core/http/client.py and
docs/performance.md), with bounded connections and connect, read and pool timeouts.

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

from collections.abc import Mapping

import httpx
import structlog
from fastapi import Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter

from hiwallet.core.http import PROBLEM_CONTENT_TYPE, AiohttpTransport, ServiceUnavailable
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
        self.timeout = httpx.Timeout(connect=connect_s, read=read_s, write=read_s, pool=pool_s)


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
        self.client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeouts.timeout,
            follow_redirects=False,
            transport=AiohttpTransport(
                max_connections=max_connections, max_response_bytes=max_response_bytes
            ),
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
        await self.client.aclose()

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
    ) -> httpx.Response:
        """``method path`` on this upstream with the request's forwarded headers; its answer
        unless it is 5xx (503 :class:`UpstreamUnavailable`, as for no answer at all)."""
        headers = [(k, v) for k, v in request.headers.items() if k in FORWARDED_REQUEST_HEADERS]
        request_id = REQUEST_ID.get()
        if isinstance(request_id, str):
            headers.append(("x-request-id", request_id))
        if request.client is not None:
            headers.append(("x-forwarded-for", request.client.host))
        try:
            answer = await self.client.request(method, path, params=params, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            log.warning("upstream timed out", upstream=self.name, error=type(exc).__name__)
            raise self._unavailable("timeout") from exc
        except httpx.HTTPError as exc:
            log.warning("upstream not reachable", upstream=self.name, error=type(exc).__name__)
            raise self._unavailable("unreachable") from exc
        if answer.status_code >= 500:
            log.warning("upstream answered a server error", upstream=self.name, status=answer.status_code)
            raise self._unavailable(f"status-{answer.status_code}", answer.headers.get("retry-after"))
        return answer


def relayed(
    answer: httpx.Response, content: bytes | None = None, extra: Mapping[str, str] | None = None
) -> Response:
    """The upstream's answer as this API's: its status and content type, ``content`` (its own
    body when None) and the headers a client needs."""
    headers = {name: answer.headers[name] for name in RETURNED_HEADERS if name in answer.headers}
    if extra:
        headers.update(extra)
    media_type = answer.headers.get("content-type")
    if answer.status_code in (204, 304):
        return Response(status_code=answer.status_code, headers=headers)
    return Response(
        answer.content if content is None else content,
        status_code=answer.status_code,
        headers=headers,
        media_type=media_type or PROBLEM_CONTENT_TYPE,
    )
