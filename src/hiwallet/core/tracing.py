"""Traces (OpenTelemetry): one trace from a request at the door through the messages it causes.

Off unless configured: with no ``HIWALLET_OTEL_ENDPOINT`` no SDK provider is installed,
:data:`STATE.tracer` stays None, nothing is patched, and every hook below is one ``is None``
test on its path. Set (an OTLP/HTTP collector's base URL, e.g. ``http://127.0.0.1:4318``),
:func:`configure_tracing` (called by ``core.logging.configure_logging``, once per process)
installs a provider exporting in batches to ``<endpoint>/v1/traces``.

The spans (names and kinds):

- ``METHOD /route/{template}`` (SERVER): every HTTP request but the probes and the metrics
  scrape, at the edge (core.http.edge), continuing the caller's ``traceparent`` (W3C trace
  context) if it sent one;
- ``METHOD`` (CLIENT): every call of an ``httpx.AsyncClient`` (patched while tracing is on) and
  every call of the front APIs to their upstreams (core.edge.forward); the ``traceparent`` of
  the span goes with the request;
- ``SQL verb`` (CLIENT): each asyncpg query run inside a trace (never a root of its own: a
  relay's or a job's polling makes no traces);
- ``<exchange> publish`` (PRODUCER): a message written to an outbox or published directly,
  inside a trace. Its ``traceparent`` is stored with the message's headers at write time, so
  the relay publishes it with the writer's context, not its own;
- ``<queue> process`` (CONSUMER): each message consumed, its parent the producer's span; a
  batch handled in one transaction is ``<queue> process batch`` (linked to its messages'
  spans), and what the batch handler writes to the outbox continues the trace of the consumed
  message with the same correlation id (as does what it does inside :func:`continuing`).

Log lines written while a span is current carry ``trace_id`` and ``span_id``
(core.logging).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "STATE",
    "TRACEPARENT_HEADER",
    "TRACESTATE_HEADER",
    "active",
    "batch_consumer_spans",
    "client_span",
    "configure_tracing",
    "consumer_span",
    "continuing",
    "current_ids",
    "end_server_span",
    "inject_producer",
    "install",
    "on_change",
    "outgoing_context",
    "start_server_span",
    "uninstall",
]

TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
_PROPAGATOR = TraceContextTextMapPropagator()
# A query's text on its span, cut: a statement of many values (a batch's unnest) stays short.
_MAX_STATEMENT_CHARS = 1000
_ASYNCPG_METHODS = ("execute", "executemany", "fetch", "fetchval", "fetchrow", "fetchmany")


class _State:
    """The one tracer of the process; None while tracing is off."""

    tracer: Tracer | None = None
    provider: Any = None
    patched: bool = False


STATE = _State()

# Batch mode (core.consumer): the consumed messages' spans by correlation id, for what the batch
# handler writes to the outbox (inject_producer) to continue each message's own trace.
_BATCH_PARENTS: ContextVar[Mapping[str, otel_context.Context] | None] = ContextVar(
    "hiwallet_trace_batch_parents", default=None
)


def active() -> bool:
    """Whether a span is current (and tracing on)."""
    return STATE.tracer is not None and trace.get_current_span().get_span_context().is_valid


def current_ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) in hex, or None (no span, or tracing off)."""
    if STATE.tracer is None:
        return None
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


# -- set-up -----------------------------------------------------------------------------------


_ON_CHANGE: list[Callable[[], None]] = []


def on_change(callback: Callable[[], None]) -> None:
    """``callback()`` after tracing is switched on or off (core.logging: its processors)."""
    _ON_CHANGE.append(callback)


def _changed() -> None:
    for callback in _ON_CHANGE:
        callback()


def install(provider: Any) -> None:
    """Trace with ``provider`` (an SDK TracerProvider) from now on: the hooks start spans, httpx
    and asyncpg are patched (once per process). Not the global provider of the API: tests
    install and uninstall one per test."""
    STATE.provider = provider
    STATE.tracer = provider.get_tracer("hiwallet")
    if not STATE.patched:
        _patch_httpx()
        _patch_asyncpg()
        STATE.patched = True
    _changed()


def uninstall() -> None:
    """Tracing off again (the patches stay, each a pass-through while off)."""
    STATE.tracer = None
    STATE.provider = None
    _changed()


