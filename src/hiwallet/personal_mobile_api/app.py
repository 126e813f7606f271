"""personal-mobile-api, declared: a front API (core.edge) with no database and no broker, its
upstreams (wallet-api, withdrawal-orchestrator, onboarding), people's tokens only."""

from __future__ import annotations

from fastapi import FastAPI

from hiwallet.contracts.front import WALLET, WITHDRAWALS, front_document
from hiwallet.contracts.onboarding_api import (
    CodeIn,
    CompleteIn,
    ConsentIn,
    IdentityIn,
    PhoneIn,
    RegistrationIn,
)
from hiwallet.core.auth import TokenVerifier
from hiwallet.core.edge import front_spec
from hiwallet.core.http import serve, settle_heap_once_started
from hiwallet.core.logging import configure_logging
from hiwallet.core.service import ServiceSpec, build_app
from hiwallet.core.settings import refuse_insecure_start
from hiwallet.personal_mobile_api.routes import ONBOARDING, router
from hiwallet.personal_mobile_api.settings import PersonalMobileApiSettings, get_personal_mobile_api_settings

__all__ = ["SERVICE", "create_personal_mobile_api_app", "run_personal_mobile_api", "service_spec"]

SERVICE = "personal-mobile-api"


def service_spec(
    settings: PersonalMobileApiSettings, *, verifier: TokenVerifier | None = None
) -> ServiceSpec:
    upstreams = {
        WALLET: settings.wallet_api_url,
        WITHDRAWALS: settings.withdrawals_url,
        ONBOARDING: settings.onboarding_url,
    }
    document = front_document(
        settings.currencies,
        f"A customer's access token (customer realm); its audience holds {SERVICE!r}, 'hiwallet-api'.",
        RegistrationIn,
        CodeIn,
        CompleteIn,
        PhoneIn,
        IdentityIn,
        ConsentIn,
    )
    return front_spec(SERVICE, settings, upstreams, "person", [router], openapi=document, verifier=verifier)


def create_personal_mobile_api_app(
    settings: PersonalMobileApiSettings | None = None, *, verifier: TokenVerifier | None = None
) -> FastAPI:
    settings = settings or get_personal_mobile_api_settings()
    return build_app(service_spec(settings, verifier=verifier))


def run_personal_mobile_api(port: int | None, host: str) -> None:
    """Serve personal-mobile-api (the process entry point)."""
    configure_logging(SERVICE)
    settings = get_personal_mobile_api_settings()
    refuse_insecure_start(settings)
    serve(
        settle_heap_once_started(create_personal_mobile_api_app(settings)),
        host=host,
        port=port or settings.port,
        http=settings.http_server,
    )
