"""A client-address allow-list: requests to the guarded paths from outside the configured
networks are refused (403 problem+json and one log line) before anything reads their body.

The address is ``scope["client"]``: the socket's peer, or the one uvicorn's proxy-header
middleware resolved from X-Forwarded-For when the process serves with ``proxy_headers`` (only
for a peer among its trusted proxies). It wraps the whole app, ahead of the hot lane
(``hot.HotRoutes``) too, so no route is served around it. Paths outside ``guarded`` (the
platform's /health, /ready and /metrics, asked from inside) pass unchecked.

An empty list of networks means "no restriction": :func:`allowlisted` then returns the app
unchanged (a laptop); production refuses to start with it empty (the settings'
``NON_EMPTY_IN_PRODUCTION``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network

import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from hiwallet.core.http.problems import Forbidden, problem_response

__all__ = ["ClientAllowlist", "ClientNetworks", "allowlisted"]

log = structlog.get_logger(__name__)

Network = IPv4Network | IPv6Network


@dataclass(frozen=True)
class ClientNetworks:
    """What a service restricts: the client ``networks`` it accepts on the paths that start with
    one of ``guarded`` (``("/",)``: every path)."""

    networks: tuple[Network, ...]
    guarded: tuple[str, ...]

    @classmethod
    def of(cls, networks: Sequence[Network | str], guarded: Sequence[str]) -> ClientNetworks:
        if not guarded or any(not p.startswith("/") for p in guarded):
            raise ValueError("guarded: one or more path prefixes, each starting with /")
        parsed = tuple(n if not isinstance(n, str) else ipaddress.ip_network(n) for n in networks)
        return cls(parsed, tuple(guarded))

    def allows(self, client: tuple[str, int] | list[object] | None) -> bool:
        if not client:
            return False
        try:
            address = ipaddress.ip_address(str(client[0]))
        except ValueError:
            return False
        # An IPv4 peer on a dual-stack socket arrives as ::ffff:a.b.c.d: the v4 address counts.
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


class ClientAllowlist:
    """The ASGI wrapper of :class:`ClientNetworks` for ``service``."""

    def __init__(self, app: ASGIApp, allowed: ClientNetworks, service: str) -> None:
        self.app = app
        self.allowed = allowed
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope.get("path", "")
            client = scope.get("client")
            if path.startswith(self.allowed.guarded) and not self.allowed.allows(client):
                # The address and the path only: nothing of the request's headers or body.
                log.warning(
                    "client address refused",
                    service=self.service,
                    client=str(client[0]) if client else None,
                    method=scope.get("method"),
                    path=path,
                )
                error = Forbidden("this endpoint is reachable only from the configured networks")
                await problem_response(error, path)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def allowlisted(app: ASGIApp, allowed: ClientNetworks | None, service: str) -> ASGIApp:
    """``app`` behind the allow-list, or unchanged when there is none (or it is empty)."""
    if allowed is None or not allowed.networks:
        return app
    return ClientAllowlist(app, allowed, service)
