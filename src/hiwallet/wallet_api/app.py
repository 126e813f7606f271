"""The wallet-api app: the shared HTTP factory, the token verifier, the pool, the routes and the
idempotency purge (a PeriodicJob), built by core.service; no broker (the architecture's rule)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import Response

from hiwallet.contracts.databases import DATABASES
from hiwallet.contracts.staff import StaffDirectory
from hiwallet.core import db
from hiwallet.core.auth import TrustedIssuer
from hiwallet.core.http import (
    LeanRoute,
    ReadyCheck,
    create_app,
    multiprocess_metrics,
    problem_response,
    serve,
    settle_heap_once_started,
)
from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.logging import configure_logging
from hiwallet.core.service import DatabaseSpec, Runtime, ServiceSpec, service_lifespan
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.ledger import Fees, LedgerError, LedgerStore, init_connection
from hiwallet.reconciliation import Reconciler, get_reconciliation_settings
from hiwallet.wallet_api import errors
from hiwallet.wallet_api.identities import CustomerIdentities
from hiwallet.wallet_api.limits import limits_router
from hiwallet.wallet_api.reconciliation_routes import reconciliation_router
from hiwallet.wallet_api.routes import document, lean_router, router
from hiwallet.wallet_api.service import WalletService
from hiwallet.wallet_api.settings import WalletApiSettings, get_wallet_api_settings
from hiwallet.wallet_api.staff_desk import StaffDesk
from hiwallet.wallet_api.staff_money_routes import staff_money_router
from hiwallet.wallet_api.staff_routes import staff_router
from hiwallet.wallet_api.webhook_routes import webhook_router

log = structlog.get_logger(__name__)

SERVICE = "wallet-api"
# Advisory lock key in hiwallet_wallet (locks are per database; wallet-consumer's are "hwwr" and
# "hwwp"): one round of the idempotency purge at a time across instances and workers.
PURGE_LOCK_KEY = 0x6877_6169  # "hwai"


def issuers_of(settings: WalletApiSettings) -> list[TrustedIssuer]:
    return [
        TrustedIssuer.keycloak(
            settings.customer_issuer_base, settings.customer_realm, "customer", audience=settings.audience
        ),
        TrustedIssuer.keycloak(
            settings.staff_issuer_base, settings.staff_realm, "staff", audience=settings.audience
        ),
    ]


async def _on_ledger_error(request: Request, exc: Exception) -> Response:
    """A ledger error the service let through (a refusal of input it handed on as it was)."""
    problem = errors.from_ledger(exc) if isinstance(exc, LedgerError) else None
    if problem is None:
        # Not a refusal this service expects: a defect, left to the edge (a logged 500).
        raise exc
    return problem_response(problem, request.url.path)


def purge_job(
    service: WalletService, settings: WalletApiSettings, connect: Callable[[], Awaitable[asyncpg.Connection]]
) -> PeriodicJob:
    """The idempotency records past their retention, one instance (or worker) a round."""
    return PeriodicJob(
        "wallet-api-idempotency-purge",
        settings.purge_interval_s,
        PURGE_LOCK_KEY,
        service.purge_idempotency,
        connect,
    )


def service_spec(settings: WalletApiSettings, *, database: str | None = None) -> ServiceSpec:
    """wallet-api, declared: the wallet database (the ledger's codecs on each connection), the
    issuers it accepts (customers and staff), no broker (the architecture's rule), and in
    ``setup`` the service, the staff endpoints' clients and the idempotency purge."""

    async def setup(rt: Runtime) -> None:
        app, pool = rt.app, rt.db
        service = app.state.service = WalletService(
            pool, LedgerStore.from_settings(pool), Fees.from_settings(), settings
        )
        # Staff endpoints: who the employee is, asked of staff-admin on every request (no
        # cache); customers' requests never touch it.
        staff_directory = app.state.staff_directory = StaffDirectory(
            settings.staff_admin_url,
            timeout_s=settings.staff_admin_timeout_s,
            max_connections=settings.staff_admin_max_connections,
        )
        rt.close(staff_directory.aclose)
        identities = CustomerIdentities(settings)
        rt.close(identities.aclose)
        app.state.staff_desk = StaffDesk(pool, service.ledger, settings, identities)
        rt.job(purge_job(service, settings, rt.connect()))
        # A reconciliation round on demand (staff): the same round as wallet-consumer's job,
        # under the same lock, on a connection of its own for the lock.
        app.state.reconciler = Reconciler(pool, get_reconciliation_settings())
        app.state.reconciliation_connect = rt.connect()

    return ServiceSpec(
        SERVICE,
        setup,
        # As the wallet database's application role, whatever the database's name (tests and
        # the bench use fresh ones): db.create_pool refuses the owner or a superuser.
        database=DatabaseSpec(
            database or settings.database or DATABASES["wallet"],
            db.app_role("wallet"),
            settings.db_pool_max_size,
            init=init_connection,
        ),
        issuers=lambda: issuers_of(settings),
    )


def create_wallet_api_app(
    settings: WalletApiSettings | None = None,
    *,
    database: str | None = None,
    core_settings: Settings | None = None,
) -> FastAPI:
    """``database`` overrides hiwallet_wallet (tests and the bench use fresh ones)."""
    settings = settings or get_wallet_api_settings()
    checks: dict[str, ReadyCheck] = {}
    spec = service_spec(settings, database=database)
    app = create_app(
        SERVICE,
        ready_checks=checks,
        lifespan=service_lifespan(spec, checks, settings=core_settings),
        max_body_bytes=settings.max_body_bytes,
        extra_problem_handlers=[(LedgerError, _on_ledger_error)],
        # POST /v1/transfers (nearly all of wallet-api's traffic under load) and /v1/promos
        hot_routes=[route for route in lean_router.routes if isinstance(route, LeanRoute)],
    )
    app.include_router(lean_router)
    app.include_router(router)
    app.include_router(limits_router)
    app.include_router(staff_router)
    app.include_router(staff_money_router)
    app.include_router(webhook_router)
    app.include_router(reconciliation_router)
    # The schemas the document refers to by hand, the supported currencies, the links.
    document(app, settings.currencies)
    return app


def run_wallet_api(port: int | None, host: str, workers: int | None = None) -> None:
    """Serve wallet-api (the process entry point): in this process, or with ``workers`` worker
    processes (settings: ``HIWALLET_WALLET_API_WORKERS``), each entering at :func:`worker_app`."""
    configure_logging(SERVICE)
    settings = get_wallet_api_settings()
    refuse_insecure_start(settings)  # the workers read the same environment
    workers = settings.workers if workers is None else workers
    port = port or settings.port
    uds = settings.uds or None
    if workers <= 1:
        serve(
            settle_heap_once_started(create_wallet_api_app(settings)),
            host=host,
            port=port,
            uds=uds,
            http=settings.http_server,
        )
        return
    with multiprocess_metrics(SERVICE):
        serve(
            "hiwallet.wallet_api.app:worker_app",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            uds=uds,
            http=settings.http_server,
        )


def worker_app() -> FastAPI:
    """The entry point of each worker process (uvicorn calls it once in each fresh
    interpreter): its logging, and its app from the environment's settings, whose heap is
    settled once the app has started."""
    configure_logging(SERVICE)
    return settle_heap_once_started(create_wallet_api_app())
