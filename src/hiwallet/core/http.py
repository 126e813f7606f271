"""The HTTP app factory every service uses: problem+json errors, health, readiness, metrics.

Errors are answered in ONE place: a service raises a :class:`ProblemError` (or a subclass) and
the handlers here turn it into ``application/problem+json`` (RFC 9457). Validation errors and
anything unexpected take the same shape, so a client parses one format, and an unhandled error
never leaks a traceback or a driver message.
"""

from __future__ import annotations

import gc
import inspect
import os
import shutil
import tempfile
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from typing import Any, ClassVar, TypeVar

import orjson
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger(__name__)

PROBLEM_BASE = "https://hiwallet.dev/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"

# A named check for /ready: returns normally when the dependency is reachable, raises otherwise.
ReadyCheck = Callable[[], Awaitable[None]]
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def problem_type(slug: str) -> str:
    return PROBLEM_BASE + slug


class ProblemError(Exception):
    """The base of every error a service answers with problem+json.

    Subclasses set ``status``, ``slug`` and ``title``; an instance adds ``detail`` and any extra
    members a client needs (RFC 9457 §3.2), e.g. ``balance`` on insufficient funds.
    """

    status: ClassVar[int] = 400
    slug: ClassVar[str] = "bad-request"
    title: ClassVar[str] = "Bad request"

    def __init__(
        self,
        detail: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = extra

    @property
    def type(self) -> str:
        return problem_type(self.slug)

    def body(self, instance: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"type": self.type, "title": self.title, "status": self.status}
        if self.detail:
            body["detail"] = self.detail
        if instance:
            body["instance"] = instance
        body.update(self.extra)
        return body


class NotFound(ProblemError):
    status = 404
    slug = "not-found"
    title = "Not found"


class Unauthorized(ProblemError):
    status = 401
    slug = "unauthorized"
    title = "Unauthorized"


class Forbidden(ProblemError):
    status = 403
    slug = "forbidden"
    title = "Forbidden"


class PayloadTooLarge(ProblemError):
    status = 413
    slug = "payload-too-large"
    title = "Request body too large"


class ServiceUnavailable(ProblemError):
    status = 503
    slug = "service-unavailable"
    title = "Service unavailable"


class FastJSONResponse(JSONResponse):
    """JSON rendered by orjson: a transfer's answer in a few µs (the standard library's encoder
    took several times that). The content must be JSON's own types, as for JSONResponse."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


Model = TypeVar("Model", bound=BaseModel)


def _is_json(content_type: str) -> bool:
    mime = content_type.partition(";")[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


async def json_body(request: Request, model: type[Model]) -> Model:
    """The request's body as ``model``, validated from the raw bytes by pydantic-core, with the
    answers of a FastAPI body parameter: a 422 validation problem naming each field (``body``
    first in its ``loc``), a body of another content type refused as one that is not an object.

    For routes that take the request alone (``LeanRoute``; ``json_body_openapi`` documents the
    body): FastAPI's dependency solving and its two-step parse (``json.loads``, then validation
    of the Python objects) were a fifth of wallet-api's CPU per transfer (bench/)."""
    raw = await request.body()
    content_type = request.headers.get("content-type")
    if content_type and not _is_json(content_type):
        raise RequestValidationError(
            [{"type": "model_attributes_type", "loc": ("body",), "msg": "Input should be a JSON object"}]
        )
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
        ) from exc


class LeanRoute(APIRoute):
    """A route whose endpoint takes the request alone and returns a response: FastAPI documents
    it as any other (its ``openapi_extra`` says what the parameters would have said), and calls
    it without its request handler (no dependency solving, body parsing or response
    serialisation: 55 µs of CPU per request, measured in bench/, a seventh of wallet-api's per
    transfer). Errors reach the app's handlers as from any route. For hot routes without path
    parameters; the endpoint reads what it needs (``json_body``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        assert not self.dependant.path_params, f"{self.path}: a LeanRoute validates no parameter"
        return endpoint


def json_body_openapi(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``openapi_extra`` declaring ``model`` as its required JSON body (for a route
    that reads it with ``json_body``); the model must be among the document's components
    (``document_models``)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        }
    }


def document_models(app: FastAPI, *models: type[BaseModel]) -> None:
    """Add these models' schemas to the app's OpenAPI components, for the parts of the document
    that refer to them by hand (problem+json answers, ``json_body_openapi``)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in models:
            found = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in found.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components.setdefault(model.__name__, found)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def problem_response(error: ProblemError, instance: str | None = None) -> JSONResponse:
    return JSONResponse(
        error.body(instance),
        status_code=error.status,
        media_type=PROBLEM_CONTENT_TYPE,
        headers=error.headers or None,
    )


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem_response(exc, request.url.path)


