"""The topup-webhook app: the shared HTTP factory, the pool (as the top-up database's application
role), the webhook routes, and what runs beside them in this one process (the metrics refresh;
the outbox relay and the periodic jobs, once core has them)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import asyncpg
import structlog
from fastapi import FastAPI

from hiwallet.core import db
from hiwallet.core.http import LeanRoute, ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.logging import configure_logging
from hiwallet.core.settings import Settings, get_settings
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.routes import lean_router
from hiwallet.topup_webhook.service import TopupService, verifiers_for
from hiwallet.topup_webhook.settings import TopupWebhookSettings, get_topup_webhook_settings
from hiwallet.topup_webhook.store import TopupStore

log = structlog.get_logger(__name__)

SERVICE = "topup-webhook"


async def create_topup_pool(
    settings: TopupWebhookSettings, core: Settings, *, max_size: int | None = None
) -> asyncpg.Pool:
    # As the top-up database's application role whatever the database's name (tests use
    # clones): db.create_pool refuses the owner or a superuser.
    return await db.create_pool(
        settings.database or db.DATABASES["topup"],
        role=db.app_role("topup"),
        settings=core,
        max_size=max_size or settings.db_pool_max_size,
    )


async def _every(interval_s: float, name: str, work: Callable[[], Awaitable[None]]) -> None:
    while True:
        try:
            await work()
        except Exception as exc:  # the next round tries again
            log.warning("background work failed", work=name, error=type(exc).__name__)
        await asyncio.sleep(interval_s)


def create_topup_webhook_app(
    settings: TopupWebhookSettings | None = None,
    *,
    core_settings: Settings | None = None,
    background: bool = True,
) -> FastAPI:
    """``background=False``: the routes alone, without the relay and the jobs (tests that run
    them by hand)."""
    settings = settings or get_topup_webhook_settings()
    core = core_settings or get_settings()
    checks: dict[str, ReadyCheck] = {}
    verifiers = verifiers_for(settings)  # a bad secret stops the start, not the first request

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_topup_pool(settings, core)
        store = TopupStore(pool)
        app.state.store = store
        app.state.service = TopupService(store, verifiers, metrics)

        async def database_ready() -> None:
            await pool.fetchval("SELECT 1")

        checks["database"] = database_ready

        async def refresh_metrics() -> None:
            metrics.inbox_rows.set(await store.inbox_rows())

        tasks: list[asyncio.Task[None]] = []
        if background:
            tasks.append(asyncio.create_task(_every(settings.metrics_interval_s, "metrics", refresh_metrics)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with suppress(asyncio.CancelledError):
                    await task
            await pool.close()

    app = create_app(
        SERVICE,
        ready_checks=checks,
        lifespan=lifespan,
        max_body_bytes=settings.max_body_bytes,
        hot_routes=[route for route in lean_router.routes if isinstance(route, LeanRoute)],
    )
    metrics = TopupMetrics(app.state.metrics_registry)
    app.state.topup_metrics = metrics
    app.include_router(lean_router)
    return app


def run_topup_webhook(port: int | None, host: str) -> None:
    """Serve topup-webhook (the process entry point): one process, the relay and the jobs in it."""
    configure_logging(SERVICE)
    settings = get_topup_webhook_settings()
    serve(settle_heap_once_started(create_topup_webhook_app(settings)), host=host, port=port or settings.port)
