"""An OTLP/HTTP trace collector for the end-to-end tests: the processes started with
``HIWALLET_OTEL_ENDPOINT`` at its URL export their spans to it (core.tracing); it keeps them,
decoded, for the test to read."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.servers import serve, stop

# The processes' batch exporter waits this long (ms) before sending (the SDK's default is 5 s).
SCHEDULE_DELAY_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "200"}


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    kind: int  # the protocol's: 2 server, 3 client, 4 producer, 5 consumer
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Collector:
    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        self.url = ""

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    async def _export(self, request: Request) -> Response:
        exported = ExportTraceServiceRequest.FromString(await request.body())
        got: list[Span] = []
        for resource_spans in exported.resource_spans:
            service = next(
                (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    attributes = {a.key: a.value.string_value or a.value.int_value for a in s.attributes}
                    got.append(
                        Span(
                            service,
                            s.name,
                            s.kind,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            attributes,
                        )
                    )
        with self._lock:
            self._spans.extend(got)
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/traces", self._export, methods=["POST"])])


@contextmanager
def collecting() -> Iterator[Collector]:
    collector = Collector()
    url, server, thread = serve(collector.app(), "otlp-collector")
    collector.url = url
    try:
        yield collector
    finally:
        stop(server, thread)
