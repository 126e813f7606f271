"""Structured logging for every process: one JSON object a line, on stderr.

Every process calls :func:`configure_logging` once, at its start (``hiwallet run NAME``,
``hiwallet up``, each worker process, every other command). From then on structlog and the
standard library (uvicorn, asyncpg) write the same lines::

    {"timestamp": "2026-12-01T09:06:14.123456Z", "level": "info", "service": "wallet-api",
     "logger": "hiwallet.core.db", "event": "migration applied", "version": 7, ...}

What a line never holds: a request or response body, a header value other than the request
id, a token, a password, personal data, or a local variable. Tracebacks are rendered here
(:func:`exception_chain`): each exception of the chain with its frames' file, line and
function, never their locals; the message of a database error (which can quote the values of
a row) is replaced by its SQLSTATE.

The request id (``X-Request-Id``) is a structlog contextvar set by the HTTP edge for the time
of a request (:data:`REQUEST_ID`): every line logged meanwhile carries it. With tracing on
(core.tracing), a line logged while a span is current carries its ``trace_id`` and ``span_id``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, MutableMapping
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import orjson
import structlog

from hiwallet.core import tracing

# The prefix makes it one of structlog's contextvars: merge_contextvars copies it into every
# line logged while it is set. Set and reset directly (no keyword dict per request).
REQUEST_ID: ContextVar[Any] = ContextVar("structlog_request_id", default=Ellipsis)

ACCESS_EVENT = "request"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
# Loggers whose lines we replace with our own: uvicorn's access line has the raw path and query
# string (ids, OAuth codes); ours has the route template.
_SILENCED = ("uvicorn.access",)
# HTTP clients log each request's full URL at info: query strings carry e-mail addresses (the
# admin API's ?email=) and codes. Their warnings still pass.
_QUIET = ("httpx", "httpcore", "urllib3")


class _Sink:
    """Where every line goes: stderr (looked up at each write, so a test's capture or a
    redirected stream is honoured) and, if set, a file opened for appending (each line one
    ``write`` of an unbuffered file: lines of several processes do not interleave)."""

    def __init__(self) -> None:
        self.file: BinaryIO | None = None
        self.path: Path | None = None
        self.lock = threading.Lock()

    def open(self, path: Path | None) -> None:
        with self.lock:
            if path == self.path:
                return
            if self.file is not None:
                self.file.close()
            self.file = open(path, "ab", buffering=0) if path is not None else None  # noqa: SIM115
            self.path = path

    def write(self, line: bytes) -> None:
        """Write one line (ending with a newline)."""
        stream = sys.stderr
        if stream is sys.__stderr__ and stream is not None:
            # The process's own stderr: one write(2), no buffer of Python's in between (stderr
            # is line-buffered; nothing of ours waits in it).
            written = os.write(2, line)
            while written < len(line):  # a pipe may take a long line in parts
                written += os.write(2, line[written:])
        else:  # replaced (a test's capture): through the object
            buffer = getattr(stream, "buffer", None)
            if buffer is not None:
                stream.flush()
                buffer.write(line)
                buffer.flush()
            elif stream is not None:
                stream.write(line.decode())
                stream.flush()
        file = self.file
        if file is not None:
            file.write(line)


_SINK = _Sink()
_STATE: dict[str, Any] = {"service": "hiwallet", "level": logging.INFO}


def _render(event_dict: MutableMapping[str, Any]) -> bytes:
    return orjson.dumps(
        event_dict,
        default=repr,
        option=orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE,
    )


def _is_database_error(exc: BaseException) -> bool:
    return isinstance(getattr(exc, "sqlstate", None), str)


def exception_chain(exc: BaseException) -> list[dict[str, Any]]:
    """``exc`` and its causes (``__cause__``, else ``__context__``), outermost first: type,
    message and frames (file, line, function), never locals. A database error's message is
    replaced by its SQLSTATE and constraint: PostgreSQL quotes the offending values in it."""
    chain: list[dict[str, Any]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < 10:
        seen.add(id(current))
        kind = type(current)
        if _is_database_error(current):
            message = f"sqlstate {current.sqlstate}"  # type: ignore[attr-defined]
            constraint = getattr(current, "constraint_name", None) or getattr(current, "constraint", None)
            if constraint:
                message += f", constraint {constraint}"
        else:
            message = str(current)
        frames = [
            {"file": f.filename, "line": f.lineno, "function": f.name}
            for f in traceback.extract_tb(current.__traceback__)  # capture_locals is off
        ]
        chain.append({"type": f"{kind.__module__}.{kind.__qualname__}", "message": message, "frames": frames})
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain


def database_error_fields(exc: BaseException) -> dict[str, Any]:
    """The SQLSTATE and constraint carried by ``exc`` or anything on its cause/context chain
    (asyncpg errors: ``sqlstate``, ``constraint_name``; ours may carry ``sqlstate``,
    ``constraint``), the nearest first."""
    fields: dict[str, Any] = {"sqlstate": None, "constraint": None}
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if fields["sqlstate"] is None:
            sqlstate = getattr(current, "sqlstate", None)
            if isinstance(sqlstate, str):
                fields["sqlstate"] = sqlstate
        if fields["constraint"] is None:
            constraint = getattr(current, "constraint_name", None) or getattr(current, "constraint", None)
            if isinstance(constraint, str):
                fields["constraint"] = constraint
        current = current.__cause__ or current.__context__
    return fields


def error_fields(exc: BaseException) -> dict[str, Any]:
    """What a log line says of ``exc``: ``error`` (its type's name) and, when it or its cause is
    a database error, ``sqlstate`` and ``constraint``. Never its message or repr: a database
    error's quotes the values of a row (asyncpg's str() adds PostgreSQL's DETAIL, "Key
    (email)=(...)"), an HTTP client's its URL. Use as ``log.warning("...", **error_fields(exc))``."""
    fields: dict[str, Any] = {"error": type(exc).__name__}
    database = database_error_fields(exc)
    if database["sqlstate"] is not None:
        fields["sqlstate"] = database["sqlstate"]
    if database["constraint"] is not None:
        fields["constraint"] = database["constraint"]
    return fields


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _exception(exc_info: Any) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        return exc_info[1] if isinstance(exc_info[1], BaseException) else None
    if exc_info:
        return sys.exc_info()[1]
    return None


def _add_exception(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    exc_info = event_dict.pop("exc_info", None)
    if exc_info is not None:
        exc = _exception(exc_info)
        if exc is not None:
            event_dict["exception"] = exception_chain(exc)
    return event_dict


def _add_trace(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # Tracing off: one test. On: the current span's ids beside the request id.
    if tracing.STATE.tracer is not None:
        ids = tracing.current_ids()
        if ids is not None:
            event_dict.setdefault("trace_id", ids[0])
            event_dict.setdefault("span_id", ids[1])
    return event_dict


def _add_fields(_: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # The first keys of every line, in this order, for a reader's eye.
    fields = {
        "timestamp": datetime.now(UTC),
        "level": "warning" if method == "warn" else method,
        "service": event_dict.pop("service", _STATE["service"]),
    }
    fields.update(event_dict)
    return fields


def _to_sink(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> bytes:
    return _render(event_dict)


class _SinkLogger:
    """structlog's logger: writes the rendered line to the sink."""

    def __init__(self, name: str | None) -> None:
        self.name = name

    def msg(self, message: bytes) -> None:
        _SINK.write(message)

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


def _sink_logger_factory(*args: Any) -> _SinkLogger:
    return _SinkLogger(args[0] if args and isinstance(args[0], str) else None)


def _add_logger_name(logger: Any, _: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    name = getattr(logger, "name", None)
    if name:
        event_dict.setdefault("logger", name)
    return event_dict


class _StdlibHandler(logging.Handler):
    """The standard library's records (uvicorn, asyncpg, ...) as the same JSON lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event: dict[str, Any] = {"logger": record.name, "event": record.getMessage()}
            _add_trace(None, "", event)
            if record.exc_info and record.exc_info[1] is not None:
                event["exc_info"] = record.exc_info[1]
            line = _add_exception(None, "", _add_fields(None, record.levelname.lower(), event))
            _SINK.write(_render(line))
        except Exception:
            self.handleError(record)


def _configure_structlog(threshold: int) -> None:
    # The trace's ids only while tracing is on: off, the chain is what it was without tracing.
    traced = [_add_trace] if tracing.STATE.tracer is not None else []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *traced,
            _add_logger_name,
            _add_exception,
            _add_fields,
            _to_sink,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=_sink_logger_factory,
        # Not cached: configure_logging may come after a module took its logger (a cached one
        # would keep the level it first saw); a line costs a bind more, rare on hot paths.
        cache_logger_on_first_use=False,
    )


def configure_logging(service: str, *, level: str | None = None, log_file: Path | None = None) -> None:
    """Make every line of this process a JSON object naming ``service``. The level and an
    optional file that also receives every line (tests: one file for a whole run) come from
    the settings (``HIWALLET_LOG_LEVEL``, ``HIWALLET_LOG_FILE``) unless given. Idempotent: a
    second call reconfigures."""
    from hiwallet.core.settings import get_settings

    settings = get_settings()
    name = (level or settings.log_level).lower()
    if name not in _LEVELS:
        raise ValueError(f"unknown log level {name!r}: one of {', '.join(_LEVELS)}")
    threshold = _LEVELS[name]
    _STATE["service"] = service
    _STATE["level"] = threshold
    _SINK.open(log_file or settings.log_file)

    tracing.configure_tracing(service, settings.otel_endpoint)
    _configure_structlog(threshold)

    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _StdlibHandler):
            root.removeHandler(handler)
    root.addHandler(_StdlibHandler())
    root.setLevel(threshold)
    # uvicorn's own handlers print plain text; its records go to ours through the root.
    for logger_name in ("uvicorn", "uvicorn.error", "uvicorn.asgi"):
        logger = logging.getLogger(logger_name)
        logger.handlers.clear()
        logger.propagate = True
    for logger_name in _SILENCED:
        logging.getLogger(logger_name).disabled = True
    for logger_name in _QUIET:
        logging.getLogger(logger_name).setLevel(max(threshold, logging.WARNING))


AccessLog = Callable[[str, str, int, float, str], None]


def access_logger(service: str, *, enabled: bool = True) -> AccessLog | None:
    """The HTTP edge's access line, built once per app: ``log(method, route, status,
    duration_s, request_id)``. None when off (the setting, or a level above info). It writes the
    line directly (one dict, one ``orjson.dumps``), without structlog's processors: it runs on
    every request, the hottest included."""
    if not enabled:
        return None

    def log(method: str, route: str, status: int, duration_s: float, request_id: str) -> None:
        if _STATE["level"] > logging.INFO:
            return
        line = {
            "timestamp": datetime.now(UTC),
            "level": "info",
            "service": service,
            "event": ACCESS_EVENT,
            "method": method,
            "route": route,
            "status": status,
            "duration_ms": round(duration_s * 1000, 3),
            "request_id": request_id,
        }
        if tracing.STATE.tracer is not None:
            _add_trace(None, "", line)
        _SINK.write(orjson.dumps(line, option=orjson.OPT_UTC_Z | orjson.OPT_APPEND_NEWLINE))

    return log


# Fail closed: a process that has not called configure_logging yet (or never will) still writes
# JSON lines without locals, not structlog's default console lines with rich tracebacks (which
# show every frame's local variables).
if not structlog.is_configured():
    _configure_structlog(logging.INFO)
# Tracing switched on or off later (tests install a provider): the chain follows.
tracing.on_change(lambda: _configure_structlog(_STATE["level"]))
