"""business-web-bff, declared: /health, /ready and /metrics (core.service), nothing else yet."""

from __future__ import annotations

from fastapi import FastAPI

from hiwallet.business_web_bff.settings import get_business_web_bff_settings
from hiwallet.core.http import serve, settle_heap_once_started
from hiwallet.core.logging import configure_logging
from hiwallet.core.service import Runtime, ServiceSpec, build_app
from hiwallet.core.settings import refuse_insecure_start

__all__ = ["SERVICE", "create_business_web_bff_app", "run_business_web_bff", "service_spec"]

SERVICE = "business-web-bff"


async def _nothing(rt: Runtime) -> None:
    """No parts yet: no database, no broker, no upstream."""


def service_spec() -> ServiceSpec:
    return ServiceSpec(SERVICE, _nothing)


def create_business_web_bff_app() -> FastAPI:
    return build_app(service_spec())


def run_business_web_bff(port: int | None, host: str) -> None:
    """Serve business-web-bff (the process entry point)."""
    configure_logging(SERVICE)
    settings = get_business_web_bff_settings()
    refuse_insecure_start(settings)
    serve(settle_heap_once_started(create_business_web_bff_app()), host=host, port=port or settings.port)
