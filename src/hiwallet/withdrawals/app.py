"""The withdrawal-orchestrator app: the shared HTTP factory, the pool (as the withdrawal
database's application role), the routes, and what runs beside them in this one process: the
whole ``hiwallet.withdrawals`` topology declared at start, the results consumer on
``hiwallet.withdrawals.orchestrator``, the relay of ``withdrawal.outbox``, the stuck saga scan
and the retention (core.jobs.PeriodicJob), and the refresh of the gauges."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import httpx
import structlog
from fastapi import FastAPI

from hiwallet.contracts.databases import DATABASES
from hiwallet.contracts.staff import StaffDirectory
from hiwallet.contracts.topups import DEAD_LETTER_EXCHANGE
from hiwallet.contracts.withdrawals import (
    ORCHESTRATOR_QUEUE,
    WITHDRAWALS_DEAD_LETTER_KEY,
    withdrawals_topology,
)
from hiwallet.core import db
from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.consumer import Consumer, ConsumerMetrics, batched_or_concurrent
from hiwallet.core.http import (
    LeanRoute,
    serve,
    settle_heap_once_started,
)
from hiwallet.core.jobs import PeriodicJob, in_batches
from hiwallet.core.logging import configure_logging
from hiwallet.core.messaging import Messaging
from hiwallet.core.outbox import OutboxMetrics, RelayHint, purge_sent
from hiwallet.core.service import DatabaseSpec, OutboxSpec, Runtime, ServiceSpec, build_app
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.withdrawals.domain import State
from hiwallet.withdrawals.metrics import WithdrawalMetrics
from hiwallet.withdrawals.routes import document, lean_router, router
from hiwallet.withdrawals.service import OUTBOX_CHANNEL, OUTBOX_TABLE, WithdrawalService
from hiwallet.withdrawals.settings import WithdrawalSettings, get_withdrawal_settings
from hiwallet.withdrawals.staff_routes import staff_router
from hiwallet.withdrawals.visibility import WalletDirectory

log = structlog.get_logger(__name__)

SERVICE = "withdrawal-orchestrator"
CONSUMER_NAME = "withdrawal-orchestrator"
# Advisory lock keys in hiwallet_withdrawal (locks are per database): one relay, one round of
# each job at a time, across every instance.
RELAY_LOCK_KEY = 0x6877_6F72  # "hwor"
STUCK_SCAN_LOCK_KEY = 0x6877_7773  # "hwws"
RETENTION_LOCK_KEY = 0x6877_7764  # "hwwd"
# The outbox this service's relay publishes (core.service.Runtime.outbox_relay).
OUTBOX = OutboxSpec(OUTBOX_TABLE, OUTBOX_CHANNEL, RELAY_LOCK_KEY)


def database_spec(settings: WithdrawalSettings) -> DatabaseSpec:
    """The withdrawal database (``settings.database``: a clone, in tests) as its application role,
    whatever the database's name (core.db.create_pool refuses the owner or a superuser)."""
    database = settings.database or DATABASES["withdrawal"]
    return DatabaseSpec(database, db.app_role("withdrawal"), settings.db_pool_max_size)


def issuers_of(settings: WithdrawalSettings) -> list[TrustedIssuer]:
    """The issuers it accepts: the customer realm and the staff realm, for its audience."""
    return [
        TrustedIssuer.keycloak(
            settings.customer_issuer_base, settings.customer_realm, "customer", audience=settings.audience
        ),
        TrustedIssuer.keycloak(
            settings.staff_issuer_base, settings.staff_realm, "staff", audience=settings.audience
        ),
    ]