async def _on_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    # 422 for a well-formed body with wrong values; the field errors are what a client fixes.
    errors = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type")}
        for e in exc.errors()
    ]
    body = {
        "type": problem_type("validation-error"),
        "title": "The request is not valid",
        "status": 422,
        "detail": f"{len(errors)} field(s) failed validation",
        "instance": request.url.path,
        "errors": errors,
    }
    return JSONResponse(body, status_code=422, media_type=PROBLEM_CONTENT_TYPE)


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    # Starlette raises these for unknown routes (404) and wrong methods (405).
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc.__cause__, ProblemError):
        # FastAPI turns any failure while reading a body into "400, error parsing the body";
        # one of ours (a chunked body over the limit, from _Edge) keeps its own answer.
        return problem_response(exc.__cause__, request.url.path)
    slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    body = {
        "type": problem_type(slug),
        "title": str(exc.detail),
        "status": exc.status_code,
        "instance": request.url.path,
    }
    return JSONResponse(
        body, status_code=exc.status_code, media_type=PROBLEM_CONTENT_TYPE, headers=exc.headers
    )


async def _on_unhandled(request: Request, exc: Exception) -> Response:
    # The traceback goes to the log, never to the client: it can carry SQL, secrets, paths.
    log.error("unhandled error", path=request.url.path, exc_info=exc)
    body = {
        "type": problem_type("internal-error"),
        "title": "Internal server error",
        "status": 500,
        "instance": request.url.path,
    }
    return JSONResponse(body, status_code=500, media_type=PROBLEM_CONTENT_TYPE)


async def _send_too_large(scope: Scope, send: Send, max_bytes: int) -> None:
    error = PayloadTooLarge(f"the body exceeds {max_bytes} bytes")
    response = problem_response(error, scope.get("path"))
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


# The youngest generation's threshold (CPython's default: 700 allocations). A request allocates
# a few thousand objects that nearly all die with it; at 700 the collector ran several times per
# request (bench/: 7 % of wallet-api's CPU under load).
GC_YOUNG_THRESHOLD = 20_000


def settle_heap() -> None:
    """Once a service has started: what it built (modules, routes, schemas, pools) lives as long
    as the process, so the cyclic collector stops traversing it (``gc.freeze``), and young
    collections run less often. Cycles made later are still collected."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def multiprocess_metrics(service: str) -> Iterator[str]:
    """A fresh directory for the metrics of one service's worker processes, named in the
    environment they inherit (prometheus_client's multiprocess mode, chosen when a worker
    imports it); removed when the service stops."""
    directory = tempfile.mkdtemp(prefix=f"hiwallet-{service}-metrics-")
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = directory
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(directory, ignore_errors=True)


class _Metrics:
    """Per-app Prometheus metrics in their own registry, so several apps fit in one process."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "http_requests_total",
            "HTTP requests by route, method and status",
            ["service", "method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "HTTP request latency by route and method",
            ["service", "method", "route"],
            registry=self.registry,
        )
        self.service = service


def _route_label(scope: Scope) -> str:
    # The route template, not the raw path: raw paths carry ids and would explode cardinality.
    # The router records the matched route in the (shared) scope.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


class _Edge:
    """What every request passes first: bodies over ``max_bytes`` are refused before the app
    reads them into memory, and each request is counted and timed by route template, method
    and status. One layer rather than two: each layer of the stack wraps the request and both
    messages of its answer, a few µs a request."""

    def __init__(self, app: ASGIApp, metrics: _Metrics, max_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > self.max_bytes:
                    status = PayloadTooLarge.status
                    await _send_too_large(scope, send, self.max_bytes)
                    self._measure(scope, status, started)
                    return
                break
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # A chunked body that lies about its size: stop reading it.
                    raise PayloadTooLarge(f"the body exceeds {self.max_bytes} bytes")
            return message

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, limited_receive, send_status)
        finally:
            self._measure(scope, status, started)

    def _measure(self, scope: Scope, status: int, started: float) -> None:
        m, route, method = self.metrics, _route_label(scope), scope.get("method", "")
        m.requests.labels(m.service, method, route, str(status)).inc()
        m.latency.labels(m.service, method, route).observe(time.perf_counter() - started)


