"""What the edge's access line costs per request: a hot route (as POST /v1/transfers is served,
ahead of the stack) called in-process through raw ASGI, with the access line on and off.

    python bench/access_log_cost.py [--requests 50000] > /dev/null 2> /tmp/access.jsonl

The lines go where stderr goes (a file, as in production under a supervisor or a container
runtime); the figure is the difference of the best of several rounds, in µs per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from fastapi import APIRouter, Request, Response

from hiwallet.core.http import FastJSONResponse, LeanRoute, create_app
from hiwallet.core.logging import configure_logging


def build(access_log: bool) -> Any:
    router = APIRouter(route_class=LeanRoute)

    @router.post("/v1/transfers")
    async def transfer(request: Request) -> Response:
        return FastJSONResponse({"id": "t"}, status_code=201)

    app = create_app("bench", access_log=access_log, hot_routes=router.routes)
    app.include_router(router)
    return app


SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "POST",
    "scheme": "http",
    "path": "/v1/transfers",
    "raw_path": b"/v1/transfers",
    "query_string": b"",
    "root_path": "",
    "headers": [
        (b"host", b"127.0.0.1:8000"),
        (b"authorization", b"Bearer x"),
        (b"idempotency-key", b"k"),
        (b"content-type", b"application/json"),
        (b"content-length", b"2"),
    ],
    "client": ("127.0.0.1", 5000),
    "server": ("127.0.0.1", 8000),
}


async def run(app: Any, requests: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    started = time.perf_counter()
    for _ in range(requests):
        await app(dict(SCOPE), receive, send)
    return (time.perf_counter() - started) / requests * 1e6


async def main(requests: int, rounds: int) -> dict[str, float]:
    apps = {on: build(on) for on in (False, True)}
    for app in apps.values():
        await run(app, 1000)  # build the stack, warm up
    best = {on: float("inf") for on in apps}
    for _ in range(rounds):
        for on, app in apps.items():
            best[on] = min(best[on], await run(app, requests))
    return {
        "us_per_request_without": round(best[False], 2),
        "us_per_request_with": round(best[True], 2),
        "access_line_us": round(best[True] - best[False], 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    configure_logging("bench")
    print(json.dumps(asyncio.run(main(args.requests, args.rounds))), file=sys.stdout)
