"""The door's read of a forwarded request's body (core.edge.door._body): from the ASGI receive
channel by one loop, kept in the request's scope for a second read, a client gone before the end
a ClientDisconnect, and, behind the edge, a chunked body past the limit a 413."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect
from starlette.types import Message

from hiwallet.core.edge.door import _body
from hiwallet.core.http import LeanRoute, create_app


def _request(*messages: Message) -> tuple[Request, list[Message]]:
    """A request whose receive channel answers ``messages`` in turn (and records what is left)."""
    left = list(messages)

    async def receive() -> Message:
        return left.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    return Request(scope, receive), left


async def test_a_body_in_chunks_is_read_whole_and_kept_for_a_second_read() -> None:
    request, left = _request(
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
        {"type": "http.disconnect"},  # never received: the body ended before
    )
    assert await _body(request) == b"abcd"
    assert await _body(request) == b"abcd"  # kept: nothing received again
    assert left == [{"type": "http.disconnect"}]


async def test_an_empty_body_is_empty_bytes() -> None:
    request, _ = _request({"type": "http.request"})
    assert await _body(request) == b""
    assert await _body(request) == b""


async def test_a_client_gone_before_the_end_is_a_client_disconnect() -> None:
    request, _ = _request(
        {"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}
    )
    with pytest.raises(ClientDisconnect):
        await _body(request)


def _app() -> FastAPI:
    router = APIRouter(route_class=LeanRoute)

    @router.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await _body(request), media_type="application/octet-stream")

    app: FastAPI = create_app("body-test", max_body_bytes=1_000, hot_routes=router.routes)
    app.include_router(router)
    return app


async def _chunks(n: int) -> AsyncIterator[bytes]:
    for i in range(n):
        yield bytes([65 + i]) * 200


@pytest.mark.parametrize(("chunks", "status"), [(4, 200), (6, 413)], ids=["within the limit", "past it"])
async def test_a_chunked_body_behind_the_edge(chunks: int, status: int) -> None:
    transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post("/echo", content=_chunks(chunks))
    assert answer.status_code == status
    if status == 200:
        assert answer.content == b"".join(bytes([65 + i]) * 200 for i in range(chunks))
    else:
        assert answer.json()["type"] == "https://hiwallet.dev/problems/payload-too-large"