def stuck_scan_job(
    service: WithdrawalService,
    settings: WithdrawalSettings,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    return PeriodicJob(
        "withdrawal-stuck-scan",
        settings.stuck_scan_interval_s,
        STUCK_SCAN_LOCK_KEY,
        service.scan_stuck,
        connect,
    )


def retention_job(
    service: WithdrawalService,
    settings: WithdrawalSettings,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    async def purge() -> int:
        purged = await service.purge_idempotency()
        async with service.pool.acquire() as conn:
            await in_batches(
                lambda: purge_sent(
                    conn, OUTBOX_TABLE, settings.retention_h * 3_600.0, settings.retention_batch
                ),
                batch=settings.retention_batch,
                max_batches=settings.retention_max_batches,
            )
        return purged

    return PeriodicJob(
        "withdrawal-retention", settings.retention_interval_s, RETENTION_LOCK_KEY, purge, connect
    )


def service_spec(
    settings: WithdrawalSettings,
    *,
    wallet_api: httpx.AsyncClient | None = None,
) -> ServiceSpec:
    """withdrawal-orchestrator, declared: its database, the issuers it accepts (customers and
    staff), the whole withdrawals topology, and in ``setup`` its service, the results consumer,
    the relay of withdrawal.outbox, the stuck-saga scan, the retention and the gauges."""

    async def setup(rt: Runtime) -> None:
        app, pool = rt.app, rt.db
        registry = app.state.metrics_registry
        metrics = app.state.withdrawal_metrics
        outbox_metrics = OutboxMetrics(registry)
        consumer_metrics = ConsumerMetrics(registry)
        hint = app.state.relay_hint = RelayHint(pool, OUTBOX_CHANNEL)
        rt.close(hint.aclose)
        service = app.state.service = WithdrawalService(pool, settings, metrics, on_committed=hint.committed)
        app.state.staff_directory = StaffDirectory(
            settings.staff_admin_url,
            timeout_s=settings.staff_admin_timeout_s,
            max_connections=settings.staff_admin_max_connections,
        )
        rt.close(app.state.staff_directory.aclose)
        app.state.directory = WalletDirectory(
            settings.wallet_api_url,
            timeout_s=settings.wallet_api_timeout_s,
            max_connections=settings.wallet_api_max_connections,
            client=wallet_api,
        )
        rt.close(app.state.directory.aclose)
        connect = rt.connect()
        app.state.stuck_scan = rt.job(stuck_scan_job(service, settings, connect))
        rt.job(retention_job(service, settings, connect))

        async def refresh_gauges() -> None:
            counts = await service.count_by_state()
            for state in State:  # every state, zero when none is in it
                n, oldest_s = counts.get(state.value, (0, 0.0))
                metrics.sagas.labels(state.value).set(n)
                metrics.oldest_in_state.labels(state.value).set(oldest_s)
            async with pool.acquire() as conn:
                await outbox_metrics.refresh(conn, OUTBOX_TABLE)

        rt.every("gauges", settings.metrics_interval_s, refresh_gauges)
        if rt.broker is None:  # background=False: the tests drive the saga by hand
            return
        app.state.relay = hint.relay = rt.outbox_relay(
            OUTBOX, settings, on_published=outbox_metrics.on_published
        )
        app.state.consumer = rt.consumer(
            "consumer",
            Consumer(
                broker=rt.bus,
                # What a result's transaction wrote wakes the relay once committed.
                pool=pool,
                queues=[ORCHESTRATOR_QUEUE],
                consumer_name=CONSUMER_NAME,
                handler=service.handle,
                dead_letter_exchange=DEAD_LETTER_EXCHANGE,
                dead_letter_key=WITHDRAWALS_DEAD_LETTER_KEY,
                metrics=consumer_metrics,
                table="withdrawal.processed_events",
                **batched_or_concurrent(
                    service.handle_batch, settings.consumer_batch, settings.consumer_concurrency
                ),
            ),
        )

    def metrics(app: FastAPI) -> None:
        app.state.withdrawal_metrics = WithdrawalMetrics(app.state.metrics_registry)

    return ServiceSpec(
        SERVICE,
        setup,
        database=database_spec(settings),
        issuers=lambda: issuers_of(settings),
        messaging=Messaging(withdrawals_topology()),
        routers=(lean_router, router, staff_router),
        # POST /v1/withdrawals: the saga's one HTTP call per withdrawal
        hot_routes=[route for route in lean_router.routes if isinstance(route, LeanRoute)],
        openapi=lambda app: document(app, settings.currencies),
        max_body_bytes=settings.max_body_bytes,
        metrics=metrics,
    )


def create_withdrawal_app(
    settings: WithdrawalSettings | None = None,
    *,
    core_settings: Settings | None = None,
    background: bool = True,
    verifier: TokenVerifier | None = None,
    wallet_api: httpx.AsyncClient | None = None,
) -> FastAPI:
    """``background=False``: the routes alone, without the broker, the consumer, the relay and
    the jobs (tests that run those by hand). ``verifier`` and ``wallet_api`` stand in for the
    identity provider's keys and wallet-api's HTTP in unit tests."""
    spec = service_spec(settings or get_withdrawal_settings(), wallet_api=wallet_api)
    return build_app(spec, settings=core_settings, verifier=verifier, background=background)


def run_withdrawal_orchestrator(port: int | None, host: str) -> None:
    """Serve withdrawal-orchestrator (the process entry point): one process, the consumer, the
    relay and the jobs in it."""
    configure_logging(SERVICE)
    settings = get_withdrawal_settings()
    refuse_insecure_start(settings)
    serve(settle_heap_once_started(create_withdrawal_app(settings)), host=host, port=port or settings.port)
