"""What tracing costs while it is off (the default), and on: in-process, no network.

    python bench/tracing_off_cost.py [--requests 50000] [--rounds 7] [--on]

Three paths, each the best of several rounds, in µs:

- ``request_us``: a hot route (as POST /v1/transfers is served) through raw ASGI, access line
  off (bench/access_log_cost.py's set-up);
- ``outbox_row_us``: an outbox row built (core.outbox.outbox_row), as every message written;
- ``log_line_us``: one structlog line (to /dev/null).

Before/after: run it with this tree and with another's sources first on the path (e.g.
``PYTHONPATH=/work/main/src``): the script uses nothing that tree lacks. ``--on`` installs an SDK
provider whose spans go nowhere (a sampler of none would skip the work) to show the cost on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import orjson
import structlog
from fastapi import APIRouter, Request, Response

from hiwallet.core.broker import OutgoingMessage
from hiwallet.core.http import FastJSONResponse, LeanRoute, create_app
from hiwallet.core.logging import configure_logging
from hiwallet.core.outbox import outbox_row

sys.path.insert(0, os.path.dirname(__file__))
from access_log_cost import SCOPE


def build() -> Any:
    router = APIRouter(route_class=LeanRoute)

    @router.post("/v1/transfers")
    async def transfer(request: Request) -> Response:
        return FastJSONResponse({"id": "t"}, status_code=201)

    app = create_app("bench", access_log=False, hot_routes=router.routes)
    app.include_router(router)
    return app


async def requests_us(app: Any, n: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    started = time.perf_counter()
    for _ in range(n):
        await app(dict(SCOPE), receive, send)
    return (time.perf_counter() - started) / n * 1e6


MESSAGE = OutgoingMessage(
    message_id="m", exchange="x", routing_key="k", type="T", body=orjson.dumps({"a": 1}), correlation_id="c"
)


def outbox_us(n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        outbox_row(MESSAGE)
    return (time.perf_counter() - started) / n * 1e6


def log_us(n: int) -> float:
    log = structlog.get_logger("bench")
    started = time.perf_counter()
    for _ in range(n):
        log.info("bench line", n=1)
    return (time.perf_counter() - started) / n * 1e6


def install_on() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from hiwallet.core import tracing

    class Nowhere(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Nowhere()))
    tracing.install(provider)


async def main(n: int, rounds: int) -> dict[str, float]:
    app = build()
    await requests_us(app, 1000)  # build the stack, warm up
    best = {"request_us": float("inf"), "outbox_row_us": float("inf"), "log_line_us": float("inf")}
    for _ in range(rounds):
        best["request_us"] = min(best["request_us"], await requests_us(app, n))
        best["outbox_row_us"] = min(best["outbox_row_us"], outbox_us(n))
        best["log_line_us"] = min(best["log_line_us"], log_us(n // 5))
    return {k: round(v, 3) for k, v in best.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--on", action="store_true")
    args = parser.parse_args()
    configure_logging("bench", log_file=None)
    if args.on:
        install_on()
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the lines go nowhere: their cost, not a terminal's)
    print(json.dumps(asyncio.run(main(args.requests, args.rounds))), file=sys.stdout)
