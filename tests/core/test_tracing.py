"""core.tracing: one trace from an HTTP request through another service's HTTP, a database
query, and a message written to the outbox, relayed and consumed; the log lines carry its ids.
Spans are kept by the SDK's in-memory exporter; the services are real (uvicorn, PostgreSQL,
RabbitMQ), as in the spine's tests."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from hiwallet.core import tracing
from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.consumer import IncomingMessage
from hiwallet.core.http import create_app
from hiwallet.core.ids import new_id
from hiwallet.core.outbox import enqueue
from tests.core import spine
from tests.core.test_consumer import Effects, _consumer, _consuming, _pool
from tests.core.test_outbox import _relay, _running
from tests.servers import serve, stop
from tests.waiting import until


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


def _one(finished: tuple[ReadableSpan, ...], name: str, kind: SpanKind) -> ReadableSpan:
    found = [s for s in finished if s.name == name and s.kind == kind]
    assert len(found) == 1, [(s.name, s.kind) for s in finished]
    return found[0]


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _logged(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_off_by_default_no_provider_and_nothing_traced() -> None:
    # No endpoint (the tests' settings): configure_tracing installs nothing.
    assert tracing.configure_tracing("tests", None) is False
    assert tracing.STATE.tracer is None
    assert tracing.current_ids() is None
    with pytest.raises(ValueError, match="http"):
        tracing.configure_tracing("tests", "collector:4318")  # misconfigured: refuses to start
    assert tracing.STATE.tracer is None


async def test_a_request_calling_another_service_and_the_database_is_one_trace(
    spans: InMemorySpanExporter, spine_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    inner = create_app("inner")

    @inner.get("/inner")
    async def inner_route() -> dict[str, str]:
        structlog.get_logger("test").info("inner handled")
        return {"ok": "yes"}

    inner_url, inner_server, inner_thread = serve(inner, "inner")
    outer = create_app("outer")
    async with _pool(spine_db) as pool, httpx.AsyncClient(base_url=inner_url, timeout=5) as upstream:

        @outer.get("/outer/{thing}")
        async def outer_route(thing: str) -> dict[str, object]:
            structlog.get_logger("test").info("outer handling")
            value = await pool.fetchval("SELECT 1")
            answer = await upstream.get("/inner")
            return {"value": value, "inner": answer.json()}

        try:
            capsys.readouterr()
            transport = httpx.ASGITransport(app=outer)
            async with httpx.AsyncClient(transport=transport, base_url="http://outer") as client:
                response = await client.get("/outer/x", headers={"x-request-id": "req-traced"})
            assert response.status_code == 200, response.text
            await until(lambda: any(s.name == "GET /inner" for s in spans.get_finished_spans()))
        finally:
            stop(inner_server, inner_thread)
    finished = spans.get_finished_spans()
    test_client = [s for s in finished if s.kind == SpanKind.CLIENT and _parent_of(s) is None]
    outer_server = _one(finished, "GET /outer/{thing}", SpanKind.SERVER)
    query = _one(finished, "SELECT", SpanKind.CLIENT)
    outer_client = next(
        s
        for s in finished
        if s.kind == SpanKind.CLIENT and _parent_of(s) == outer_server.context.span_id and s.name == "GET"
    )
    inner_server = _one(finished, "GET /inner", SpanKind.SERVER)
    # The chain: the test's call, the outer request, its query and its call, the inner request.
    assert len(test_client) == 1
    assert _parent_of(outer_server) == test_client[0].context.span_id
    assert _parent_of(query) == outer_server.context.span_id
    assert query.attributes is not None and query.attributes["db.query.text"] == "SELECT 1"
    assert _parent_of(inner_server) == outer_client.context.span_id
    assert {s.context.trace_id for s in finished} == {outer_server.context.trace_id}
    assert inner_server.attributes is not None and inner_server.attributes["http.response.status_code"] == 200
    # No path on a client span (ids, addresses): the host and the method.
    assert outer_client.attributes is not None and "url.full" not in outer_client.attributes
    # The log lines carry the trace and the span beside the request id.
    trace_id = format(outer_server.context.trace_id, "032x")
    lines = _logged(capsys.readouterr().err)
    handling = next(line for line in lines if line.get("event") == "outer handling")
    assert handling["trace_id"] == trace_id
    assert handling["span_id"] == format(outer_server.context.span_id, "016x")
    assert handling["request_id"] == "req-traced"
    inner_line = next(line for line in lines if line.get("event") == "inner handled")
    assert inner_line["trace_id"] == trace_id
    assert inner_line["span_id"] == format(inner_server.context.span_id, "016x")
    access = [
        line for line in lines if line.get("event") == "request" and line.get("route") == "/outer/{thing}"
    ]
    assert access and access[0]["trace_id"] == trace_id


async def test_a_message_through_the_outbox_relay_and_consumer_continues_the_trace(
    spans: InMemorySpanExporter, spine_db: str, broker: Broker, names: spine.Names
) -> None:
    assert tracing.STATE.tracer is not None
    message = OutgoingMessage(
        message_id=new_id(),
        exchange=names.exchange,
        routing_key="0421:w:1",
        type="TopupRecorded",
        body=orjson.dumps({"n": 1}),
    )
    with tracing.STATE.tracer.start_as_current_span("request", kind=SpanKind.SERVER) as request:
        conn = await spine.owner_connect(spine_db)
        try:
            async with conn.transaction():
                await enqueue(conn, message, table=spine.OUTBOX)
            stored = await conn.fetchval(
                f"SELECT headers FROM {spine.OUTBOX} WHERE message_id = $1", message.message_id
            )
        finally:
            await conn.close()
    # Stored with the row at write time: the producer's context, not the relay's.
    producer = _one(spans.get_finished_spans(), f"{names.exchange} publish", SpanKind.PRODUCER)
    assert _parent_of(producer) == request.get_span_context().span_id
    traceparent = orjson.loads(stored)["traceparent"]
    assert traceparent.startswith(f"00-{producer.context.trace_id:032x}-{producer.context.span_id:016x}-")

    effects = Effects()
    relay = _relay(spine_db, broker)
    async with _pool(spine_db) as pool, _running(relay):
        consumer = _consumer(broker, pool, names, effects)
        async with _consuming(consumer):
            await until(lambda: effects.calls == [message.message_id], what="the message consumed")
            await until(lambda: any(s.kind == SpanKind.CONSUMER for s in spans.get_finished_spans()))
    finished = spans.get_finished_spans()
    queue = next(q for q in names.queues if any(s.name == f"{q} process" for s in finished))
    consumed = _one(finished, f"{queue} process", SpanKind.CONSUMER)
    assert _parent_of(consumed) == producer.context.span_id
    assert (
        consumed.attributes is not None and consumed.attributes["messaging.message.id"] == message.message_id
    )
    # The handler's statement is a child of the consumer's span; the relay made no span at all.
    insert = _one(finished, "INSERT", SpanKind.CLIENT)
    assert _parent_of(insert) == consumed.context.span_id
    assert {s.context.trace_id for s in finished} == {request.get_span_context().trace_id}
    assert [s.name for s in finished if s.kind == SpanKind.PRODUCER] == [producer.name]


async def test_without_a_span_the_database_and_publishing_make_no_trace(
    spans: InMemorySpanExporter, spine_db: str, broker: Broker, names: spine.Names
) -> None:
    # The relay's and the jobs' polling: no parent, no span (and no traceparent to publish).
    conn = await spine.owner_connect(spine_db)
    try:
        await conn.fetchval("SELECT 1")
    finally:
        await conn.close()
    message = OutgoingMessage(
        message_id=new_id(), exchange=names.exchange, routing_key="k", type="T", body=b"{}"
    )
    await broker.publish([message])
    # A supervisor's probes and the metrics scrape make no trace either.
    transport = httpx.ASGITransport(app=create_app("probed"))
    async with httpx.AsyncClient(transport=transport, base_url="http://probed") as client:
        for path in ("/health", "/ready", "/metrics"):
            assert (await client.get(path)).status_code == 200
    assert [s.kind for s in spans.get_finished_spans()] == [SpanKind.CLIENT] * 3  # the test's own calls


async def test_tracing_uninstalled_the_hooks_pass_through(spine_db: str) -> None:
    tracing.uninstall()
    app = create_app("plain")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://plain") as client:
        assert (await client.get("/health")).status_code == 200
    conn: asyncpg.Connection = await spine.owner_connect(spine_db)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
    assert tracing.current_ids() is None


async def test_a_batch_continues_each_message_s_own_trace(
    spans: InMemorySpanExporter, spine_db: str, broker: Broker, names: spine.Names
) -> None:
    """Batch mode: a CONSUMER span per message (its producer's child), the batch's work under a
    batch span linked to them; what the handler writes to the outbox under a message's
    correlation id, and what it does inside tracing.continuing, is in that message's trace."""
    tracer = tracing.STATE.tracer
    assert tracer is not None
    sent: dict[str, int] = {}  # correlation id -> the trace it was published in
    for who in ("a", "b"):
        with tracer.start_as_current_span(f"request {who}") as request:
            message = OutgoingMessage(
                message_id=new_id(),
                exchange=names.exchange,
                routing_key="0421:w:batch",
                type="T",
                body=orjson.dumps({"n": 1}),
                correlation_id=f"saga-{who}",
            )
            await broker.publish([message])  # published directly: its producer span
            sent[f"saga-{who}"] = request.get_span_context().trace_id
    continued: dict[str, int] = {}

    async def batch(conn: asyncpg.Connection, messages: Sequence[IncomingMessage]) -> list[Mapping[str, Any]]:
        for m in messages:
            answer = OutgoingMessage(
                message_id=new_id(),
                exchange=names.exchange,
                routing_key="answers",
                type="Answer",
                body=b"{}",
                correlation_id=m.correlation_id,
            )
            await enqueue(conn, answer, table=spine.OUTBOX)
            with tracing.continuing(m.correlation_id):
                ids = tracing.current_ids()
                assert ids is not None and m.correlation_id is not None
                continued[m.correlation_id] = int(ids[0], 16)
        return [{} for _ in messages]

    async def single(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        raise AssertionError("the batch path handles these")

    async with _pool(spine_db) as pool:
        consumer = _consumer(broker, pool, names, single, batch_handler=batch, max_batch=10, prefetch=10)
        async with _consuming(consumer):
            await until(lambda: len(continued) == 2, what="both messages handled")
    finished = spans.get_finished_spans()
    assert continued == sent
    producers = {s.context.span_id: s for s in finished if s.kind == SpanKind.PRODUCER}
    consumed = [s for s in finished if s.kind == SpanKind.CONSUMER and not s.name.endswith("batch")]
    assert len(consumed) == 2
    for span in consumed:  # each its own producer's child, in its own trace
        assert span.parent is not None and span.parent.span_id in producers
        assert producers[span.parent.span_id].context.trace_id == span.context.trace_id
    # The answers written in the batch: each a child of its message's consumer span.
    answers = [
        s
        for s in producers.values()
        if s.attributes and s.attributes.get("messaging.rabbitmq.destination.routing_key") == "answers"
    ]
    assert sorted(_parent_of(s) or 0 for s in answers) == sorted(s.context.span_id for s in consumed)
    batches = [s for s in finished if s.name.endswith("process batch")]
    assert batches and sum(len(b.links) for b in batches) == 2
