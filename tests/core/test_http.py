"""core.http: problem+json in one place, health, readiness, metrics, body limit, hot routes."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict

from hiwallet.core.http import (
    GC_YOUNG_THRESHOLD,
    FastJSONResponse,
    LeanRoute,
    LeanRouteError,
    ProblemError,
    create_app,
    document_models,
    json_body,
    json_body_openapi,
    query_params,
    settle_heap_once_started,
)


class InsufficientFunds(ProblemError):
    status = 422
    slug = "insufficient-funds"
    title = "Insufficient funds"


class Transfer(BaseModel):
    amount_minor: int
    currency: str


healthy = True


async def database() -> None:
    if not healthy:
        raise ConnectionError("postgres at 10.0.0.5 refused: password=hunter2")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    global healthy
    healthy = True
    app = create_app("http-test", ready_checks={"database": database}, max_body_bytes=1_000)

    @app.post("/transfers")
    async def transfer(body: Transfer) -> dict[str, int]:
        raise InsufficientFunds(
            "the wallet holds less than the amount", balance=500, amount=body.amount_minor
        )

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("SELECT secret FROM internals")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


async def test_problem_error_carries_its_fields(client: httpx.AsyncClient) -> None:
    response = await client.post("/transfers", json={"amount_minor": 900, "currency": "TRY"})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "https://hiwallet.dev/problems/insufficient-funds",
        "title": "Insufficient funds",
        "status": 422,
        "detail": "the wallet holds less than the amount",
        "instance": "/transfers",
        "balance": 500,
        "amount": 900,
    }


async def test_validation_errors_name_the_fields(client: httpx.AsyncClient) -> None:
    response = await client.post("/transfers", json={"amount_minor": "lots"})
    assert response.status_code == 422
    body = response.json()
    assert body["type"] == "https://hiwallet.dev/problems/validation-error"
    assert {tuple(e["loc"]) for e in body["errors"]} == {("body", "amount_minor"), ("body", "currency")}


async def test_unhandled_errors_hide_internals(client: httpx.AsyncClient) -> None:
    response = await client.get("/boom")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "https://hiwallet.dev/problems/internal-error"
    assert "SELECT" not in response.text and "RuntimeError" not in response.text


async def test_unknown_route_is_problem_json(client: httpx.AsyncClient) -> None:
    response = await client.get("/nowhere")
    assert response.status_code == 404
    assert response.json()["type"] == "https://hiwallet.dev/problems/not-found"


async def test_health_ready_and_metrics(client: httpx.AsyncClient) -> None:
    global healthy
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert (await client.get("/ready")).status_code == 200
    healthy = False
    not_ready = await client.get("/ready")
    assert not_ready.status_code == 503
    assert not_ready.json()["checks"] == {"database": "unavailable"}
    assert "hunter2" not in not_ready.text
    metrics = (await client.get("/metrics")).text
    assert 'http_requests_total{method="GET",route="/ready",service="http-test",status="503"} 1.0' in metrics
    assert "http_request_duration_seconds_bucket" in metrics


async def test_body_size_limit(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/transfers", content=b"x" * 5_000, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["type"] == "https://hiwallet.dev/problems/payload-too-large"


def lean_app(hot: bool) -> FastAPI:
    """The same LeanRoutes, served ahead of the stack or through it."""
    router = APIRouter(route_class=LeanRoute)

    @router.post("/pay", openapi_extra=json_body_openapi(Transfer))
    async def pay(request: Request) -> Response:
        body = await json_body(request, Transfer)
        if body.currency == "XXX":
            raise RuntimeError("SELECT secret FROM internals")
        if body.amount_minor > 100:
            raise InsufficientFunds("not enough", balance=100, amount=body.amount_minor)
        return FastJSONResponse({"paid": body.amount_minor}, status_code=201)

    app = create_app("lean-test", max_body_bytes=1_000, hot_routes=router.routes if hot else ())
    app.include_router(router)
    document_models(app, Transfer)
    return app


LEAN_REQUESTS: list[dict[str, Any]] = [
    {"json": {"amount_minor": 5, "currency": "TRY"}},
    {"json": {"amount_minor": 500, "currency": "TRY"}},  # a problem of ours
    {"json": {"amount_minor": "lots"}},  # validation
    {"content": b"{", "headers": {"content-type": "application/json"}},  # not JSON
    {"content": b"amount_minor=5", "headers": {"content-type": "text/plain"}},
    {"json": {"amount_minor": 5, "currency": "XXX"}},  # unhandled: 500, internals hidden
    {"content": b"x" * 5_000, "headers": {"content-type": "application/json"}},  # declared too big
]


async def test_hot_routes_answer_as_the_stack_does() -> None:
    """Each request answered by a hot route gets the same status, body and content type as
    through FastAPI's stack, and is counted under the same route."""
    answers: dict[bool, list[tuple[int, str, Any]]] = {}
    metrics: dict[bool, str] = {}
    for hot in (False, True):
        transport = httpx.ASGITransport(app=lean_app(hot), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            answers[hot] = []
            for n, request in enumerate(LEAN_REQUESTS):
                # The same request ids on both lanes: a 500's incident is its request id.
                headers = {**request.get("headers", {}), "X-Request-Id": f"lean-{n}"}
                r = await c.post("/pay", **{**request, "headers": headers})
                answers[hot].append((r.status_code, r.headers["content-type"], r.json()))
            metrics[hot] = (await c.get("/metrics")).text
    assert answers[True] == answers[False]
    assert [status for status, _, _ in answers[True]] == [201, 422, 422, 422, 422, 500, 413]
    assert "SELECT" not in str(answers[True])
    for hot in (False, True):
        counted = 'http_requests_total{method="POST",route="/pay",service="lean-test",status="422"} 4.0'
        assert counted in metrics[hot], metrics[hot]


async def test_a_chunked_body_over_the_limit_is_refused_on_a_hot_route() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"x" * 500

    transport = httpx.ASGITransport(app=lean_app(True), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        r = await c.post("/pay", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["type"] == "https://hiwallet.dev/problems/payload-too-large"


def test_a_hot_route_must_be_served_by_the_app() -> None:
    router = APIRouter(route_class=LeanRoute)

    @router.post("/pay")
    async def pay(request: Request) -> Response:
        return Response(status_code=204)

    app = create_app("lean-test", hot_routes=router.routes)
    app.include_router(router, prefix="/v2")  # served elsewhere than the hot route's path
    with pytest.raises(LeanRouteError, match="POST /pay"):
        app.build_middleware_stack()


class Page(BaseModel):
    limit: int = 5


def id_app(hot: bool, *extra: Any) -> FastAPI:
    """LeanRoutes with an id segment, served ahead of the stack or through it, beside plain
    routes that the hot lane must leave to the stack."""
    router = APIRouter(route_class=LeanRoute, prefix="/v1")

    @router.get("/items/{item_id}")
    async def item(request: Request) -> Response:
        route = request.scope["route"].path
        return FastJSONResponse({"item": request.path_params["item_id"], "route": route})

    @router.get("/items/{item_id}/lines")
    async def lines(request: Request) -> Response:
        page = query_params(request, Page)
        return FastJSONResponse({"item": request.path_params["item_id"], "limit": page.limit})

    plain = APIRouter(prefix="/v1")

    @plain.get("/items/{item_id}/more")
    async def more(item_id: str) -> dict[str, str]:
        return {"more": item_id}

    @plain.post("/items/{item_id}")
    async def post_item(item_id: str) -> dict[str, str]:
        return {"posted": item_id}

    app = create_app("id-test", hot_routes=router.routes if hot else ())
    app.include_router(router)
    app.include_router(plain)
    for other in extra:
        app.include_router(other)
    return app


ID_REQUESTS = [
    ("GET", "/v1/items/a1"),
    ("GET", "/v1/items/a%20b"),  # decoded, as the router reads it
    ("GET", "/v1/items/a1/lines?limit=7&limit=9"),  # the last value, as FastAPI reads it
    ("GET", "/v1/items/a1/lines?limit=x"),  # 422, query first in its loc
    ("GET", "/v1/items/a1/lines?other=1"),
    ("GET", "/v1/items/a1/more"),  # the stack's
    ("POST", "/v1/items/a1"),  # the stack's
    ("GET", "/v1/items/"),  # an empty id: no route
    ("GET", "/v1/items/a/b"),  # two segments: no route
    ("GET", "/v1/items/a1/lines/x"),
    ("DELETE", "/v1/items/a1"),  # 405
]


async def test_hot_routes_with_an_id_answer_as_the_stack_does() -> None:
    answers: dict[bool, list[tuple[int, Any]]] = {}
    metrics: dict[bool, str] = {}
    for hot in (False, True):
        transport = httpx.ASGITransport(app=id_app(hot), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            answers[hot] = []
            for method, path in ID_REQUESTS:
                r = await c.request(method, path)
                answers[hot].append((r.status_code, r.text))
            metrics[hot] = (await c.get("/metrics")).text
    assert answers[True] == answers[False]
    assert [status for status, _ in answers[True]] == [200, 200, 200, 422, 200, 200, 200, 404, 404, 404, 405]
    assert '"item":"a b"' in answers[True][1][1]
    assert '"limit":9' in answers[True][2][1]
    assert '"loc":["query","limit"]' in answers[True][3][1]
    for hot in (False, True):
        counted = (
            'http_requests_total{method="GET",route="/v1/items/{item_id}",service="id-test",status="200"} 2.0'
        )
        assert counted in metrics[hot], metrics[hot]


class FrozenPage(BaseModel):
    model_config = ConfigDict(frozen=True)

    limit: int = 5


def test_query_params_keeps_a_frozen_models_answer_and_refuses_as_before() -> None:
    def request(query: bytes) -> Request:
        return Request({"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": query})

    first = query_params(request(b"limit=7&limit=9"), FrozenPage)
    assert first.limit == 9
    assert query_params(request(b"limit=7&limit=9"), FrozenPage) is first  # kept
    assert query_params(request(b"limit=3"), FrozenPage).limit == 3  # another query, its own
    assert query_params(request(b""), FrozenPage).limit == 5
    for _ in range(2):  # a refused query is refused each time, never kept
        with pytest.raises(RequestValidationError) as refused:
            query_params(request(b"limit=x"), FrozenPage)
        assert refused.value.errors()[0]["loc"] == ("query", "limit")
    # A model that is not frozen is validated anew each time (its answer could be changed).
    assert query_params(request(b"limit=4"), Page) is not query_params(request(b"limit=4"), Page)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/items/special",  # a literal path the id segment would take
        "/v1/{kind}/a1",  # a parameter where the hot route has a literal
        "/v1/items/{other:path}",  # a path parameter spanning segments
    ],
)
def test_a_route_a_hot_id_route_would_take_is_refused(path: str) -> None:
    other = APIRouter()
    other.get(path)(bare)
    app = id_app(True, other)
    with pytest.raises(LeanRouteError, match=r"GET /v1/items/\{item_id\}: another route .* may match"):
        app.build_middleware_stack()


def test_a_route_of_another_method_or_shape_beside_a_hot_id_route_is_served() -> None:
    other = APIRouter()
    other.post("/v1/items/special")(bare)
    other.get("/v1/items/special/x/y")(bare)
    other.get("/v2/items/{item_id}")(bare)
    id_app(True, other).build_middleware_stack()


@pytest.mark.parametrize("path", ["/v1/{a}/{b}", "/v1/items/{item_id:int}", "/v1/items/x{item_id}"])
def test_a_hot_route_with_another_template_is_refused(path: str) -> None:
    router = lean_router()
    router.get(path)(bare)
    app = create_app("lean-test", hot_routes=router.routes)
    app.include_router(router)
    with pytest.raises(LeanRouteError, match="one id segment"):
        app.build_middleware_stack()


# --- Lean and hot routes cannot be misused: each case refused, naming the route ------------


async def guard() -> None:
    raise PermissionError("a guard that must run")


def lean_router(**router_options: Any) -> APIRouter:
    return APIRouter(route_class=LeanRoute, **router_options)


async def bare(request: Request) -> Response:
    return Response(status_code=204)


def test_a_lean_route_with_a_dependency_of_its_own_is_refused() -> None:
    router = lean_router()
    with pytest.raises(LeanRouteError, match=r"POST /pay.*dependency 'guard'"):
        router.post("/pay", dependencies=[Depends(guard)])(bare)


def test_a_lean_route_under_a_router_with_a_dependency_is_refused() -> None:
    router = lean_router(prefix="/v1", dependencies=[Depends(guard)])
    with pytest.raises(LeanRouteError, match=r"POST /v1/pay.*dependency 'guard'"):
        router.post("/pay")(bare)


def test_a_lean_route_included_with_a_dependency_is_refused_at_startup() -> None:
    router = lean_router()
    router.post("/pay")(bare)
    for hot in (False, True):
        app = create_app("lean-test", hot_routes=router.routes if hot else ())
        app.include_router(router, dependencies=[Depends(guard)])
        with pytest.raises(LeanRouteError, match=r"POST /pay.*dependency 'guard'"):
            app.build_middleware_stack()


async def test_the_refusal_happens_at_startup() -> None:
    """The ASGI lifespan's startup (uvicorn's, with lifespan "on") fails with it."""
    router = lean_router()
    router.post("/pay")(bare)
    app = create_app("lean-test", hot_routes=router.routes)
    app.include_router(router, dependencies=[Depends(guard)])
    messages = iter([{"type": "lifespan.startup"}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: Any) -> None:
        pass

    with pytest.raises(LeanRouteError, match="POST /pay"):
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)


@pytest.mark.parametrize(
    ("path", "endpoint", "found"),
    [
        ("/pay/{wallet}", "path", "path parameter 'wallet'"),
        ("/pay", "query", "query parameter 'limit'"),
        ("/pay", "header", "header parameter 'x_key'"),
        ("/pay", "body", "body parameter 'body'"),
    ],
)
def test_a_lean_route_with_a_parameter_is_refused(path: str, endpoint: str, found: str) -> None:
    async def with_path(request: Request, wallet: str) -> Response:
        return Response(status_code=204)

    async def with_query(request: Request, limit: int = 5) -> Response:
        return Response(status_code=204)

    async def with_header(request: Request, x_key: Annotated[str, Header()]) -> Response:
        return Response(status_code=204)

    async def with_body(request: Request, body: Transfer) -> Response:
        return Response(status_code=204)

    endpoints = {"path": with_path, "query": with_query, "header": with_header, "body": with_body}
    router = lean_router()
    with pytest.raises(LeanRouteError, match=rf"POST {re.escape(path)}.*{found}"):
        router.post(path)(endpoints[endpoint])


def test_a_middleware_the_hot_lane_would_skip_is_refused() -> None:
    class Audit:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self.app(scope, receive, send)

    router = lean_router()
    router.post("/pay")(bare)
    app = create_app("lean-test", hot_routes=router.routes)
    app.include_router(router)
    app.add_middleware(Audit)
    with pytest.raises(LeanRouteError, match=r"POST /pay.*would skip Audit"):
        app.build_middleware_stack()
    # Without hot routes, a middleware is served as any other (identity's staff realm).
    plain = create_app("plain-test")
    plain.include_router(router)
    plain.add_middleware(Audit)
    plain.build_middleware_stack()


def test_a_hot_route_must_be_a_lean_route() -> None:
    router = APIRouter()

    @router.post("/pay")
    async def pay(request: Request) -> Response:
        return Response(status_code=204)

    app = create_app("lean-test", hot_routes=router.routes)  # type: ignore[arg-type]
    app.include_router(router)
    with pytest.raises(LeanRouteError, match=r"POST /pay: a hot route must be a LeanRoute"):
        app.build_middleware_stack()


def test_the_guards_hold_under_python_dash_o() -> None:
    """Code that raises, not asserts that ``python -O`` removes."""
    code = (
        "from fastapi import APIRouter, Request, Response\n"
        "from hiwallet.core.http import LeanRoute, LeanRouteError, create_app\n"
        "router = APIRouter(route_class=LeanRoute)\n"
        "async def pay(request: Request) -> Response: ...\n"
        "router.post('/pay')(pay)\n"
        "app = create_app('o-test', hot_routes=router.routes)\n"
        "app.include_router(router, prefix='/v2')\n"
        "try:\n"
        "    app.build_middleware_stack()\n"
        "except LeanRouteError as exc:\n"
        "    print('refused:', exc)\n"
    )
    run = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, check=True)
    assert "refused: POST /pay" in run.stdout


async def test_the_heap_is_settled_once_the_app_has_started() -> None:
    """At the process entry point (settle_heap_once_started), after the app's lifespan has built
    what lives as long as the process, before the first request."""
    seen: dict[str, int] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        seen["frozen during startup"] = gc.get_freeze_count()
        yield

    app = settle_heap_once_started(create_app("gc-test", lifespan=lifespan))
    threshold = gc.get_threshold()
    try:
        async with app.router.lifespan_context(app):
            seen["frozen once started"] = gc.get_freeze_count()
            assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    assert seen["frozen during startup"] == 0
    assert seen["frozen once started"] > 0
    # The factory alone settles nothing.
    plain = create_app("gc-test")
    async with plain.router.lifespan_context(plain):
        assert gc.get_freeze_count() == 0


async def test_httpcore_finds_sniffio_without_searching_the_disk_on_every_request() -> None:
    """httpcore imports sniffio inside every request of an httpx AsyncClient; without it each
    of those imports searched sys.path on disk and failed (a sixth of bank-adapter's CPU)."""
    import sys

    from httpcore._synchronization import current_async_library

    assert current_async_library() == "asyncio"
    assert "sniffio" in sys.modules
