"""The front door: one object per front API process, holding its token check, its rate limiter
and its upstreams, and the one way a route forwards (:meth:`FrontDoor.forward`).

A front API's route only says what it maps to::

    @router.get("/v1/wallets/{wallet_id}", ...)
    async def wallet(request: Request) -> Response:
        wallet = segment(request, "wallet_id")
        return await door(request).forward(request, "wallet-api", f"/v1/wallets/{wallet}")

In order: the caller (the token: 401/403, :mod:`.tokens`) or, on an anonymous route, the
client's address; its rate limit (429, :mod:`.limits`); the call (503 when the upstream is
away, :mod:`.forward`); the answer, reshaped when the route asks (to drop what the client must
not see), with the rate-limit headers on every answer, refusals included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from hiwallet.core.auth import Principal, TokenVerifier
from hiwallet.core.edge.forward import Upstream, UpstreamTimeouts, relayed
from hiwallet.core.edge.limits import RateDecision, RateLimiter, RatePolicy
from hiwallet.core.edge.settings import EdgeSettings
from hiwallet.core.edge.tokens import CallerKind, FrontTokens
from hiwallet.core.http import LeanRoute, NotFound, ProblemError
from hiwallet.core.service import Runtime, ServiceSpec

__all__ = ["FrontDoor", "Reshape", "door", "front_spec", "query", "segment"]

# A 2xx JSON answer's body, as the front API shows it (e.g. without internal ids).
Reshape = Callable[[Any], Any]
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class FrontDoor:
    def __init__(
        self,
        name: str,
        settings: EdgeSettings,
        upstreams: Mapping[str, str],
        caller: CallerKind,
        app: FastAPI,
        *,
        verifier: TokenVerifier | None = None,
    ) -> None:
        self.name = name
        self.tokens = FrontTokens(
            settings.issuer_base, settings.realm, name, settings.internal_audience, caller, verifier=verifier
        )
        counters = app.state.edge_counters
        self.limiter = RateLimiter(
            settings.redis_url.get_secret_value(),
            prefix=f"hiwallet:ratelimit:{name}",
            timeout_s=settings.redis_timeout_s,
            retry_s=settings.redis_retry_s,
            counters=counters,
        )
        self.subject_policy = RatePolicy("subject", settings.rate_limit_subject, settings.rate_limit_window_s)
        self.address_policy = RatePolicy("address", settings.rate_limit_address, settings.rate_limit_window_s)
        timeouts = UpstreamTimeouts(
            settings.upstream_connect_timeout_s,
            settings.upstream_read_timeout_s,
            settings.upstream_pool_timeout_s,
        )
        self.upstreams = {
            upstream: Upstream(
                upstream,
                url,
                timeouts,
                max_connections=settings.upstream_max_connections,
                max_response_bytes=settings.upstream_max_response_bytes,
                retry_after_s=settings.upstream_retry_after_s,
                failures=counters.upstream_failures,
            )
            for upstream, url in upstreams.items()
        }

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()
        await self.limiter.aclose()
        await self.tokens.aclose()

    async def caller(self, request: Request) -> tuple[Principal, RateDecision]:
        """The verified caller and its rate limit (429 past it)."""
        principal = await self.tokens.verify(request)
        decision = await self.limiter.check(self.subject_policy, principal.subject)
        self.limiter.enforce(decision)
        return principal, decision

    async def anonymous(self, request: Request) -> RateDecision:
        """The client's address's rate limit (429 past it), for routes without a token."""
        address = request.client.host if request.client is not None else "unknown"
        decision = await self.limiter.check(self.address_policy, address)
        self.limiter.enforce(decision)
        return decision

    async def forward(
        self,
        request: Request,
        upstream: str,
        path: str,
        *,
        anonymous: bool = False,
        method: str | None = None,
        params: Mapping[str, str] | None = None,
        reshape: Reshape | None = None,
    ) -> Response:
        if anonymous:
            decision = await self.anonymous(request)
        else:
            _, decision = await self.caller(request)
        method = method or request.method
        body = await _body(request) if method in _WITH_BODY else None
        try:
            answer = await self.upstreams[upstream].call(request, method, path, params=params, body=body)
        except ProblemError as exc:
            exc.headers = {**decision.headers, **exc.headers}
            raise
        content = None
        if reshape is not None and 200 <= answer.status < 300:
            content = orjson.dumps(reshape(orjson.loads(answer.content)))
        return relayed(answer, content, raw_extra=decision.raw_headers)


# Where the door keeps the body it read, in the request's scope (per request, as Starlette keeps
# its state there): a second read answers it without receiving again.
_BODY = "hiwallet.edge.body"


async def _body(request: Request) -> bytes:
    """The request's body, read from its ASGI receive channel by one loop and kept in its scope:
    the door is the one reader of a forwarded request's body (a front API's routes read none).
    Not ``request.body()``: its stream's async generator cost a few µs a forwarded request
    (docs/performance.md, "the door's own path"). Past the edge's limit, receiving raises
    PayloadTooLarge (413); a client gone before the end raises ClientDisconnect, as
    ``request.body()`` does."""
    scope = request.scope
    kept: bytes | None = scope.get(_BODY)
    if kept is not None:
        return kept
    receive = request.receive
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk: bytes = message.get("body", b"")
            if not message.get("more_body", False):
                body = b"".join((*chunks, chunk)) if chunks else chunk
                break
            chunks.append(chunk)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()
    scope[_BODY] = body
    return body


def door(request: Request) -> FrontDoor:
    """The front API's door (``app.state.door``, made at start)."""
    found: FrontDoor = request.app.state.door
    return found


