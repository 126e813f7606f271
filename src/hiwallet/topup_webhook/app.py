"""The topup-webhook app: the shared HTTP factory, the pool (as the top-up database's application
role), the webhook routes, and what runs beside them in this one process: the outbox relay to
``hiwallet.topups`` (its topology declared as soon as RabbitMQ answers: core.service), the
reconciliation, retention and settlement import jobs (the last announces the card provider's
payouts to ``hiwallet.events``: settlements.py), and the refresh of the gauges."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import asyncpg
import httpx
import structlog
from fastapi import FastAPI

from hiwallet.contracts.databases import DATABASES
from hiwallet.contracts.events import events_topology
from hiwallet.contracts.topups import topups_topology
from hiwallet.core import db
from hiwallet.core.broker import Topology
from hiwallet.core.http import (
    ClientNetworks,
    LeanRoute,
    ReadyCheck,
    create_app,
    serve,
    settle_heap_once_started,
)
from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.logging import configure_logging
from hiwallet.core.messaging import Messaging
from hiwallet.core.outbox import OutboxMetrics, RelayHint
from hiwallet.core.service import DatabaseSpec, OutboxSpec, Runtime, ServiceSpec, service_lifespan
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.core.webhooks import Verifier
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.reconcile import Reconciler, listings_for, provider_clients
from hiwallet.topup_webhook.retention import OUTBOX_CHANNEL, OUTBOX_TABLE, Retention
from hiwallet.topup_webhook.routes import lean_router
from hiwallet.topup_webhook.service import TopupService, verifiers_for
from hiwallet.topup_webhook.settings import TopupWebhookSettings, get_topup_webhook_settings
from hiwallet.topup_webhook.settlements import SettlementImporter, StripePayouts
from hiwallet.topup_webhook.store import TopupStore

log = structlog.get_logger(__name__)

SERVICE = "topup-webhook"
# Advisory lock keys in hiwallet_topup (locks are per database): one relay, one round of each
# job at a time, across every instance.
RELAY_LOCK_KEY = 0x6877_7472  # "hwtr"
RECONCILE_LOCK_KEY = 0x6877_7463  # "hwtc"
RETENTION_LOCK_KEY = 0x6877_7464  # "hwtd"
SETTLEMENT_LOCK_KEY = 0x6877_7473  # "hwts"
# The outbox this service's relay publishes (core.service.Runtime.outbox_relay).
OUTBOX = OutboxSpec(OUTBOX_TABLE, OUTBOX_CHANNEL, RELAY_LOCK_KEY)


def declared_topology() -> Topology:
    """What the relay declares: the top-ups' topology, and the events' (the settlements go to
    hiwallet.events; publishing is mandatory, so its queues are declared too)."""
    return topups_topology() + events_topology()


def database_spec(settings: TopupWebhookSettings) -> DatabaseSpec:
    """The topup database (``settings.database``: a clone, in tests) as its application role,
    whatever the database's name (core.db.create_pool refuses the owner or a superuser)."""
    database = settings.database or DATABASES["topup"]
    return DatabaseSpec(database, db.app_role("topup"), settings.db_pool_max_size)


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


def settlement_importer(
    store: TopupStore,
    settings: TopupWebhookSettings,
    clients: Mapping[str, httpx.AsyncClient],
    metrics: TopupMetrics,
) -> SettlementImporter:
    return SettlementImporter(
        store,
        StripePayouts(clients["stripe"], settings.settlement_max_pages),
        window_s=settings.settlement_window_s,
        model=settings.stripe_settlement_model,
        exchange=settings.events_exchange,
        metrics=metrics,
    )


def settlement_job(
    settings: TopupWebhookSettings,
    run: Callable[[], Awaitable[int]],
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    """The payouts' import (``run``: SettlementImporter.run), one instance a round (the
    service's and the operator's command share the lock), the first one interval after the start."""
    return PeriodicJob("topup-settlements", settings.settlement_interval_s, SETTLEMENT_LOCK_KEY, run, connect)


def service_spec(
    settings: TopupWebhookSettings,
    verifiers: Mapping[str, Verifier],
    *,
    topology: Topology | None = None,
) -> ServiceSpec:
    """topup-webhook, declared: the top-up database, the top-ups' topology, and in ``setup`` the
    store and the service the routes use, the providers' clients, the relay of topup.outbox,
    the reconciliation, the retention and the gauges."""

    async def setup(rt: Runtime) -> None:
        app, pool = rt.app, rt.db
        metrics: TopupMetrics = app.state.topup_metrics
        outbox_metrics = OutboxMetrics(app.state.metrics_registry)
        # The outbox has no NOTIFY trigger (migration 0002): each commit that wrote rows wakes
        # the relay from here, directly when the relay below leads, else by a pg_notify.
        hint = app.state.relay_hint = RelayHint(pool, OUTBOX_CHANNEL)
        rt.close(hint.aclose)
        store = app.state.store = TopupStore.from_settings(pool, settings, hint.committed)
        service = app.state.service = TopupService(store, verifiers, metrics)
        clients = provider_clients(settings)
        for client in clients.values():
            rt.close(client.aclose)
        reconciler = app.state.reconciler = Reconciler(
            service, listings_for(clients, settings.reconcile_max_pages), settings.reconcile_window_s, metrics
        )
        connect = rt.connect()
        reconcile, purge = topup_jobs(service, settings, connect, reconciler)
        rt.job(reconcile)
        rt.job(purge)
        importer = app.state.settlement_importer = settlement_importer(store, settings, clients, metrics)
        rt.job(settlement_job(settings, importer.run, connect))

        async def refresh_gauges() -> None:
            metrics.inbox_rows.set(await store.inbox_rows())
            async with pool.acquire() as conn:
                await outbox_metrics.refresh(conn, OUTBOX_TABLE)

        rt.every("gauges", settings.metrics_interval_s, refresh_gauges)
        if rt.broker is None:  # background=False: the tests run the relay and the jobs by hand
            return
        app.state.relay = hint.relay = rt.outbox_relay(
            OUTBOX,
            settings,
            on_published=outbox_metrics.on_published,
            min_pass_interval_s=max(0, settings.relay_min_pass_interval_ms) / 1000,
        )

    return ServiceSpec(
        SERVICE,
        setup,
        database=database_spec(settings),
        # the settlements go to hiwallet.events (mandatory publishing: its queues declared too)
        messaging=Messaging(topology or declared_topology()),
    )


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
    checks: dict[str, ReadyCheck] = {}
    # a bad secret stops the start, not the first request
    spec = service_spec(settings, verifiers_for(settings), topology=topology)
    app = create_app(
        SERVICE,
        ready_checks=checks,
        lifespan=service_lifespan(spec, checks, settings=core_settings, background=background),
        max_body_bytes=settings.max_body_bytes,
        hot_routes=[route for route in lean_router.routes if isinstance(route, LeanRoute)],
        # the providers' networks only, on the webhooks (the probes and /metrics come from inside)
        client_networks=ClientNetworks.of(settings.provider_networks, (lean_router.prefix,)),
    )
    app.state.topup_metrics = TopupMetrics(app.state.metrics_registry)
    app.include_router(lean_router)
    return app


def run_topup_webhook(port: int | None, host: str) -> None:
    """Serve topup-webhook (the process entry point): one process, the relay and the jobs in it."""
    configure_logging(SERVICE)
    settings = get_topup_webhook_settings()
    refuse_insecure_start(settings)
    serve(settle_heap_once_started(create_topup_webhook_app(settings)), host=host, port=port or settings.port)
