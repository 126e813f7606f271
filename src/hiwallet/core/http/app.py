"""The HTTP app factory every service uses: problem+json errors, health, readiness, metrics,
the edge (request id, body limit, error log, access line) and the hot lane."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

from hiwallet.core.http.allowlist import ClientNetworks, allowlisted
from hiwallet.core.http.edge import Edge, recording
from hiwallet.core.http.hot import HotRoutes, check_hot_routes
from hiwallet.core.http.lean import LeanRoute, check_lean_routes
from hiwallet.core.http.metrics import Metrics
from hiwallet.core.http.problems import (
    ProblemError,
    ServiceUnavailable,
    on_http_exception,
    on_problem,
    on_validation,
    problem_response,
)
from hiwallet.core.logging import access_logger

log = structlog.get_logger(__name__)

# A named check for /ready: returns normally when the dependency is reachable, raises otherwise.
ReadyCheck = Callable[[], Awaitable[None]]
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def _is_edge(cls: object) -> bool:
    return cls is Edge


def create_app(
    title: str,
    *,
    version: str = "0.1.0",
    ready_checks: Mapping[str, ReadyCheck] | None = None,
    lifespan: Lifespan | None = None,
    max_body_bytes: int = 1_000_000,
    extra_problem_handlers: Sequence[tuple[type[Exception], Any]] = (),
    hot_routes: Collection[LeanRoute] = (),
    access_log: bool | None = None,
    client_networks: ClientNetworks | None = None,
) -> FastAPI:
    """A FastAPI app with problem+json errors, ``/health``, ``/ready`` and ``/metrics``.

    ``ready_checks`` are looked up at request time, so a lifespan may fill the mapping after the
    app is built (e.g. once the database pool exists). ``hot_routes`` are served ahead of the
    stack (``hot.HotRoutes``); they must be included in the app, which may happen after this
    returns. ``access_log``: one line per request (default: the setting
    ``HIWALLET_ACCESS_LOG``, on). ``client_networks``: the clients' networks the guarded paths
    accept (``allowlist.ClientAllowlist``, around everything, the hot lane too; None or empty:
    every client).

    When the app builds its stack (at startup, or its first request) it refuses to start
    (``LeanRouteError``, naming the route) if a lean or hot route declares anything or a
    middleware would be skipped by the hot lane. The process entry point, not this factory,
    settles the heap (``runtime.settle_heap_once_started``).
    """
    from hiwallet.core.settings import get_settings

    checks: Mapping[str, ReadyCheck] = ready_checks if ready_checks is not None else {}
    if access_log is None:
        access_log = get_settings().access_log

    # FastAPI's native OpenTelemetry off: our metrics are Prometheus (/metrics, the edge), and
    # with it on, every request asks three global providers whether they are configured.
    app = FastAPI(
        title=title,
        version=version,
        lifespan=lifespan,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    metrics = Metrics(title)
    app.state.metrics_registry = metrics.registry
    access = access_logger(title, enabled=access_log)

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    for exc_type, handler in extra_problem_handlers:
        app.add_exception_handler(exc_type, handler)
    # No handler for Exception: the edge answers what no handler did (and logs it once).

    # A plain ASGI middleware (not @app.middleware("http"), whose per-request task group and
    # streams cost more than the rest of a fast endpoint).
    app.add_middleware(Edge, metrics=metrics, max_bytes=max_body_bytes, access=access)
    build_stack = app.build_middleware_stack

    def edge(inner: ASGIApp) -> ASGIApp:
        return Edge(inner, metrics, max_body_bytes, access)

    def build() -> ASGIApp:
        check_lean_routes(app)
        check_hot_routes(app, hot_routes, Edge)
        # The edge first, whatever was added after it: every answer passes it.
        app.user_middleware.sort(key=lambda m: not _is_edge(m.cls))
        # Each handler leaves the error it answered for the edge's log of a 5xx.
        app.exception_handlers = {
            key: handler if getattr(handler, "records_error", False) else recording(handler)
            for key, handler in app.exception_handlers.items()
        }
        stack = build_stack()
        if hot_routes:
            stack = HotRoutes(stack, app, hot_routes, edge)
        return allowlisted(stack, client_networks, title)

    app.build_middleware_stack = build  # type: ignore[method-assign]

    @app.get("/health", include_in_schema=False)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", include_in_schema=False)
    async def ready() -> Response:
        failed: dict[str, str] = {}
        for name, check in checks.items():
            try:
                await check()
            except Exception as exc:  # any failure means "not ready"; the reason is logged
                log.warning("readiness check failed", check=name, error=type(exc).__name__)
                failed[name] = "unavailable"
        if failed:
            error = ServiceUnavailable("a dependency is not reachable", checks=failed)
            return problem_response(error, "/ready")
        return JSONResponse({"status": "ready", "checks": {n: "ok" for n in checks}})

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        return metrics.response()

    return app