def configure_tracing(service: str, endpoint: str | None, *, export_timeout_s: float = 5.0) -> bool:
    """Install an OTLP/HTTP exporting provider naming ``service`` if ``endpoint`` is set (the
    collector's base URL); nothing otherwise. Whether tracing is on."""
    if not endpoint:
        return False
    if not endpoint.startswith(("http://", "https://")):
        raise ValueError("HIWALLET_OTEL_ENDPOINT is an http(s) URL (an OTLP/HTTP collector)")
    # The SDK and exporter are imported only when on: a process with tracing off loads neither.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if STATE.provider is not None:
        with contextlib.suppress(Exception):
            STATE.provider.shutdown()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces", timeout=export_timeout_s)
    # Bounded: a collector that is away costs dropped spans, never memory or a request's time.
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=2048, max_export_batch_size=512))
    install(provider)
    return True


# -- HTTP -------------------------------------------------------------------------------------


class _AsgiHeaders:
    """Reads ``traceparent`` and ``tracestate`` from an ASGI scope's raw headers."""

    @staticmethod
    def get(carrier: Sequence[tuple[bytes, bytes]], key: str) -> list[str] | None:
        wanted = key.encode()
        values = [v.decode("latin-1") for n, v in carrier if n == wanted]
        return values or None

    @staticmethod
    def keys(carrier: Sequence[tuple[bytes, bytes]]) -> list[str]:
        return [n.decode("latin-1") for n, _ in carrier]


_ASGI_GETTER = _AsgiHeaders()


# A supervisor's probes and a scraper's pulls: a trace each, a few a second, would drown the rest.
_UNTRACED_PATHS = frozenset({"/health", "/ready", "/metrics"})


def start_server_span(tracer: Tracer, scope: MutableMapping[str, Any]) -> tuple[Span, object] | None:
    """The SERVER span of an HTTP request, current until :func:`end_server_span`; its parent the
    caller's ``traceparent`` if any. None for the probes and metrics (no span)."""
    if scope.get("path") in _UNTRACED_PATHS:
        return None
    parent = _PROPAGATOR.extract(scope.get("headers", ()), getter=_ASGI_GETTER)  # type: ignore[arg-type]
    method = scope.get("method", "")
    span = tracer.start_span(
        method,
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"http.request.method": method, "url.scheme": scope.get("scheme", "http")},
    )
    token = otel_context.attach(trace.set_span_in_context(span, parent))
    return span, token


def end_server_span(started: tuple[Span, object], route: str, status: int) -> None:
    span, token = started
    try:
        span.update_name(f"{span.name} {route}")  # type: ignore[attr-defined]
        span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end()
    finally:
        otel_context.detach(token)  # type: ignore[arg-type]


@contextlib.contextmanager
def client_span(
    tracer: Tracer, method: str, host: str | None, port: int | None, headers: Callable[[str, str], None]
) -> Iterator[Span]:
    """A CLIENT span around one HTTP call; ``headers(name, value)`` adds its trace context to the
    request. No URL path or query on it: they can carry ids and addresses."""
    attributes: dict[str, Any] = {"http.request.method": method}
    if host:
        attributes["server.address"] = host
    if port:
        attributes["server.port"] = port
    with tracer.start_as_current_span(method, kind=SpanKind.CLIENT, attributes=attributes) as span:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        for name, value in carrier.items():
            headers(name, value)
        yield span


def _patch_httpx() -> None:
    import httpx

    original = httpx.AsyncClient.send

    @functools.wraps(original)
    async def send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        tracer = STATE.tracer
        if tracer is None:
            return await original(self, request, **kwargs)
        url = request.url

        def add(name: str, value: str) -> None:
            request.headers[name] = value

        with client_span(tracer, request.method, url.host, url.port, add) as span:
            response = await original(self, request, **kwargs)
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                span.set_status(Status(StatusCode.ERROR))
            return response

    httpx.AsyncClient.send = send  # type: ignore[method-assign]


# -- asyncpg ----------------------------------------------------------------------------------


def _verb(query: str) -> str:
    words = query.lstrip().split(None, 1)
    return words[0].upper() if words else "SQL"