class _HotRoutes:
    """The hottest routes, served ahead of the framework's stack: a request for one of them
    (method and path exactly) passes the same edge as every request (body limit, metrics),
    then goes straight to its LeanRoute's endpoint, and an error it raises is answered by the
    app's own handler for it, as the stack would. Every other request goes down the stack.

    Why: the stack's layers (Starlette's and FastAPI's error, telemetry and body-limit
    middleware, the router's matching over every route, two exit stacks per request) took
    about 30 µs of CPU per transfer (bench/: a bare endpoint answered in 64 µs through them and
    in about 30 µs by uvicorn alone), a sixth of wallet-api's CPU per transfer."""

    def __init__(
        self,
        app: ASGIApp,
        fastapi: FastAPI,
        hot: Collection[LeanRoute],
        edge: Callable[[ASGIApp], ASGIApp],
    ) -> None:
        self.app = app
        self.handlers = fastapi.exception_handlers
        self.routes = {(method, route.path): route for route in hot for method in route.methods or ()}
        for route in hot:
            # The app serves it at the same path (included without another prefix).
            assert fastapi.url_path_for(route.name) == route.path, route.path
        self.edge = edge(self._serve)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["method"], scope["path"]) in self.routes:
            await self.edge(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes[scope["method"], scope["path"]]
        scope["route"] = route  # as the router sets it: the metrics' label
        request = Request(scope, receive, send)
        try:
            response = await route.endpoint(request)
        except Exception as exc:
            response = await self._handled(request, exc)
        await response(scope, receive, send)

    async def _handled(self, request: Request, exc: Exception) -> Response:
        for cls in type(exc).__mro__:  # the nearest handler, as Starlette looks it up
            handler = self.handlers.get(cls)
            if handler is not None:
                answer = handler(request, exc)
                response: Response = await answer if inspect.isawaitable(answer) else answer
                return response
        raise exc


def create_app(
    title: str,
    *,
    version: str = "0.1.0",
    ready_checks: Mapping[str, ReadyCheck] | None = None,
    lifespan: Lifespan | None = None,
    max_body_bytes: int = 1_000_000,
    extra_problem_handlers: Sequence[tuple[type[Exception], Any]] = (),
    hot_routes: Collection[LeanRoute] = (),
) -> FastAPI:
    """A FastAPI app with problem+json errors, ``/health``, ``/ready`` and ``/metrics``.

    ``ready_checks`` are looked up at request time, so a lifespan may fill the mapping after the
    app is built (e.g. once the database pool exists). ``hot_routes`` are served ahead of the
    stack (``_HotRoutes``); they must be included in the app, which may happen after this
    returns.
    """
    checks: Mapping[str, ReadyCheck] = ready_checks if ready_checks is not None else {}

    @asynccontextmanager
    async def started(app: FastAPI) -> AsyncIterator[None]:
        async with lifespan(app) if lifespan is not None else nullcontext():
            settle_heap()
            yield

    # FastAPI's native OpenTelemetry off: our metrics are Prometheus (/metrics, _Edge), and
    # with it on, every request asks three global providers whether they are configured.
    app = FastAPI(
        title=title,
        version=version,
        lifespan=started,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    metrics = _Metrics(title)
    app.state.metrics_registry = metrics.registry

    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    for exc_type, handler in extra_problem_handlers:
        app.add_exception_handler(exc_type, handler)
    app.add_exception_handler(Exception, _on_unhandled)

    # A plain ASGI middleware (not @app.middleware("http"), whose per-request task group and
    # streams cost more than the rest of a fast endpoint).
    app.add_middleware(_Edge, metrics=metrics, max_bytes=max_body_bytes)
    if hot_routes:
        build_stack = app.build_middleware_stack

        def build_with_hot_routes() -> ASGIApp:
            return _HotRoutes(
                build_stack(), app, hot_routes, lambda inner: _Edge(inner, metrics, max_body_bytes)
            )

        app.build_middleware_stack = build_with_hot_routes  # type: ignore[method-assign]

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
                log.warning("readiness check failed", check=name, error=repr(exc))
                failed[name] = "unavailable"
        if failed:
            error = ServiceUnavailable("a dependency is not reachable", checks=failed)
            return problem_response(error, "/ready")
        return JSONResponse({"status": "ready", "checks": {n: "ok" for n in checks}})

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        if os.environ.get(MULTIPROC_ENV):
            # Worker processes: each writes its values to the shared directory; any of them
            # answers with the sum of all.
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
