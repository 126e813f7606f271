"""The wallet-api app: the shared HTTP factory, the token verifier, the pool and the routes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import asyncpg
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import Response

from hiwallet.core import db
from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.http import (
    LeanRoute,
    ReadyCheck,
    create_app,
    multiprocess_metrics,
    problem_response,
)
from hiwallet.core.settings import Settings, get_settings
from hiwallet.ledger.errors import LedgerError
from hiwallet.ledger.service import Fees
from hiwallet.ledger.store import LedgerStore, init_connection
from hiwallet.wallet_api import errors
from hiwallet.wallet_api.routes import document, lean_router, router
from hiwallet.wallet_api.service import WalletService
from hiwallet.wallet_api.settings import WalletApiSettings, get_wallet_api_settings

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


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without the default reset query (one round trip per request saved). asyncpg
    still rolls back an open transaction; wallet-api sets no session state, listens to
    nothing, holds no cursors, and takes only transaction-scoped advisory locks."""


async def _create_pool(database: str, core: Settings, max_size: int) -> asyncpg.Pool:
    try:
        pool = await asyncpg.create_pool(
            db.dsn_for(database, core),
            min_size=core.db_pool_min_size,
            max_size=max_size,
            command_timeout=core.db_command_timeout_s,
            server_settings=db.server_settings(core),
            init=init_connection,
            reset=_keep_session,
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise db.DatabaseUnavailable(f"cannot open a pool to {database}: {exc}") from exc
    assert pool is not None
    return pool


async def _on_ledger_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LedgerError)
    return problem_response(errors.from_ledger(exc), request.url.path)


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
        name = database or settings.database or db.DATABASES["wallet"]
        pool = await _create_pool(name, core, settings.db_pool_max_size)
        verifier = verifier_for(settings)
        store = LedgerStore.from_settings(pool, core)
        app.state.verifier = verifier
        app.state.service = WalletService(pool, store, Fees.from_settings(core), settings)

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
    # The schemas the document refers to by hand, the supported currencies, the links.
    document(app, settings.currencies)
    return app


def run_wallet_api(port: int | None, host: str, workers: int | None = None) -> None:
    """Serve wallet-api: in this process, or with ``workers`` worker processes (settings:
    ``HIWALLET_WALLET_API_WORKERS``), each building the app from the environment's settings."""
    import uvicorn

    settings = get_wallet_api_settings()
    workers = settings.workers if workers is None else workers
    # An internal service: the clients' addresses are not used, so uvicorn's proxy-header
    # middleware (on by default, a layer on every request) is off.
    port = port or settings.port
    if workers <= 1:
        uvicorn.run(
            create_wallet_api_app(settings),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
        )
        return
    with multiprocess_metrics("wallet-api"):
        uvicorn.run(
            "hiwallet.wallet_api.app:create_wallet_api_app",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
        )