def _patch_asyncpg() -> None:
    from asyncpg.connection import Connection

    def traced(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        async def run(self: Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            tracer = STATE.tracer
            # Only inside a trace: the relay's and the jobs' polling would be traces of one span.
            if tracer is None or not trace.get_current_span().get_span_context().is_valid:
                return await original(self, query, *args, **kwargs)
            text = query if isinstance(query, str) else ""
            with tracer.start_as_current_span(
                _verb(text),
                kind=SpanKind.CLIENT,
                attributes={"db.system.name": "postgresql", "db.query.text": text[:_MAX_STATEMENT_CHARS]},
            ):
                return await original(self, query, *args, **kwargs)

        return run

    for name in _ASYNCPG_METHODS:
        setattr(Connection, name, traced(getattr(Connection, name)))

    original_reset = Connection.reset

    @functools.wraps(original_reset)
    async def reset(self: Connection, **kwargs: Any) -> None:
        # A pool's reset of a released connection is asyncpg's, not the trace's: no span.
        token = otel_context.attach(otel_context.Context())
        try:
            await original_reset(self, **kwargs)
        finally:
            otel_context.detach(token)

    Connection.reset = reset


# -- messages ---------------------------------------------------------------------------------


def inject_producer(
    tracer: Tracer,
    headers: MutableMapping[str, Any],
    exchange: str,
    routing_key: str,
    correlation_id: str | None,
) -> None:
    """Inside a trace: a PRODUCER span for a message about to be written (an outbox row) or
    published, its trace context put into ``headers``. Outside one, nothing (the relay publishes
    what it reads with the context stored at write time)."""
    parents = _BATCH_PARENTS.get()
    parent = parents.get(correlation_id) if parents is not None and correlation_id is not None else None
    if parent is None and not trace.get_current_span().get_span_context().is_valid:
        return
    span = tracer.start_span(
        f"{exchange} publish",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "rabbitmq",
            "messaging.operation.type": "send",
            "messaging.destination.name": exchange,
            "messaging.rabbitmq.destination.routing_key": routing_key,
        },
    )
    try:
        _PROPAGATOR.inject(headers, context=trace.set_span_in_context(span))
    finally:
        span.end()


def outgoing_context(exchange: str, routing_key: str, correlation_id: str | None) -> dict[str, str]:
    """The trace context for a message a database function will write later or elsewhere (kept
    with a row until then): a PRODUCER span's ``traceparent`` as :func:`inject_producer` puts it
    into headers. Empty when tracing is off or no trace is current."""
    headers: dict[str, str] = {}
    tracer = STATE.tracer
    if tracer is not None:
        inject_producer(tracer, headers, exchange, routing_key, correlation_id)
    return headers


@contextlib.contextmanager
def continuing(correlation_id: str | None) -> Iterator[None]:
    """Batch mode: inside, the span of the consumed message with this correlation id is current
    (what a batch handler does for one message, e.g. an HTTP call, is in that message's trace).
    Anywhere else nothing changes."""
    parents = _BATCH_PARENTS.get()
    parent = parents.get(correlation_id) if parents is not None and correlation_id is not None else None
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


def _consumer_attributes(queue: str, routing_key: str, message_id: str) -> dict[str, Any]:
    return {
        "messaging.system": "rabbitmq",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.rabbitmq.destination.routing_key": routing_key,
        "messaging.message.id": message_id,
    }


def _extract(headers: Mapping[str, Any] | None) -> otel_context.Context:
    carrier = {k: v for k, v in (headers or {}).items() if k in (TRACEPARENT_HEADER, TRACESTATE_HEADER)}
    return _PROPAGATOR.extract(carrier)


@contextlib.contextmanager
def consumer_span(
    tracer: Tracer, headers: Mapping[str, Any] | None, queue: str, routing_key: str, message_id: str
) -> Iterator[Span]:
    """The CONSUMER span of one message's handling, current inside; its parent the producer's."""
    with tracer.start_as_current_span(
        f"{queue} process",
        context=_extract(headers),
        kind=SpanKind.CONSUMER,
        attributes=_consumer_attributes(queue, routing_key, message_id),
    ) as span:
        yield span


@contextlib.contextmanager
def batch_consumer_spans(tracer: Tracer, messages: Sequence[Any]) -> Iterator[None]:
    """Batch mode: a CONSUMER span per message (each its producer's child) and, current inside,
    one ``process batch`` span linked to them. What is written to the outbox meanwhile under a
    consumed message's correlation id continues that message's trace."""
    spans: list[Span] = []
    parents: dict[str, otel_context.Context] = {}
    for message in messages:
        span = tracer.start_span(
            f"{message.queue} process",
            context=_extract(message.headers),
            kind=SpanKind.CONSUMER,
            attributes=_consumer_attributes(message.queue, message.routing_key, message.message_id),
        )
        spans.append(span)
        if message.correlation_id is not None:
            parents.setdefault(message.correlation_id, trace.set_span_in_context(span))
    queue = messages[0].queue if messages else ""
    token = _BATCH_PARENTS.set(parents)
    try:
        with tracer.start_as_current_span(
            f"{queue} process batch",
            context=otel_context.Context(),  # a root: the batch belongs to no one message
            kind=SpanKind.CONSUMER,
            links=[Link(s.get_span_context()) for s in spans],
            attributes={"messaging.system": "rabbitmq", "messaging.batch.message_count": len(spans)},
        ):
            yield
    finally:
        _BATCH_PARENTS.reset(token)
        for span in spans:
            span.end()
