"""A front API's forwarding route, declared as data: where it is, where it leads, what the
document says of it. Most of a front API's routes only forward (:meth:`FrontDoor.forward`); each
was a decorated function of the same few lines, and the routes two front APIs both serve were
written twice. A :class:`Forwarding` holds one such route; :meth:`Forwarding.declare` puts it on
a router under a name (the operation's id and summary, as a function's name would), each
front API changing what it words its own way (its ``description``, as a docstring would say
it; its ``path``; a status, …) with keyword arguments::

    WALLET_BALANCE = Forwarding("GET", "/v1/wallets/{wallet_id}", "wallet-api", ...)
    WALLET_BALANCE.declare(router, "wallet", description="The balance.")

The route is lean (it takes the request alone); its upstream path's ``{name}`` fields are the
route's path parameters, each through :func:`segment` (a ``.`` or ``..`` is 404 before the
token is checked, as it was when each route computed its path first).
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from hiwallet.core.edge.document import answers, operation
from hiwallet.core.edge.door import Reshape, door, query, segment

__all__ = ["READ", "Forwarding", "reading"]

# What a read with a token answers besides its 200: no token, not its caller's, not found, too
# many requests, its upstream away (or failed: 502).
READ = answers(401, 403, 404, 429, 503)


@dataclass(frozen=True)
class Forwarding:
    """One forwarding route: ``method path`` → ``upstream`` at ``target`` (``path`` when
    ``None``), described by ``description`` (cleaned as a docstring is), passing on the query
    parameters named in ``params``, reshaping a 2xx answer with ``reshape``; ``anonymous``
    routes check no token (the client's address is rate-limited). ``parameters`` and ``body``
    are what the document says (:func:`operation`); ``route`` is the rest of the router's
    arguments (``response_model``, ``status_code``, ``responses``, ``tags``, …)."""

    method: str
    path: str
    upstream: str
    target: str | None = None
    description: str | None = None
    params: Sequence[str] = ()
    reshape: Reshape | None = None
    anonymous: bool = False
    parameters: Sequence[dict[str, Any]] = ()
    body: str | None = None
    route: dict[str, Any] = field(default_factory=dict)

    def declare(self, router: APIRouter, name: str, **changes: Any) -> None:
        """On ``router``, as ``name``, after ``changes`` (this declaration's fields; any other
        is a router argument, added to ``route``)."""
        own = {key: changes.pop(key) for key in list(changes) if key not in _FIELDS}
        spec = dataclasses.replace(self, **changes, route={**self.route, **own})
        target = spec.target if spec.target is not None else spec.path
        segments = [part for _, part, _, _ in string.Formatter().parse(target) if part]
        upstream, params, reshape, anonymous = spec.upstream, tuple(spec.params), spec.reshape, spec.anonymous
        # A target without path parameters is one path, made once.
        fixed = None if segments else target.format_map({})

        async def endpoint(request: Request) -> Response:
            # The path and the query first: a path that names nothing is 404 before any token.
            path = fixed
            if path is None:
                path = target.format_map({part: segment(request, part) for part in segments})
            passed = query(request, *params) if params else None
            return await door(request).forward(
                request, upstream, path, anonymous=anonymous, params=passed, reshape=reshape
            )

        endpoint.__name__ = endpoint.__qualname__ = name
        endpoint.__doc__ = spec.description
        router.add_api_route(
            spec.path,
            endpoint,
            methods=[spec.method],
            name=name,
            openapi_extra=operation(parameters=spec.parameters, body=spec.body, anonymous=anonymous),
            **spec.route,
        )


_FIELDS = frozenset(f.name for f in dataclasses.fields(Forwarding))


def reading(path: str, upstream: str, response_model: Any, tag: str, **fields: Any) -> Forwarding:
    """A read with a token (``GET path`` → ``upstream``), answering ``response_model`` or
    :data:`READ`'s problems, under the document's ``tag``; ``fields`` are the rest."""
    route = {"response_model": response_model, "responses": READ, "tags": [tag]}
    return Forwarding("GET", path, upstream, route=route, **fields)
