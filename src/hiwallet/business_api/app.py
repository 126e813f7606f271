"""business-api, declared: a front API (core.edge) with no database and no broker, its upstreams
(wallet-api, withdrawal-orchestrator), clients' service-account tokens only."""

from __future__ import annotations

from fastapi import FastAPI

from hiwallet.business_api import webhooks
from hiwallet.business_api.routes import router
from hiwallet.business_api.settings import BusinessApiSettings, get_business_api_settings
from hiwallet.contracts.front import WALLET, WITHDRAWALS, front_document
from hiwallet.contracts.public import ProgrammeIn, PromoIn, RefundIn
from hiwallet.contracts.webhook_api import EndpointIn, EndpointPatch
from hiwallet.core.auth import TokenVerifier
from hiwallet.core.edge import front_spec
from hiwallet.core.http import serve, settle_heap_once_started
from hiwallet.core.logging import configure_logging
from hiwallet.core.service import ServiceSpec, build_app
from hiwallet.core.settings import refuse_insecure_start

__all__ = ["SERVICE", "create_business_api_app", "run_business_api", "service_spec"]

SERVICE = "business-api"


def service_spec(settings: BusinessApiSettings, *, verifier: TokenVerifier | None = None) -> ServiceSpec:
    upstreams = {WALLET: settings.wallet_api_url, WITHDRAWALS: settings.withdrawals_url}
    document = front_document(
        settings.currencies,
        "A client-credentials access token (the merchant's client, customer realm) whose audience "
        f"holds {SERVICE!r} and 'hiwallet-api'.",
        PromoIn,
        ProgrammeIn,
        RefundIn,
        EndpointIn,
        EndpointPatch,
    )
    return front_spec(
        SERVICE,
        settings,
        upstreams,
        "service_account",
        [router, webhooks.router],
        openapi=document,
        verifier=verifier,
    )


def create_business_api_app(
    settings: BusinessApiSettings | None = None, *, verifier: TokenVerifier | None = None
) -> FastAPI:
    settings = settings or get_business_api_settings()
    return build_app(service_spec(settings, verifier=verifier))


def run_business_api(port: int | None, host: str) -> None:
    """Serve business-api (the process entry point)."""
    configure_logging(SERVICE)
    settings = get_business_api_settings()
    refuse_insecure_start(settings)
    serve(
        settle_heap_once_started(create_business_api_app(settings)),
        host=host,
        port=port or settings.port,
        http=settings.http_server,
    )
