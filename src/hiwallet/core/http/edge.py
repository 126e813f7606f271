"""The edge: what every request passes first, on the stack and on the hot lane alike.

One layer rather than several (each layer wraps the request and both messages of its answer,
a few µs a request). In order:

- the request id: ``X-Request-Id`` if the client sent a sane one (1–128 visible ASCII
  characters), else a new one; set for every line logged during the request
  (``core.logging.REQUEST_ID``) and returned in ``X-Request-Id`` on every answer;
- bodies over ``max_bytes`` are refused (413) before the app reads them into memory;
- an error nobody handled is answered here, once: 500 problem+json with the request id as its
  ``incident``, logged with its traceback (no locals). Nothing escapes to the server, which
  would log the traceback a second time;
- every 5xx answer is logged at error level: route template, status, error type, and the
  SQLSTATE and constraint found on the error or its causes;
- each request is counted and timed by route template, method and status, and, unless
  switched off, has one access line (method, route template, status, duration, request id);
- with tracing on (core.tracing), each request is a SERVER span, continuing the caller's
  ``traceparent``.
"""

from __future__ import annotations

import inspect
import os
import re
import time
from collections.abc import Callable
from typing import Any

import structlog
from fastapi import Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hiwallet.core import tracing
from hiwallet.core.http.metrics import Metrics
from hiwallet.core.http.problems import (
    PayloadTooLarge,
    ProblemError,
    ServiceUnavailable,
    internal_error_response,
    problem_response,
)
from hiwallet.core.logging import REQUEST_ID, AccessLog, database_error_fields

log = structlog.get_logger("hiwallet.http")

REQUEST_ID_HEADER = b"x-request-id"
_SANE_REQUEST_ID = re.compile(rb"[\x21-\x7e]{1,128}")
# The metrics' children kept per (method, route template, status), at most this many: a
# ``labels()`` call looks its child up under a lock each time (two per request, about 1 % of
# wallet-api's CPU a transfer, bench/). Bounded: methods and statuses come from outside.
MEASURED_KEYS_MAX = 1024
# Where a handler leaves the error it answered, for the edge's log line (scope is per request).
ERROR_KEY = "hiwallet.error"

Handler = Callable[[Request, Exception], Any]


def recording(handler: Handler) -> Handler:
    """``handler``, leaving the exception it answers in the request's scope for the edge."""

    async def recorded(request: Request, exc: Exception) -> Response:
        request.scope[ERROR_KEY] = exc
        answer = handler(request, exc)
        response: Response = await answer if inspect.isawaitable(answer) else answer
        return response

    recorded.records_error = True  # type: ignore[attr-defined]
    return recorded


def route_label(scope: Scope) -> str:
    # The route template, not the raw path: raw paths carry ids and would explode cardinality.
    # The router records the matched route in the (shared) scope.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


def _unavailable() -> ServiceUnavailable:
    return ServiceUnavailable("the database is not available; retry", headers={"Retry-After": "1"})


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


class Edge:
    def __init__(
        self, app: ASGIApp, metrics: Metrics, max_bytes: int, access: AccessLog | None = None
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_bytes = max_bytes
        self.access = access
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        declared: bytes | None = None
        request_id_header: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
            elif name == REQUEST_ID_HEADER and request_id_header is None:
                request_id_header = value if _SANE_REQUEST_ID.fullmatch(value) else None
        if request_id_header is None:
            request_id = os.urandom(16).hex()
            request_id_header = request_id.encode()
        else:
            request_id = request_id_header.decode()
        token = REQUEST_ID.set(request_id)
        status = 0  # until the answer starts
        # Tracing off (the default): one test; on, the request's SERVER span (core.tracing).
        tracer = tracing.STATE.tracer
        traced = tracing.start_server_span(tracer, scope) if tracer is not None else None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (REQUEST_ID_HEADER, request_id_header)]
            await send(message)

        try:
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                too_large = PayloadTooLarge(f"the body exceeds {self.max_bytes} bytes")
                await problem_response(too_large, scope.get("path"))(scope, _no_receive, send_with_id)
                return
            max_bytes, seen = self.max_bytes, 0

            async def limited_receive() -> Message:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > max_bytes:
                        # A chunked body that lies about its size: stop reading it.
                        raise PayloadTooLarge(f"the body exceeds {max_bytes} bytes")
                return message

            try:
                await self.app(scope, limited_receive, send_with_id)
            except Exception as exc:
                scope[ERROR_KEY] = exc
                if status == 0 and _is_transient(exc):
                    # The database went away under a service that did not expect it there
                    # (a read outside its unit of work): what a retry can cure is 503, and
                    # only that (core.db.is_transient); everything else is a 500.
                    await problem_response(_unavailable(), scope.get("path"))(
                        scope, _no_receive, send_with_id
                    )
                elif status == 0:
                    await internal_error_response(scope.get("path"), request_id)(
                        scope, _no_receive, send_with_id
                    )
                else:  # the answer has started: the server closes the connection
                    status = 500
        finally:
            if status == 0:
                # Nothing answered: cancelled (the server stopping) or an app that sent nothing.
                # Counted as a 500, as before; logged as what it is.
                status = 500
                log.warning("request not answered", method=scope.get("method", ""), route=route_label(scope))
            elif status >= 500:
                self._log_failure(scope, status)
            REQUEST_ID.reset(token)
            self._measure(scope, status, started, request_id)
            if traced is not None:
                tracing.end_server_span(traced, route_label(scope), status)

    def _log_failure(self, scope: Scope, status: int) -> None:
        error = scope.get(ERROR_KEY)
        fields: dict[str, Any] = {"error": None, "sqlstate": None, "constraint": None}
        if error is not None:
            kind = type(error)
            fields = {"error": f"{kind.__module__}.{kind.__qualname__}", **database_error_fields(error)}
            if not isinstance(error, ProblemError) and not _is_transient(error):
                # unexpected: the one traceback of it (an outage needs none: its SQLSTATE says it)
                fields["exc_info"] = error
        log.error(
            "request failed",
            service=self.metrics.service,
            method=scope.get("method", ""),
            route=route_label(scope),
            status=status,
            **fields,
        )

    def _measure(self, scope: Scope, status: int, started: float, request_id: str) -> None:
        route, method = route_label(scope), scope.get("method", "")
        elapsed_s = time.perf_counter() - started
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            m = self.metrics
            children = (
                m.requests.labels(m.service, method, route, str(status)),
                m.latency.labels(m.service, method, route),
            )
            if len(self._children) < MEASURED_KEYS_MAX:
                self._children[key] = children
        children[0].inc()
        children[1].observe(elapsed_s)
        if self.access is not None:
            self.access(method, route, status, elapsed_s, request_id)


def _is_transient(exc: BaseException) -> bool:
    """:func:`hiwallet.core.db.is_transient`, imported on the first unexpected error, not with
    this module: core.db loads asyncpg (about 5 MB), and the front APIs and BFFs, which have no
    database, load this module (tests/test_deployables.py keeps asyncpg out of them at start)."""
    from hiwallet.core.db import is_transient

    return is_transient(exc)
