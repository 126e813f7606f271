"""Lean routes: endpoints that take the request alone, called without FastAPI's request handler.

A :class:`LeanRoute` saves FastAPI's dependency solving, body parsing and response
serialisation (55 µs of CPU per request, measured in bench/). The price is that FastAPI would
run nothing declared around such an endpoint, so declaring anything is refused: a dependency
(on the route, its router, an ``include_router`` or the app) or a parameter (path, query,
header, cookie, body) raises :class:`LeanRouteError` naming the route, when the route is made
and again when the app is built (:func:`check_lean_routes`, at startup).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel, ValidationError


class LeanRouteError(RuntimeError):
    """A lean or hot route declared something that would never run or be checked."""


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


# query_params' answers by model and raw query: a hot read's query is one of a few (limit=50,
# days=30), and parsing and validating it again was 2 % of wallet-api's CPU in the read bench
# (py-spy). Bounded: emptied when full, so odd queries cannot grow it.
_QUERY_CACHE: dict[tuple[type[BaseModel], bytes], BaseModel] = {}
_QUERY_CACHE_SIZE = 256


def query_params(request: Request, model: type[Model]) -> Model:
    """The request's query as ``model`` (each field a query parameter, with its default when
    absent), with the answers of FastAPI's query parameters: a repeated one read as its last
    value, an unknown one ignored, a 422 validation problem naming each field (``query`` first
    in its ``loc``). For lean routes (``LeanRoute``), whose ``openapi_extra`` documents the
    parameters. For a frozen ``model``, the answer for a query seen before is the same instance
    (kept: nothing can change it); any other is validated each time."""
    frozen = bool(model.model_config.get("frozen"))
    key = (model, request.scope.get("query_string", b""))
    if frozen and (cached := _QUERY_CACHE.get(key)) is not None:
        return cached  # type: ignore[return-value]
    try:
        answer = model.model_validate(dict(request.query_params))
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
        ) from exc
    if frozen:
        if len(_QUERY_CACHE) >= _QUERY_CACHE_SIZE:
            _QUERY_CACHE.clear()
        _QUERY_CACHE[key] = answer
    return answer


def _describe(methods: Any, path: str | None) -> str:
    return f"{' '.join(sorted(methods or ()))} {path}".strip()


def lean_violations(dependant: Dependant) -> list[str]:
    """What a lean endpoint declares that its lean call would skip; empty if nothing."""
    found = [f"dependency {getattr(d.call, '__qualname__', d.call)!r}" for d in dependant.dependencies]
    for kind, params in (
        ("path", dependant.path_params),
        ("query", dependant.query_params),
        ("header", dependant.header_params),
        ("cookie", dependant.cookie_params),
        ("body", dependant.body_params),
    ):
        found += [f"{kind} parameter {p.name!r}" for p in params]
    for kind, name in (
        ("response", dependant.response_param_name),
        ("background tasks", dependant.background_tasks_param_name),
        ("security scopes", dependant.security_scopes_param_name),
        ("websocket", dependant.websocket_param_name),
    ):
        if name:
            found.append(f"{kind} parameter {name!r}")
    return found


def _refuse(what: str, violations: list[str]) -> None:
    if violations:
        raise LeanRouteError(
            f"{what}: a LeanRoute is called with the request alone, so FastAPI would never run or "
            f"check its {', '.join(violations)}; read it in the endpoint (json_body, "
            "verified_caller) or use a plain route"
        )


class LeanRoute(APIRoute):
    """A route whose endpoint takes the request alone and returns a response: FastAPI documents
    it as any other (its ``openapi_extra`` says what the parameters would have said), and calls
    it without its request handler (no dependency solving, body parsing or response
    serialisation: 55 µs of CPU per request, measured in bench/, a seventh of wallet-api's per
    transfer). Errors reach the app's handlers as from any route. It declares nothing: no
    dependency, no parameter (refused with :class:`LeanRouteError`); the endpoint reads what it
    needs (``json_body``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        # Called when the route is made (its own and its router's dependencies are in its
        # dependant by then); what an include_router or the app adds, check_lean_routes sees.
        _refuse(_describe(self.methods, self.path), lean_violations(self.dependant))
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint


def check_lean_routes(app: FastAPI) -> None:
    """Every LeanRoute as the app serves it, with what its inclusions added, declares nothing
    (at startup: when the app builds its stack)."""
    for context in iter_route_contexts(app.router.routes):
        if isinstance(context.original_route, LeanRoute):
            _refuse(_describe(context.methods, context.path), lean_violations(context.dependant))


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
