"""The wallet-api app: the shared HTTP factory, the token verifier, the pool and the routes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import asyncpg
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import Response

from hiwallet.contracts.databases import DATABASES
from hiwallet.contracts.staff import StaffDirectory
from hiwallet.core import db
from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.http import (
    LeanRoute,
    ReadyCheck,
    create_app,
    multiprocess_metrics,
    problem_response,
    serve,
    settle_heap_once_started,
)
from hiwallet.core.logging import configure_logging
from hiwallet.core.settings import Settings, get_settings
from hiwallet.ledger import Fees, LedgerError, LedgerStore, init_connection
from hiwallet.wallet_api import errors
from hiwallet.wallet_api.identities import CustomerIdentities
from hiwallet.wallet_api.routes import document, lean_router, router
from hiwallet.wallet_api.service import WalletService
from hiwallet.wallet_api.settings import WalletApiSettings, get_wallet_api_settings
from hiwallet.wallet_api.staff_desk import StaffDesk
from hiwallet.wallet_api.staff_money_routes import staff_money_router
from hiwallet.wallet_api.staff_routes import staff_router

log = structlog.get_logger(__name__)


def verifier_for(settings: WalletApiSettings) -> TokenVerifier:
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


async def _create_pool(database: str, core: Settings, max_size: int) -> asyncpg.Pool:
    # As the wallet database's application role, whatever the database's name (tests and the
    # bench use fresh ones): db.create_pool refuses the owner or a superuser.
    return await db.create_pool(
        database, role=db.app_role("wallet"), settings=core, max_size=max_size, init=init_connection
    )


async def _on_ledger_error(request: Request, exc: Exception) -> Response:
    """A ledger error the service let through (a refusal of input it handed on as it was)."""
    problem = errors.from_ledger(exc) if isinstance(exc, LedgerError) else None
    if problem is None:
        # Not a refusal this service expects: a defect, left to the edge (a logged 500).
        raise exc
    return problem_response(problem, request.url.path)


async def _purge_forever(service: WalletService, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            purged = await service.purge_idempotency()
            if purged:
                log.info("idempotency records purged", count=purged)
        except Exception as exc:  # the next round tries again
            log.warning("idempotency purge failed", error=repr(exc))


def create_wallet_api_app(
    settings: WalletApiSettings | None = None,
    *,
    database: str | None = None,
    core_settings: Settings | None = None,
) -> FastAPI:
    """``database`` overrides hiwallet_wallet (tests and the bench use fresh ones)."""
    settings = settings or get_wallet_api_settings()
    core = core_settings or get_settings()
    checks: dict[str, ReadyCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        name = database or settings.database or DATABASES["wallet"]
        pool = await _create_pool(name, core, settings.db_pool_max_size)
        verifier = verifier_for(settings)
        store = LedgerStore.from_settings(pool)
        app.state.verifier = verifier
        app.state.service = WalletService(pool, store, Fees.from_settings(), settings)
        # Staff endpoints: who the employee is, asked of staff-admin on every request (no
        # cache); customers' requests never touch it.
        staff_directory = StaffDirectory(
            settings.staff_admin_url,
            timeout_s=settings.staff_admin_timeout_s,
            max_connections=settings.staff_admin_max_connections,
        )
        identities = CustomerIdentities(settings)
        app.state.staff_directory = staff_directory
        app.state.staff_desk = StaffDesk(pool, app.state.service.ledger, settings, identities)

        async def database_ready() -> None:
            await pool.fetchval("SELECT 1")

        checks["database"] = database_ready
        purger = asyncio.create_task(_purge_forever(app.state.service, settings.purge_interval_s))
        try:
            yield
        finally:
            purger.cancel()
            with suppress(asyncio.CancelledError):
                await purger
            await verifier.aclose()
            await staff_directory.aclose()
            await identities.aclose()
            await pool.close()

    app = create_app(
        "wallet-api",
        ready_checks=checks,
        lifespan=lifespan,
        max_body_bytes=settings.max_body_bytes,
        extra_problem_handlers=[(LedgerError, _on_ledger_error)],
        # POST /v1/transfers (nearly all of wallet-api's traffic under load) and /v1/promos
        hot_routes=[route for route in lean_router.routes if isinstance(route, LeanRoute)],
    )
    app.include_router(lean_router)
    app.include_router(router)
    app.include_router(staff_router)
    app.include_router(staff_money_router)
    # The schemas the document refers to by hand, the supported currencies, the links.
    document(app, settings.currencies)
    return app


def run_wallet_api(port: int | None, host: str, workers: int | None = None) -> None:
    """Serve wallet-api (the process entry point): in this process, or with ``workers`` worker
    processes (settings: ``HIWALLET_WALLET_API_WORKERS``), each entering at :func:`worker_app`."""
    configure_logging("wallet-api")
    settings = get_wallet_api_settings()
    workers = settings.workers if workers is None else workers
    port = port or settings.port
    if workers <= 1:
        serve(settle_heap_once_started(create_wallet_api_app(settings)), host=host, port=port)
        return
    with multiprocess_metrics("wallet-api"):
        serve("hiwallet.wallet_api.app:worker_app", factory=True, workers=workers, host=host, port=port)


def worker_app() -> FastAPI:
    """The entry point of each worker process (uvicorn calls it once in each fresh
    interpreter): its logging, and its app from the environment's settings, whose heap is
    settled once the app has started."""
    configure_logging("wallet-api")
    return settle_heap_once_started(create_wallet_api_app())