def segment(request: Request, name: str) -> str:
    """A path parameter, safe to put in an upstream's path: percent-encoded, and ``.`` or
    ``..`` (which a URL's normalisation would turn into another path) 404, as an id that names
    nothing."""
    value = str(request.path_params[name])
    if value in (".", "..") or not value:
        raise NotFound("not found")
    return quote(value, safe="")


def query(request: Request, *names: str, rename: Mapping[str, str] | None = None) -> dict[str, str]:
    """The named query parameters the client sent (each once: the last), under the upstream's
    names (``rename``: front name -> upstream name); any other is not passed on."""
    rename = rename or {}
    return {rename.get(n, n): request.query_params[n] for n in names if n in request.query_params}


class _Counters:
    """The edge's Prometheus counters, in the app's registry (made once per app)."""

    def __init__(self, app: FastAPI) -> None:
        registry = app.state.metrics_registry
        self.upstream_failures = Upstream.failures_counter(registry)
        self.local_decisions, self.store_outages = RateLimiter.counters(registry)


def front_spec(
    name: str,
    settings: EdgeSettings,
    upstreams: Mapping[str, str],
    caller: CallerKind,
    routers: Sequence[APIRouter],
    *,
    openapi: Callable[[FastAPI], None] | None = None,
    verifier: TokenVerifier | None = None,
) -> ServiceSpec:
    """A front API, declared: no database, no broker, its door made at start and closed at
    stop, its routes (the lean ones without path parameters on the hot lane).

    ``/ready`` is the process itself: not its upstreams (an upstream away is answered 503 with
    Retry-After per request, which a client handles; a front API taken out of the load balancer
    would answer nothing at all) and not Redis (a local limit stands in for it)."""

    def metrics(app: FastAPI) -> None:
        app.state.edge_counters = _Counters(app)

    async def setup(rt: Runtime) -> None:
        front = rt.app.state.door = FrontDoor(name, settings, upstreams, caller, rt.app, verifier=verifier)
        rt.close(front.aclose)

    hot = [
        route
        for router in routers
        for route in router.routes
        if isinstance(route, LeanRoute) and "{" not in route.path
    ]
    return ServiceSpec(
        name,
        setup,
        routers=routers,
        hot_routes=hot,
        max_body_bytes=settings.max_body_bytes,
        metrics=metrics,
        openapi=openapi,
    )
