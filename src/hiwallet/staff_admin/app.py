"""The staff-admin app: the shared HTTP factory, the pool (as the staff-admin database's
application role), the staff realm's verifier and admin client, the routes, and the bootstrap
at start (the administrator role; the first administrator invitation, once); core.service
builds it."""

from __future__ import annotations

import asyncio

import httpx
import structlog
from fastapi import FastAPI

from hiwallet.contracts.databases import DATABASES
from hiwallet.core import db
from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.http import LeanRoute, ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.logging import configure_logging
from hiwallet.core.service import DatabaseSpec, Runtime, ServiceSpec, service_lifespan
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.staff_admin.identity import StaffRealm
from hiwallet.staff_admin.routes import lean_router, router
from hiwallet.staff_admin.service import StaffAdmin
from hiwallet.staff_admin.settings import StaffAdminSettings, get_staff_admin_settings

log = structlog.get_logger(__name__)

SERVICE = "staff-admin"
# The bootstrap needs the staff realm (the invitation); while it cannot be reached the service
# serves anyway (GET /v1/me needs only the database) and tries again this often.
BOOTSTRAP_RETRY_S = 5.0


def database_spec(settings: StaffAdminSettings) -> DatabaseSpec:
    """The staff_admin database (``settings.database``: a clone, in tests) as its application role,
    whatever the database's name (core.db.create_pool refuses the owner or a superuser)."""
    database = settings.database or DATABASES["staff_admin"]
    return DatabaseSpec(database, db.app_role("staff_admin"), settings.db_pool_max_size)


def issuers_of(settings: StaffAdminSettings) -> list[TrustedIssuer]:
    # The staff issuer ONLY (docs/architecture.md): a customer's token is not one of ours.
    return [
        TrustedIssuer.keycloak(settings.staff_issuer_base, settings.staff_realm, "staff", settings.audience)
    ]


async def bootstrap_until_done(service: StaffAdmin) -> None:
    """The bootstrap, retried while the staff realm (or the database) cannot be reached."""
    while True:
        try:
            sent = await service.bootstrap()
        except Exception as exc:  # any failure: logged, retried; the service keeps serving
            log.warning("bootstrap failed; retrying", error=type(exc).__name__, retry_s=BOOTSTRAP_RETRY_S)
            await asyncio.sleep(BOOTSTRAP_RETRY_S)
            continue
        if sent is not None:
            log.info("bootstrap invitation sent", invitation_id=sent["id"])
        return


def service_spec(
    settings: StaffAdminSettings,
    *,
    identity_client: httpx.AsyncClient | None = None,
    bootstrap: bool = True,
) -> ServiceSpec:
    """staff-admin, declared: its database, the staff issuer, and in ``setup`` the staff realm's
    admin client, the service the routes use and the bootstrap (in the background: the service
    serves while the staff realm is away)."""

    async def setup(rt: Runtime) -> None:
        realm = StaffRealm(settings, identity_client)
        rt.close(realm.aclose)
        service = rt.app.state.service = StaffAdmin(rt.db, settings, realm)
        if bootstrap:
            rt.task("bootstrap", lambda: bootstrap_until_done(service))

    return ServiceSpec(
        SERVICE,
        setup,
        database=database_spec(settings),
        issuers=lambda: issuers_of(settings),
    )


def create_staff_admin_app(
    settings: StaffAdminSettings | None = None,
    *,
    core_settings: Settings | None = None,
    verifier: TokenVerifier | None = None,
    identity_client: httpx.AsyncClient | None = None,
    bootstrap: bool = True,
) -> FastAPI:
    """``bootstrap=False``: no administrator role or first invitation at start (tests that do
    it by hand). ``verifier`` stands in for the staff realm's keys (tests; not closed here)."""
    settings = settings or get_staff_admin_settings()
    checks: dict[str, ReadyCheck] = {}
    spec = service_spec(settings, identity_client=identity_client, bootstrap=bootstrap)
    lean_routes = [r for r in lean_router.routes if isinstance(r, LeanRoute)]
    app = create_app(
        SERVICE,
        ready_checks=checks,
        lifespan=service_lifespan(spec, checks, settings=core_settings, verifier=verifier),
        max_body_bytes=settings.max_body_bytes,
        hot_routes=lean_routes,
    )
    app.state.settings = settings
    app.include_router(lean_router)
    app.include_router(router)
    return app


def run_staff_admin(port: int | None, host: str) -> None:
    """Serve staff-admin (the process entry point)."""
    configure_logging(SERVICE)
    settings = get_staff_admin_settings()
    refuse_insecure_start(settings)
    serve(settle_heap_once_started(create_staff_admin_app(settings)), host=host, port=port or settings.port)
