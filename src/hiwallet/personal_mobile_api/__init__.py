"""personal-mobile-api: the mobile app's one door, in the customer's words (no database, no
broker; core.edge; docs/front-apis.md)."""

from hiwallet.personal_mobile_api.app import SERVICE, create_personal_mobile_api_app, run_personal_mobile_api
from hiwallet.personal_mobile_api.settings import PersonalMobileApiSettings, get_personal_mobile_api_settings

__all__ = [
    "SERVICE",
    "PersonalMobileApiSettings",
    "create_personal_mobile_api_app",
    "get_personal_mobile_api_settings",
    "run_personal_mobile_api",
]
