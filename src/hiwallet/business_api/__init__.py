"""business-api: merchants' systems' one door, client-credentials tokens (no database, no
broker; core.edge; docs/front-apis.md)."""

from hiwallet.business_api.app import SERVICE, create_business_api_app, run_business_api
from hiwallet.business_api.settings import BusinessApiSettings, get_business_api_settings

__all__ = [
    "SERVICE",
    "BusinessApiSettings",
    "create_business_api_app",
    "get_business_api_settings",
    "run_business_api",
]
