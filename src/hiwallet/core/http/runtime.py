"""Process-level tuning and serving: the garbage collector's heap freeze, and uvicorn as every
service runs it. Called by each service's process entry point, where it can be seen:

    configure_logging("wallet-api")
    serve(settle_heap_once_started(create_wallet_api_app(settings)), host=host, port=port)
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI

# The youngest generation's threshold (CPython's default: 700 allocations). A request allocates
# a few thousand objects that nearly all die with it; at 700 the collector ran several times per
# request (bench/: 7 % of wallet-api's CPU under load).
GC_YOUNG_THRESHOLD = 20_000


def settle_heap() -> None:
    """Once a service has started: what it built (modules, routes, schemas, pools) lives as long
    as the process, so the cyclic collector stops traversing it (``gc.freeze``), and young
    collections run less often. Cycles made later are still collected."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def settle_heap_once_started(app: FastAPI) -> FastAPI:
    """``app``, made to :func:`settle_heap` right after its startup (its lifespan has built the
    pools and caches that live as long as the process), before it serves a request. For a
    process entry point: one app per process."""
    lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def settled(app: FastAPI) -> AsyncIterator[Any]:
        context: AbstractAsyncContextManager[Any] = lifespan(app)
        async with context as state:
            settle_heap()
            yield state

    app.router.lifespan_context = settled
    return app


def serve(
    app: Any,
    *,
    host: str,
    port: int,
    workers: int = 1,
    factory: bool = False,
    proxy_headers: bool = False,
) -> None:
    """uvicorn as every service runs: its lifespan required (a startup failure, e.g. a misused
    lean route, stops the process rather than serving without it), its logging left to ours
    (core/logging.py; its access line has raw paths, ours route templates, and the level is
    the root logger's), and no proxy-header middleware unless asked (a layer on every request;
    only a service that reads the clients' addresses needs it)."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        workers=workers,
        factory=factory,
        lifespan="on",
        log_config=None,
        log_level=None,
        access_log=False,
        proxy_headers=proxy_headers,
    )
