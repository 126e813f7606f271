"""backoffice-bff, declared: the backoffice panel's BFF (core.bff sessions against the STAFF
realm, core.pages in Turkish and English), no database, no broker; it calls staff-admin,
wallet-api and withdrawal-orchestrator with the employee's own token.

Every error is answered as a page (never JSON, never a stack trace): 403 for what the employee
may not do, 503 when a service the page needs is away (what to do: retry shortly), a sign-in
again when the session is gone."""

from __future__ import annotations

from pathlib import Path

import httpx
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import Response

from hiwallet.backoffice_bff.routes import SignInNeeded, render, router, signed_in_again
from hiwallet.backoffice_bff.settings import BackofficeBffSettings, get_backoffice_bff_settings
from hiwallet.backoffice_bff.upstream import STAFF_ADMIN, WALLET, WITHDRAWALS, Upstreams
from hiwallet.core.bff import (
    BffSessions,
    ErrorPage,
    GrantRefused,
    OidcClient,
    OidcClientConfig,
    Sealer,
    SecurityHeaders,
    content_security_policy,
    is_local_http,
    parse_key_ring,
)
from hiwallet.core.http import ProblemError, serve, settle_heap_once_started
from hiwallet.core.http.client import AiohttpTransport
from hiwallet.core.logging import configure_logging
from hiwallet.core.pages import Pages
from hiwallet.core.service import Runtime, ServiceSpec, build_app
from hiwallet.core.settings import InsecureSettings, get_settings, refuse_insecure_start

__all__ = ["SERVICE", "create_backoffice_bff_app", "refuse_plain_http", "run_backoffice_bff", "service_spec"]

SERVICE = "backoffice-bff"
HERE = Path(__file__).resolve().parent
STYLE = (HERE / "static" / "style.css").read_bytes()
# Connections to the internal services, kept alive between pages.
UPSTREAM_CONNECTIONS = 32
log = structlog.get_logger(__name__)


def _sessions(settings: BackofficeBffSettings) -> BffSessions:
    oidc = OidcClient(
        OidcClientConfig(
            settings.staff_issuer,
            settings.client_id,
            settings.client_secret,
            settings.public_url.rstrip("/") + "/auth/callback",
            timeout_s=settings.oidc_timeout_s,
        )
    )
    sealer = Sealer(parse_key_ring(settings.session_keys.get_secret_value()))
    return BffSessions(sealer=sealer, oidc=oidc, public_url=settings.public_url)


def service_spec(settings: BackofficeBffSettings, sessions: BffSessions) -> ServiceSpec:
    async def setup(rt: Runtime) -> None:
        # httpx's API over aiohttp's pool (core.http.AiohttpTransport), as personal-web-bff:
        # a fraction of httpx's own pool's CPU a call. Each call sets its timeout (upstream.py).
        client = httpx.AsyncClient(
            transport=AiohttpTransport(max_connections=UPSTREAM_CONNECTIONS),
            follow_redirects=False,
            trust_env=False,
        )
        rt.closers.append(client.aclose)
        rt.app.state.upstreams = Upstreams(
            client,
            {
                STAFF_ADMIN: settings.staff_admin_url,
                WALLET: settings.wallet_api_url,
                WITHDRAWALS: settings.withdrawals_url,
            },
            settings.upstream_timeout_s,
        )

    return ServiceSpec(SERVICE, setup, routers=[router], max_body_bytes=64_000)


def create_backoffice_bff_app(settings: BackofficeBffSettings | None = None) -> FastAPI:
    settings = settings or get_backoffice_bff_settings()
    sessions = _sessions(settings)
    app = build_app(service_spec(settings, sessions))
    app.state.sessions = sessions
    app.state.page_size = settings.page_size
    app.state.pages = Pages(HERE / "templates", HERE / "locale")

    @app.get("/static/style.css", include_in_schema=False)
    async def style() -> Response:
        return Response(STYLE, media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})

    async def as_page(request: Request, exc: Exception) -> Response:
        # No session, or one the provider would not renew: sign in again (not from the callback
        # itself, whose refusal is a page: a loop back to the provider would hide it).
        no_session = isinstance(exc, SignInNeeded) or (
            isinstance(exc, GrantRefused) and request.method == "GET"
        )
        if no_session and request.url.path != "/auth/callback":
            return signed_in_again(request)
        status = exc.status if isinstance(exc, ProblemError) else 500
        if not isinstance(exc, ProblemError):
            log.error("page.failed", error=type(exc).__name__, path=request.url.path)
        headers = exc.headers if isinstance(exc, ProblemError) else {}
        detail = exc.detail if isinstance(exc, ProblemError) else None
        who = getattr(request.state, "staff", None)
        page = render(
            request,
            "error.html",
            who,
            status=status,
            code=status,
            detail=detail,
            service=getattr(exc, "service", None),
        )
        page.headers.update(headers)
        return page

    app.add_exception_handler(SignInNeeded, as_page)
    app.add_exception_handler(ProblemError, as_page)

    async def unexpected(request: Request) -> Response:
        return render(request, "error.html", None, status=500, code=500)

    # An unexpected error: the error page (500), inside the security headers (added after it).
    app.add_middleware(ErrorPage, render=unexpected)
    identity_origin = settings.staff_issuer.split("/realms/")[0]
    csp = content_security_policy([identity_origin])
    app.add_middleware(SecurityHeaders, csp=csp, hsts=not is_local_http(settings.public_url))
    # SessionCookieWriter (core.bff exports the factory, not the class)
    app.add_middleware(type(sessions.middleware(app)), sessions=sessions)  # type: ignore[arg-type]
    return app


def refuse_plain_http(settings: BackofficeBffSettings, *, production: bool) -> None:
    """Production serves the panel over https only: its cookies are then ``__Host-`` and Secure
    and HSTS is sent (plain http on loopback is the development exception, core.bff)."""
    if production and not settings.public_url.startswith("https://"):
        raise InsecureSettings("HIWALLET_BACKOFFICE_BFF_PUBLIC_URL is not https")


def run_backoffice_bff(port: int | None, host: str) -> None:
    """Serve backoffice-bff (the process entry point)."""
    configure_logging(SERVICE)
    settings = get_backoffice_bff_settings()
    refuse_insecure_start(settings)
    refuse_plain_http(settings, production=get_settings().production)
    serve(
        settle_heap_once_started(create_backoffice_bff_app(settings)), host=host, port=port or settings.port
    )
