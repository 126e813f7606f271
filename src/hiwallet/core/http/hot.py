"""The hot lane: the hottest routes, served ahead of the framework's stack.

A request for one of them (method and path exactly) passes the same edge as every request
(request id, body limit, error answer and log, metrics, access line), then goes straight to its
LeanRoute's endpoint, and an error it raises is answered by the app's own handler for it, as the
stack would. Every other request goes down the stack.

Why: the stack's layers (Starlette's and FastAPI's error, telemetry and body-limit middleware,
the router's matching over every route, two exit stacks per request) took about 30 µs of CPU
per transfer (bench/: a bare endpoint answered in 64 µs through them and in about 30 µs by
uvicorn alone), a sixth of wallet-api's CPU per transfer.

What the lane skips must not matter, so an app that would make it matter does not start
(:func:`check_hot_routes`, when the app builds its stack): a hot route that is not a LeanRoute,
that the app does not serve at the same path, or that declares anything (a dependency or a
parameter, on any level); or a middleware besides the edge, which the lane would skip.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp, Receive, Scope, Send

from hiwallet.core.http.lean import LeanRoute, LeanRouteError


def _name(route: object) -> str:
    methods = " ".join(sorted(getattr(route, "methods", None) or ()))
    return f"{methods} {getattr(route, 'path', route)}".strip()


def check_hot_routes(app: FastAPI, hot: Collection[object], edge: type) -> None:
    """Refuse (``LeanRouteError``, naming the route) what the hot lane would serve wrongly."""
    served = {id(c.original_route): c for c in iter_route_contexts(app.router.routes)}
    for route in hot:
        if not isinstance(route, LeanRoute):
            raise LeanRouteError(f"{_name(route)}: a hot route must be a LeanRoute")
        context = served.get(id(route))
        if context is None or context.path != route.path:
            raise LeanRouteError(
                f"{_name(route)}: a hot route must be served by the app at its own path "
                f"(included without another prefix); the app serves it at "
                f"{context.path if context is not None else 'no path'}"
            )
    added: list[object] = [m.cls for m in app.user_middleware]
    skipped = [cls for cls in added if cls is not edge]
    if hot and skipped:
        names = ", ".join(getattr(cls, "__name__", repr(cls)) for cls in skipped)
        raise LeanRouteError(
            f"{', '.join(_name(r) for r in hot)}: hot routes are served ahead of the middleware "
            f"stack, which would skip {names}; add no middleware to an app with hot routes"
        )


class HotRoutes:
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
        raise exc  # none: the edge answers it as an internal error
