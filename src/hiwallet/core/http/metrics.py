"""Prometheus metrics: per app, and summed over a service's worker processes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def multiprocess_metrics(service: str) -> Iterator[str]:
    """A fresh directory for the metrics of one service's worker processes, named in the
    environment they inherit (prometheus_client's multiprocess mode, chosen when a worker
    imports it); removed when the service stops."""
    directory = tempfile.mkdtemp(prefix=f"hiwallet-{service}-metrics-")
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = directory
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(directory, ignore_errors=True)


class Metrics:
    """Per-app Prometheus metrics in their own registry, so several apps fit in one process."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        # process_start_time_seconds and the rest (Linux): what tells an operator the process
        # restarted (deploy/prometheus/alerts.yml); the app's own registry leaves them out.
        ProcessCollector(registry=self.registry)
        self.requests = Counter(
            "http_requests_total",
            "HTTP requests by route, method and status",
            ["service", "method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "HTTP request latency by route and method",
            ["service", "method", "route"],
            registry=self.registry,
        )
        self.service = service

    def response(self) -> Response:
        if os.environ.get(MULTIPROC_ENV):
            # Worker processes: each writes its values to the shared directory; any of them
            # answers with the sum of all.
            registry = CollectorRegistry()
            # No process metrics here: whichever worker answers would report its own start
            # time, and the restart alert would see every change of worker as a restart.
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)
