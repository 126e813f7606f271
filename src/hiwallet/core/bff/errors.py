"""A BFF's answer to an unexpected error: its own error page (HTML, in the reader's language),
not the services' problem+json (core.http's edge answers a JSON 500 to what nothing handled).

The middleware sits inside the edge (``create_app`` keeps the edge outermost): it records the
error where the edge's log line of the 5xx finds it (one traceback, the request id) and answers
the page, with the security headers of the middlewares outside it. An error after the answer
started cannot become a page: it goes on to the edge, which closes the connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hiwallet.core.http.edge import ERROR_KEY

__all__ = ["ErrorPage"]

log = structlog.get_logger(__name__)

PageRenderer = Callable[[Request], Awaitable[Response]]


class ErrorPage:
    def __init__(self, app: ASGIApp, *, render: PageRenderer) -> None:
        self.app = app
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:
                raise
            scope[ERROR_KEY] = exc
            try:
                page = await self.render(Request(scope))
            except Exception:
                # The page itself failed (a template's error): the edge's JSON 500 then, and its
                # log line of the original error.
                log.exception("the error page failed")
                raise exc from None
            await page(scope, receive, send)
