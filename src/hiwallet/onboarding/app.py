"""The onboarding app: the shared HTTP factory, the pool (as the onboarding database's
application role), one HTTP client for the services and providers it calls, the routes, and
the sweep (core.jobs.PeriodicJob) that finishes what a failed call left undone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import asyncpg
import httpx
import structlog
from fastapi import FastAPI

from hiwallet.core import db
from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.background import supervised
from hiwallet.core.http import ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.logging import configure_logging
from hiwallet.core.settings import Settings, get_settings
from hiwallet.onboarding.clients import IdentityAdmin, ServiceToken, Sms, WalletApi
from hiwallet.onboarding.crypto import Hasher, KeyRing
from hiwallet.onboarding.mail import Mailer
from hiwallet.onboarding.metrics import OnboardingMetrics
from hiwallet.onboarding.registry import Registry
from hiwallet.onboarding.routes import router
from hiwallet.onboarding.service import OnboardingService
from hiwallet.onboarding.settings import OnboardingSettings, check_production, get_onboarding_settings
from hiwallet.onboarding.store import create_onboarding_pool, database_of
from hiwallet.onboarding.wires import WiresSettings, wires_running

log = structlog.get_logger(__name__)

SERVICE = "onboarding"
# Advisory lock key in hiwallet_onboarding: one sweep round at a time across instances.
SWEEP_LOCK_KEY = 0x6877_6F62  # "hwob"
# Connections to identity, wallet-api, the SMS provider and the registry at once.
MAX_CONNECTIONS = 50


def verifier_for(settings: OnboardingSettings) -> TokenVerifier:
    # Staff tokens are recognised (and refused, 403), as wallet-api refuses them on customer
    # endpoints.
    return TokenVerifier(
        [
            TrustedIssuer.keycloak(
                settings.customer_issuer_base, settings.customer_realm, "customer", audience=settings.audience
            ),
            TrustedIssuer.keycloak(
                settings.staff_issuer_base, settings.staff_realm, "staff", audience=settings.audience
            ),
        ]
    )


def dedicated_connection(
    settings: OnboardingSettings, core: Settings
) -> Callable[[], Awaitable[asyncpg.Connection]]:
    return db.dedicated_connection(database_of(settings), db.app_role("onboarding"), core)


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
    core = core_settings or get_settings()
    # The keys are read now: a bad key refuses the start, not the first registration.
    KeyRing.parse(settings.data_keys.get_secret_value())
    Hasher.parse(settings.hash_key.get_secret_value())
    checks: dict[str, ReadyCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_onboarding_pool(settings, core)
        http = httpx.AsyncClient(limits=httpx.Limits(max_connections=MAX_CONNECTIONS))
        service = app.state.service = build_service(pool, settings, http, metrics)
        app.state.verifier = verifier_for(settings)
        app.state.trusted_proxies = settings.proxies

        async def database_ready() -> None:
            await pool.fetchval("SELECT 1")

        checks["database"] = database_ready
        tasks: list[asyncio.Task[None]] = []
        if background:
            sweep = app.state.sweep = PeriodicJob(
                "onboarding-sweep",
                settings.sweep_interval_s,
                SWEEP_LOCK_KEY,
                service.sweep,
                dedicated_connection(settings, core),
            )
            tasks.append(asyncio.create_task(supervised("sweep", sweep.run_forever)))
        try:
            # The first own wire -> verified (wires.py): a consumer of hiwallet.events.
            async with wires_running(
                pool=pool,
                core=core,
                http=http,
                wallet_api=service.wallet_api,
                hasher=service.hasher,
                registry=app.state.metrics_registry,
                settings=wires_settings,
                enabled=background,
            ) as wires_ready:
                if wires_ready is not None:
                    checks["wires"] = wires_ready
                yield
        finally:
            checks.pop("wires", None)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with suppress(asyncio.CancelledError):
                    await task
            await app.state.verifier.aclose()
            await http.aclose()
            await pool.close()

    app = create_app(SERVICE, ready_checks=checks, lifespan=lifespan, max_body_bytes=settings.max_body_bytes)
    metrics = app.state.onboarding_metrics = OnboardingMetrics(app.state.metrics_registry)
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
