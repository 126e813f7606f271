"""The topup-webhook app: the shared HTTP factory, the pool (as the top-up database's application
role), the webhook routes, and what runs beside them in this one process: the outbox relay to
``hiwallet.topups`` (its topology declared at start), the reconciliation and retention jobs, and
the refresh of the gauges."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import asyncpg
import structlog
from fastapi import FastAPI

from hiwallet.contracts.databases import DATABASES
from hiwallet.contracts.topups import topups_topology
from hiwallet.core import db
from hiwallet.core.background import declare_when_reachable, every, supervised
from hiwallet.core.broker import Broker, BrokerUnavailable, Topology
from hiwallet.core.http import LeanRoute, ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.logging import configure_logging
from hiwallet.core.outbox import OutboxMetrics, Relay, RelayHint
from hiwallet.core.settings import Settings, get_settings, refuse_insecure_start
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.reconcile import Reconciler, listings_for, provider_clients
from hiwallet.topup_webhook.retention import OUTBOX_CHANNEL, OUTBOX_TABLE, Retention
from hiwallet.topup_webhook.routes import lean_router
from hiwallet.topup_webhook.service import TopupService, verifiers_for
from hiwallet.topup_webhook.settings import TopupWebhookSettings, get_topup_webhook_settings
from hiwallet.topup_webhook.store import TopupStore

log = structlog.get_logger(__name__)

SERVICE = "topup-webhook"
# Advisory lock keys in hiwallet_topup (locks are per database): one relay, one round of each
# job at a time, across every instance.
RELAY_LOCK_KEY = 0x6877_7472  # "hwtr"
RECONCILE_LOCK_KEY = 0x6877_7463  # "hwtc"
RETENTION_LOCK_KEY = 0x6877_7464  # "hwtd"


def database_of(settings: TopupWebhookSettings) -> str:
    return settings.database or DATABASES["topup"]


async def create_topup_pool(
    settings: TopupWebhookSettings, core: Settings, *, max_size: int | None = None
) -> asyncpg.Pool:
    # As the top-up database's application role whatever the database's name (tests use
    # clones): db.create_pool refuses the owner or a superuser.
    return await db.create_pool(
        database_of(settings),
        role=db.app_role("topup"),
        settings=core,
        max_size=max_size or settings.db_pool_max_size,
    )


def dedicated_connection(
    settings: TopupWebhookSettings, core: Settings
) -> Callable[[], Awaitable[asyncpg.Connection]]:
    """A connection of its own, as the application role (the relay's session lock and LISTEN,
    each job round's lock: never a pooled one)."""
    return db.dedicated_connection(database_of(settings), db.app_role("topup"), core)


def topup_jobs(
    service: TopupService,
    settings: TopupWebhookSettings,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
    reconciler: Reconciler,
) -> tuple[PeriodicJob, PeriodicJob]:
    reconcile = PeriodicJob(
        "topup-reconcile", settings.reconcile_interval_s, RECONCILE_LOCK_KEY, reconciler.run, connect
    )
    retention = Retention(
        service.store,
        settings.retention_days,
        settings.retention_batch,
        settings.retention_max_batches,
        service.metrics,
    )
    purge = PeriodicJob(
        "topup-retention", settings.retention_interval_s, RETENTION_LOCK_KEY, retention.run, connect
    )
    return reconcile, purge


def create_topup_webhook_app(
    settings: TopupWebhookSettings | None = None,
    *,
    core_settings: Settings | None = None,
    background: bool = True,
    topology: Topology | None = None,
) -> FastAPI:
    """``background=False``: the routes alone, without the broker, the relay and the jobs (tests
    that run those by hand). ``topology``: what the relay declares (default
    ``topups_topology()``; tests pass their own names, with ``settings.exchange`` among them)."""
    settings = settings or get_topup_webhook_settings()
    core = core_settings or get_settings()
    checks: dict[str, ReadyCheck] = {}
    verifiers = verifiers_for(settings)  # a bad secret stops the start, not the first request

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_topup_pool(settings, core)
        # The outbox has no NOTIFY trigger (migration 0002): each commit that wrote rows wakes
        # the relay from here, directly when the relay below leads, else by a pg_notify.
        hint = app.state.relay_hint = RelayHint(pool, OUTBOX_CHANNEL)
        store = TopupStore.from_settings(pool, settings, hint.committed)
        service = TopupService(store, verifiers, metrics)
        app.state.store = store
        app.state.service = service
        clients = provider_clients(settings)
        app.state.reconciler = Reconciler(
            service, listings_for(clients, settings.reconcile_max_pages), settings.reconcile_window_s, metrics
        )

        async def database_ready() -> None:
            await pool.fetchval("SELECT 1")

        checks["database"] = database_ready
        tasks: list[asyncio.Task[None]] = []
        broker: Broker | None = None
        if background:
            bus = broker = Broker(core.amqp_url, client_name=SERVICE)
            declared = asyncio.Event()

            async def broker_ready() -> None:
                if not declared.is_set():
                    raise BrokerUnavailable("the topology is not declared yet")
                await bus.check()

            checks["broker"] = broker_ready
            connect = dedicated_connection(settings, core)
            relay = Relay(
                connect=connect,
                broker=bus,
                table=OUTBOX_TABLE,
                channel=OUTBOX_CHANNEL,
                lock_key=RELAY_LOCK_KEY,
                batch_size=settings.relay_batch,
                poll_interval_s=settings.relay_poll_s,
                min_pass_interval_s=max(0, settings.relay_min_pass_interval_ms) / 1000,
                on_published=outbox_metrics.on_published,
            )
            app.state.relay = hint.relay = relay
            reconcile, purge = topup_jobs(service, settings, connect, app.state.reconciler)

            async def refresh_gauges() -> None:
                metrics.inbox_rows.set(await store.inbox_rows())
                async with pool.acquire() as conn:
                    await outbox_metrics.refresh(conn, OUTBOX_TABLE)

            async def declare_then_relay() -> None:
                # Publishing before the exchange exists would only be refused (unroutable).
                await declare_when_reachable(bus, topology or topups_topology())
                declared.set()
                await supervised("relay", relay.run)

            tasks = [
                asyncio.create_task(declare_then_relay()),
                asyncio.create_task(supervised("reconcile", reconcile.run_forever)),
                asyncio.create_task(supervised("retention", purge.run_forever)),
                asyncio.create_task(every(settings.metrics_interval_s, "gauges", refresh_gauges)),
            ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with suppress(asyncio.CancelledError):
                    await task
            if broker is not None:
                await broker.close()
            for client in clients.values():
                await client.aclose()
            await hint.aclose()
            await pool.close()

    app = create_app(
        SERVICE,
        ready_checks=checks,
        lifespan=lifespan,
        max_body_bytes=settings.max_body_bytes,
        hot_routes=[route for route in lean_router.routes if isinstance(route, LeanRoute)],
    )
    metrics = TopupMetrics(app.state.metrics_registry)
    outbox_metrics = OutboxMetrics(app.state.metrics_registry)
    app.state.topup_metrics = metrics
    app.include_router(lean_router)
    return app


def run_topup_webhook(port: int | None, host: str) -> None:
    """Serve topup-webhook (the process entry point): one process, the relay and the jobs in it."""
    configure_logging(SERVICE)
    settings = get_topup_webhook_settings()
    refuse_insecure_start(settings)
    serve(settle_heap_once_started(create_topup_webhook_app(settings)), host=host, port=port or settings.port)
