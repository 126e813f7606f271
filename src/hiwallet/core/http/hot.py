"""The hot lane: the hottest routes, served ahead of the framework's stack.

A request for one of them (its method, and its path exactly or, for a route with one id
segment such as ``/v1/wallets/{wallet_id}``, the path with any one segment there) passes the
same edge as every request (request id, body limit, error answer and log, metrics, access line),
then goes straight to its LeanRoute's endpoint (the id in ``request.path_params``, as the router
sets it), and an error it raises is answered by the app's own handler for it, as the stack
would. Every other request goes down the stack.

Why: the stack's layers (Starlette's and FastAPI's error, telemetry and body-limit middleware,
the router's matching over every route, two exit stacks per request) took about 30 µs of CPU
per transfer (bench/: a bare endpoint answered in 64 µs through them and in about 30 µs by
uvicorn alone), a sixth of wallet-api's CPU per transfer.

What the lane skips must not matter, so an app that would make it matter does not start
(:func:`check_hot_routes`, when the app builds its stack): a hot route that is not a LeanRoute,
that the app does not serve at the same path, or that declares anything (a dependency or a
parameter, on any level); or a middleware besides the edge, which the lane would skip. A route
with an id segment must have exactly one, a whole segment of the plain ``{name}`` form (what the
lane matches is then what the router's ``[^/]+`` matches), and no other route the app serves
for one of its methods may match a path it matches (the lane would take that route's requests,
whatever the router's order): e.g. a ``GET /v1/wallets/by-number`` beside a hot ``GET
/v1/wallets/{wallet_id}`` is refused.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Collection
from typing import NamedTuple

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp, Receive, Scope, Send

from hiwallet.core.http.lean import LeanRoute, LeanRouteError


def _name(route: object) -> str:
    methods = " ".join(sorted(getattr(route, "methods", None) or ()))
    return f"{methods} {getattr(route, 'path', route)}".strip()


# A path with one id segment: literal segments around one whole ``{name}`` (or ``{name:str}``,
# the same convertor) segment.
_ID_PATH = re.compile(
    r"^(?P<before>(?:/[^/{}]+)*/)\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::str)?\}(?P<after>(?:/[^/{}]+)*)$"
)


class _IdPath(NamedTuple):
    """A hot path with one id segment: the request's path is ``before`` + the id + ``after``."""

    before: str
    name: str
    after: str
    route: LeanRoute


def _id_path(route: LeanRoute) -> _IdPath | None:
    """The route's id segment, None for an exact path; LeanRouteError for any other template."""
    if "{" not in route.path and "}" not in route.path:
        return None
    found = _ID_PATH.match(route.path)
    if found is None:
        raise LeanRouteError(
            f"{_name(route)}: a hot route's path is exact or has one id segment of the form "
            "/literal/{name}/literal (no convertor, no other parameter)"
        )
    return _IdPath(found["before"], found["name"], found["after"], route)


def _may_match_the_same(hot: _IdPath, other: object) -> bool:
    """Whether a path the hot route matches may be matched by ``other`` too. Conservatively: a
    segment of ``other`` that holds a parameter is taken to match any segment, one with a
    ``:path`` parameter any rest of the path, and a route without methods (a mount) any path
    under its own."""
    path = getattr(other, "path", None)
    if not isinstance(path, str):
        return True
    ours = [*hot.before[:-1].split("/"), None, *hot.after.split("/")[1:]]  # None: the id's segment
    theirs = path.split("/")
    prefix_only = getattr(other, "methods", None) is None
    for n, segment in enumerate(theirs):
        if ":path}" in segment:
            return True  # the rest of any path, from here on
        if n >= len(ours):
            return False
        if "{" not in segment and ours[n] is not None and segment != ours[n]:
            return False
    return prefix_only or len(theirs) == len(ours)


def check_hot_routes(app: FastAPI, hot: Collection[object], edge: type) -> None:
    """Refuse (``LeanRouteError``, naming the route) what the hot lane would serve wrongly."""
    contexts = list(iter_route_contexts(app.router.routes))
    served = {id(c.original_route): c for c in contexts}
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
        id_path = _id_path(route)
        if id_path is not None:
            for other in contexts:
                if other.original_route is route and other.path == route.path:
                    continue
                methods = other.methods
                if (methods is None or set(methods) & set(route.methods or ())) and _may_match_the_same(
                    id_path, other
                ):
                    raise LeanRouteError(
                        f"{_name(route)}: another route the app serves, {_name(other)}, may match a "
                        "path this hot route matches, and the hot lane would take its requests"
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
        self.routes: dict[tuple[str, str], LeanRoute] = {}
        self.id_paths: dict[str, list[_IdPath]] = {}
        for route in hot:
            id_path = _id_path(route)
            for method in route.methods or ():
                if id_path is None:
                    self.routes[method, route.path] = route
                else:
                    self.id_paths.setdefault(method, []).append(id_path)
        self.edge = edge(self._serve)

    def _match(self, method: str, path: str) -> tuple[LeanRoute, dict[str, str] | None] | None:
        route = self.routes.get((method, path))
        if route is not None:
            return route, None
        for found in self.id_paths.get(method, ()):
            # The id: one whole, non-empty segment between the literal parts, as the router's
            # "[^/]+" for "{name}" takes it.
            end = len(path) - len(found.after)
            if (
                end > len(found.before)
                and path.startswith(found.before)
                and path.endswith(found.after)
                and "/" not in path[len(found.before) : end]
            ):
                return found.route, {found.name: path[len(found.before) : end]}
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match = self._match(scope["method"], scope["path"])
            if match is not None:
                scope["hiwallet.hot"] = match
                await self.edge(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        route, params = scope.pop("hiwallet.hot")
        scope["route"] = route  # as the router sets it: the metrics' label
        if params is not None:
            scope["path_params"] = params  # as the router sets them
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
