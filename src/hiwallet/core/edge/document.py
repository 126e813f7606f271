"""The OpenAPI document of a front API's lean routes: they declare no parameter (core.http.lean),
so the document says by hand what a parameter would have said, with these helpers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI

from hiwallet.core.http import PROBLEM_CONTENT_TYPE

__all__ = [
    "BEARER",
    "answers",
    "document_security",
    "idempotency_key",
    "operation",
    "path_param",
    "query_param",
]

BEARER = "bearer"
_DESCRIPTIONS = {
    400: "Bad request (a missing or malformed Idempotency-Key, a body that cannot be read)",
    401: "No valid access token for this API (WWW-Authenticate says why)",
    403: "This kind of caller (or tier) may not do this",
    404: "Not found, or not the caller's",
    409: "In conflict (a request with this key still running, a state)",
    413: "Body too large",
    422: "Refused: invalid input, funds, limits, tier, key reused",
    429: "Too many requests (Retry-After, RateLimit)",
    502: "A service behind this API failed (a defect there: retrying does not help)",
    503: "A service behind this API is not available; retry (with the same key)",
}
_RATE_HEADERS = {
    "RateLimit": {
        "description": "draft-ietf-httpapi-ratelimit-headers: what is left",
        "schema": {"type": "string"},
    },
    "RateLimit-Policy": {"description": "The quota and window", "schema": {"type": "string"}},
}


def answers(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """problem+json answers with these statuses (a route's ``responses``). A route that
    forwards (503: its upstream away) may also answer 502 (its upstream failed)."""
    if 503 in statuses and 502 not in statuses:
        statuses = (*statuses, 502)
    return {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
            **({"headers": _RATE_HEADERS} if status == 429 else {}),
        }
        for status in statuses
    }


def path_param(name: str, pattern: str | None = None, description: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if pattern:
        schema["pattern"] = pattern
    param: dict[str, Any] = {"name": name, "in": "path", "required": True, "schema": schema}
    if description:
        param["description"] = description
    return param


def query_param(name: str, schema: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema}


def idempotency_key(pattern: str) -> dict[str, Any]:
    return {
        "name": "Idempotency-Key",
        "in": "header",
        "required": True,
        "description": "A unique key per operation (a UUID): 1 to 255 visible ASCII characters, bare or "
        "quoted. The same key with the same body answers the first answer; with another body 422; while "
        "the first runs 409.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 257, "pattern": pattern},
    }


def operation(
    *,
    parameters: Iterable[dict[str, Any]] = (),
    body: str | None = None,
    anonymous: bool = False,
) -> dict[str, Any]:
    """A lean route's ``openapi_extra``: its parameters, its JSON body (a component's name) and
    its security (a bearer token unless ``anonymous``)."""
    extra: dict[str, Any] = {}
    params = list(parameters)
    if params:
        extra["parameters"] = params
    if body is not None:
        extra["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
        }
    extra["security"] = [] if anonymous else [{BEARER: []}]
    return extra


def document_security(app: FastAPI, description: str) -> None:
    """The bearer scheme the routes name, in the document's components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = generate()
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[BEARER] = {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": description,
        }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
