"""The onboarding app: the shared HTTP factory, the pool (as the onboarding database's
application role), one HTTP client for the services and providers it calls, the routes, the
sweep (core.jobs.PeriodicJob) that finishes what a failed call left undone, and the wires
consumer (wires.py), which consumes once RabbitMQ answers (core.service builds it all)."""

from __future__ import annotations

import asyncpg
import httpx
import structlog
from fastapi import FastAPI

from hiwallet.core.auth import TrustedIssuer
from hiwallet.core.http import ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.logging import configure_logging
from hiwallet.core.messaging import Messaging
from hiwallet.core.service import Runtime, ServiceSpec, service_lifespan
from hiwallet.core.settings import Settings
from hiwallet.onboarding.clients import IdentityAdmin, ServiceToken, Sms, WalletApi
from hiwallet.onboarding.crypto import Hasher, KeyRing
from hiwallet.onboarding.mail import Mailer
from hiwallet.onboarding.metrics import OnboardingMetrics
from hiwallet.onboarding.registry import Registry
from hiwallet.onboarding.routes import router
from hiwallet.onboarding.service import OnboardingService
from hiwallet.onboarding.settings import OnboardingSettings, check_production, get_onboarding_settings
from hiwallet.onboarding.store import database_spec
from hiwallet.onboarding.wires import WiresSettings, wires_consumer, wires_topology

log = structlog.get_logger(__name__)

SERVICE = "onboarding"
# Advisory lock key in hiwallet_onboarding: one sweep round at a time across instances.
SWEEP_LOCK_KEY = 0x6877_6F62  # "hwob"
# Connections to identity, wallet-api, the SMS provider and the registry at once.
MAX_CONNECTIONS = 50


def issuers_of(settings: OnboardingSettings) -> list[TrustedIssuer]:
    # Staff tokens are recognised (and refused, 403), as wallet-api refuses them on customer
    # endpoints.
    return [
        TrustedIssuer.keycloak(
            settings.customer_issuer_base, settings.customer_realm, "customer", audience=settings.audience
        ),
        TrustedIssuer.keycloak(
            settings.staff_issuer_base, settings.staff_realm, "staff", audience=settings.audience
        ),
    ]


def build_service(
    pool: asyncpg.Pool,
    settings: OnboardingSettings,
    http: httpx.AsyncClient,
    metrics: OnboardingMetrics | None = None,
) -> OnboardingService:
    """The service and its clients, on ``http`` (the CLI builds one too)."""
    token = ServiceToken(http, settings)
    return OnboardingService(
        pool,
        settings,
        ring=KeyRing.parse(settings.data_keys.get_secret_value()),
        hasher=Hasher.parse(settings.hash_key.get_secret_value()),
        identity=IdentityAdmin(token, settings),
        wallet_api=WalletApi(token, settings),
        mailer=Mailer(settings),
        sms=Sms(http, settings),
        registry=Registry(http, settings),
        metrics=metrics,
    )


def service_spec(settings: OnboardingSettings, wires: WiresSettings) -> ServiceSpec:
    """onboarding, declared: its database, the issuers it accepts (customers; staff, to refuse
    them), the events' topology when the wires consumer is on, and in ``setup`` one HTTP client
    for what it calls, the service, the sweep and the wires consumer."""

    async def setup(rt: Runtime) -> None:
        app, pool = rt.app, rt.db
        http = httpx.AsyncClient(limits=httpx.Limits(max_connections=MAX_CONNECTIONS))
        rt.close(http.aclose)
        service = app.state.service = build_service(pool, settings, http, app.state.onboarding_metrics)
        app.state.trusted_proxies = settings.proxies
        app.state.sweep = rt.job(
            PeriodicJob(
                "onboarding-sweep", settings.sweep_interval_s, SWEEP_LOCK_KEY, service.sweep, rt.connect()
            )
        )
        if rt.broker is None:  # no broker: background=False, or the wires consumer off
            return
        # The first own wire -> verified (wires.py): a consumer of hiwallet.events.
        app.state.wires = rt.consumer(
            "wires",
            wires_consumer(
                broker=rt.bus,
                pool=pool,
                http=http,
                wallet_api=service.wallet_api,
                hasher=service.hasher,
                registry=app.state.metrics_registry,
                settings=wires,
            ),
        )

    return ServiceSpec(
        SERVICE,
        setup,
        database=database_spec(settings),
        issuers=lambda: issuers_of(settings),
        # Off: onboarding runs without a broker (the wires wait in their queue).
        messaging=Messaging(wires_topology(wires)) if wires.wires_enabled else None,
        consumer_stop_timeout_s=wires.stop_timeout_s,
    )


def create_onboarding_app(
    settings: OnboardingSettings | None = None,
    *,
    core_settings: Settings | None = None,
    background: bool = True,
    wires_settings: WiresSettings | None = None,
) -> FastAPI:
    """``background=False``: without the sweep and the wires consumer (tests that run the
    sweep by hand; no broker)."""
    settings = settings or get_onboarding_settings()
    # The keys are read now: a bad key refuses the start, not the first registration.
    KeyRing.parse(settings.data_keys.get_secret_value())
    Hasher.parse(settings.hash_key.get_secret_value())
    checks: dict[str, ReadyCheck] = {}
    spec = service_spec(settings, wires_settings or WiresSettings())
    app = create_app(
        SERVICE,
        ready_checks=checks,
        lifespan=service_lifespan(spec, checks, settings=core_settings, background=background),
        max_body_bytes=settings.max_body_bytes,
    )
    app.state.onboarding_metrics = OnboardingMetrics(app.state.metrics_registry)
    app.include_router(router)
    return app


def run_onboarding(port: int | None, host: str) -> None:
    """Serve onboarding (the process entry point)."""
    configure_logging(SERVICE)
    settings = get_onboarding_settings()
    wires_settings = WiresSettings()
    check_production(settings, wires_settings)
    serve(
        settle_heap_once_started(create_onboarding_app(settings, wires_settings=wires_settings)),
        host=host,
        port=port or settings.port,
    )
