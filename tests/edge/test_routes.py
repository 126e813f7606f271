"""core.edge.routes.Forwarding, in process: what a declared route forwards (its upstream path from
its path parameters, the query parameters it names, its reshape, anonymous or not), a path
segment that names nothing refused before the door is asked, and what the document says (the
name, the description, the parameters and body). The forwarding itself, with tokens, limits and
real upstreams, is test_forwarding.py's and test_behind.py's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from hiwallet.core.edge.document import path_param, query_param
from hiwallet.core.edge.routes import READ, Forwarding, reading
from hiwallet.core.http import LeanRoute, NotFound, ProblemError


class RecordingDoor:
    """Stands for the FrontDoor: records each forward and answers what it was asked."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def forward(
        self,
        request: Request,
        upstream: str,
        path: str,
        *,
        anonymous: bool = False,
        method: str | None = None,
        params: Mapping[str, str] | None = None,
        reshape: Any = None,
    ) -> Response:
        call = {"upstream": upstream, "path": path, "anonymous": anonymous, "params": params}
        self.calls.append(call)
        body = {"upstream": upstream, "path": path, "legs": [1]}
        return JSONResponse(reshape(body) if reshape is not None else body)


def _drop_legs(body: Any) -> Any:
    body.pop("legs", None)
    return body


ITEM = Forwarding(
    "GET",
    "/v1/things/{thing_id}/parts/{part_id}",
    "things-api",
    target="/v1/items/{thing_id}/pieces/{part_id}",
    description="""A part of a thing.

    Read from the things-api.""",
    params=("kind", "limit"),
    parameters=[path_param("thing_id"), path_param("part_id"), query_param("kind", {"type": "string"})],
    route={"responses": READ, "tags": ["things"]},
)


def _app() -> tuple[FastAPI, RecordingDoor]:
    router = APIRouter(route_class=LeanRoute)
    ITEM.declare(router, "part")
    ITEM.declare(router, "open_part", method="POST", path="/v1/open/{thing_id}/{part_id}", anonymous=True)
    reading("/v1/plain", "other-api", None, "plain", reshape=_drop_legs).declare(
        router, "plain", description="Plain.", body="PlainIn", status_code=201
    )
    app = FastAPI()
    app.include_router(router)
    door = app.state.door = RecordingDoor()

    async def problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return JSONResponse({"status": exc.status}, status_code=exc.status)

    app.add_exception_handler(NotFound, problem)
    return app, door


async def _get(app: FastAPI, method: str, url: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://front") as http:
        return await http.request(method, url)


async def test_the_route_forwards_to_its_target_with_the_named_query_parameters() -> None:
    app, door = _app()
    answer = await _get(app, "GET", "/v1/things/a%20b:c/parts/p1?kind=x&limit=3&other=no")
    assert answer.status_code == 200
    # the segments percent-encoded (core.edge.segment), only the named query parameters passed
    assert door.calls == [
        {
            "upstream": "things-api",
            "path": "/v1/items/a%20b%3Ac/pieces/p1",
            "anonymous": False,
            "params": {"kind": "x", "limit": "3"},
        }
    ]
    assert answer.json()["legs"] == [1]


async def test_a_changed_path_keeps_the_target_and_anonymous_checks_no_token() -> None:
    app, door = _app()
    answer = await _get(app, "POST", "/v1/open/t/p")
    assert answer.status_code == 200
    assert door.calls[0]["path"] == "/v1/items/t/pieces/p"
    assert door.calls[0]["anonymous"] is True
    assert door.calls[0]["params"] == {}


async def test_a_route_without_target_or_params_forwards_its_own_path_and_reshapes() -> None:
    app, door = _app()
    answer = await _get(app, "GET", "/v1/plain?kind=x")
    assert answer.json() == {"upstream": "other-api", "path": "/v1/plain"}
    assert door.calls[0]["params"] is None


async def test_a_dot_segment_is_404_before_the_door_is_asked() -> None:
    app, door = _app()
    # ``%2E%2E`` reaches the route as ``..`` (a client's library does not normalise it away)
    answer = await _get(app, "GET", "/v1/things/%2E%2E/parts/p1")
    assert answer.status_code == 404
    assert door.calls == []


def test_the_document_says_the_name_the_description_and_the_operation() -> None:
    app, _ = _app()
    paths = app.openapi()["paths"]
    part = paths["/v1/things/{thing_id}/parts/{part_id}"]["get"]
    assert part["operationId"] == "part_v1_things__thing_id__parts__part_id__get"
    assert part["summary"] == "Part"
    assert part["description"] == "A part of a thing.\n\nRead from the things-api."
    assert [p["name"] for p in part["parameters"]] == ["thing_id", "part_id", "kind"]
    assert part["security"] == [{"bearer": []}]
    assert part["tags"] == ["things"]
    assert set(part["responses"]) >= {"200", "401", "429", "502", "503"}
    opened = paths["/v1/open/{thing_id}/{part_id}"]["post"]
    assert opened["operationId"] == "open_part_v1_open__thing_id___part_id__post"
    assert opened["security"] == []
    plain = paths["/v1/plain"]["get"]
    assert "201" in plain["responses"]
    assert plain["tags"] == ["plain"]
    assert plain["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PlainIn"
    }
