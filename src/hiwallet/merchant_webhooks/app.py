"""The merchant-webhooks app: no ingress (health, readiness and metrics on its port), the wallet
database as its own role (it reads events and endpoints, writes deliveries and attempts, and
nothing of the ledger: grants.sql), the dispatcher and the retention's rounds as its background
parts."""

from __future__ import annotations

import time

import structlog
from fastapi import FastAPI
from prometheus_client import Counter

from hiwallet.contracts.databases import DATABASES, service_role
from hiwallet.core.http import ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.logging import configure_logging
from hiwallet.core.service import DatabaseSpec, Runtime, ServiceSpec, service_lifespan
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.merchant_webhooks.dispatcher import PURGE_LOCK_KEY, Attempt, Clock, Dispatcher
from hiwallet.merchant_webhooks.settings import MerchantWebhooksSettings, get_merchant_webhooks_settings

__all__ = ["SERVICE", "create_merchant_webhooks_app", "run_merchant_webhooks", "service_spec"]

log = structlog.get_logger(__name__)

SERVICE = "merchant-webhooks"

ATTEMPTS = Counter("hiwallet_webhook_attempts_total", "Webhook delivery attempts, by outcome", ["outcome"])


def _count(attempt: Attempt) -> None:
    ATTEMPTS.labels("delivered" if attempt.ok else "failed").inc()


def service_spec(
    settings: MerchantWebhooksSettings, *, database: str | None = None, clock: Clock = time.time
) -> ServiceSpec:
    async def setup(rt: Runtime) -> None:
        # The app's own registry (several apps fit in one test process).
        attempts = Counter(
            "hiwallet_webhook_attempts",
            "Webhook delivery attempts, by outcome",
            ["outcome"],
            registry=rt.app.state.metrics_registry,
        )

        def count(attempt: Attempt) -> None:
            attempts.labels("delivered" if attempt.ok else "failed").inc()

        dispatcher = rt.app.state.dispatcher = Dispatcher(rt.db, settings, clock=clock, on_attempt=count)
        rt.close(dispatcher.aclose)
        connect = rt.connect()

        async def dispatch() -> None:
            await dispatcher.run(connect)

        rt.jobs.append(("dispatcher", dispatch))
        purged = Counter(
            "hiwallet_webhook_events_purged",
            "Webhook events deleted past the retention, with their deliveries and attempts",
            registry=rt.app.state.metrics_registry,
        )

        async def purge() -> int:
            count = await dispatcher.purge()
            purged.inc(count)
            return count

        retention = PeriodicJob(
            "webhook-retention", settings.purge_interval_s, PURGE_LOCK_KEY, purge, connect
        )
        rt.jobs.append(("webhook-retention", retention.run_forever))

    return ServiceSpec(
        SERVICE,
        setup,
        database=DatabaseSpec(
            database or settings.database or DATABASES["wallet"],
            service_role("wallet", "merchant_webhooks"),  # its own role: nothing of the ledger
            settings.db_pool_max_size,
        ),
    )


def create_merchant_webhooks_app(
    settings: MerchantWebhooksSettings | None = None,
    *,
    database: str | None = None,
    core_settings: Settings | None = None,
    clock: Clock = time.time,
) -> FastAPI:
    """``database`` overrides hiwallet_wallet (tests and the bench use fresh ones); ``clock``
    is the dispatcher's (tests move it through the schedule)."""
    settings = settings or get_merchant_webhooks_settings()
    checks: dict[str, ReadyCheck] = {}
    spec = service_spec(settings, database=database, clock=clock)
    return create_app(
        SERVICE, ready_checks=checks, lifespan=service_lifespan(spec, checks, settings=core_settings)
    )


def run_merchant_webhooks(port: int | None, host: str) -> None:
    """Serve merchant-webhooks (the process entry point). More instances share the work
    (deliveries are claimed with SKIP LOCKED; one fan-out at a time)."""
    configure_logging(SERVICE)
    settings = get_merchant_webhooks_settings()
    refuse_insecure_start(settings)
    serve(
        settle_heap_once_started(create_merchant_webhooks_app(settings)),
        host=host,
        port=port or settings.port,
    )
