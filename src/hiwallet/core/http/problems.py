"""problem+json (RFC 9457): the error tree every service raises, and its handlers.

Errors are answered in ONE place: a service raises a :class:`ProblemError` (or a subclass) and
the handlers here turn it into ``application/problem+json``. Validation errors and anything
unexpected take the same shape, so a client parses one format, and an unhandled error never
leaks a traceback or a driver message: it is a 500 ``internal-error`` carrying an ``incident``
id (the request id, found in the log line of the incident), never "retry".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

PROBLEM_BASE = "https://hiwallet.dev/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"


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


class TooManyRequests(ProblemError):
    """429: a rate limit (onboarding's per address, the front APIs' per customer); carries
    ``Retry-After``."""

    status = 429
    slug = "rate-limited"
    title = "Too many requests; try again later"


class ServiceUnavailable(ProblemError):
    status = 503
    slug = "service-unavailable"
    title = "Service unavailable"


# The 400 FastAPI answers for a body it cannot read as the declared content (JSON that is not
# UTF-8, say): ``malformed-body``. A route with a JSON body lists this among its answers, so
# that its document is exact.
MALFORMED_BODY_ANSWER: dict[int | str, dict[str, Any]] = {
    400: {
        "content": {PROBLEM_CONTENT_TYPE: {}},
        "description": "The body cannot be read (e.g. JSON that is not UTF-8): nothing was done",
    }
}


def problem_response(error: ProblemError, instance: str | None = None) -> JSONResponse:
    return JSONResponse(
        error.body(instance),
        status_code=error.status,
        media_type=PROBLEM_CONTENT_TYPE,
        headers=error.headers or None,
    )


def internal_error_response(instance: str | None, incident: str) -> JSONResponse:
    """The answer to an error nobody expected: no detail (it could carry SQL, secrets, paths),
    and the incident id an operator finds in the log."""
    body = {
        "type": problem_type("internal-error"),
        "title": "Internal server error",
        "status": 500,
        "instance": instance,
        "incident": incident,
    }
    return JSONResponse(body, status_code=500, media_type=PROBLEM_CONTENT_TYPE)


async def on_problem(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, ProblemError):  # registered for ProblemError: a wiring mistake
        raise exc
    return problem_response(exc, request.url.path)


async def on_validation(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, RequestValidationError):
        raise exc
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


async def on_http_exception(request: Request, exc: Exception) -> Response:
    # Starlette raises these for unknown routes (404) and wrong methods (405).
    if not isinstance(exc, StarletteHTTPException):
        raise exc
    if isinstance(exc.__cause__, ProblemError):
        # FastAPI turns any failure while reading a body into "400, error parsing the body";
        # one of ours (a chunked body over the limit, from the edge) keeps its own answer.
        return problem_response(exc.__cause__, request.url.path)
    slug = {400: "malformed-body", 404: "not-found", 405: "method-not-allowed"}.get(
        exc.status_code, "http-error"
    )
    headers = exc.headers
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": _allowed_methods(request, headers)}
    body = {
        "type": problem_type(slug),
        "title": str(exc.detail),
        "status": exc.status_code,
        "instance": request.url.path,
    }
    return JSONResponse(body, status_code=exc.status_code, media_type=PROBLEM_CONTENT_TYPE, headers=headers)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request, headers: Mapping[str, str] | None) -> str:
    """Every method the path has. Starlette's ``Allow`` names only the first route that matched
    the path, so a path served by two routes (``GET`` and ``POST /v1/promo-programmes``, each
    with its own handler) would be answered as having one method (RFC 9110 §15.5.6: ``Allow``
    lists the target resource's methods)."""
    # Each method asked of the app's own router, as Starlette routes it: a route nested in an
    # included router answers for itself (FastAPI includes routers lazily, so the app's route
    # list is not flat).
    routes = getattr(getattr(request.app, "router", None), "routes", ())
    methods = {
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    }
    if not methods:  # not one of ours (a mounted app): keep what Starlette said
        return (headers or {}).get("Allow", "")
    return ", ".join(sorted(methods))


def problem_refusal(exc: Exception) -> str:
    """An operator command's line for a refusal (core.cli.run_command): the problem's type and
    what it says, never a stack."""
    if not isinstance(exc, ProblemError):
        return f"[red]refused[/red]: {type(exc).__name__}"
    return f"[red]refused[/red] ({exc.slug}): {exc.detail or exc.title}"


# What an operator command of a service refuses with: any of its problems.
PROBLEM_REFUSALS: dict[type[Exception], Callable[[Exception], str]] = {ProblemError: problem_refusal}
