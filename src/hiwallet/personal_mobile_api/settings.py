"""personal-mobile-api settings: ``HIWALLET_PERSONAL_MOBILE_API_*`` with local defaults."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from hiwallet.core.edge import EdgeSettings


class PersonalMobileApiSettings(EdgeSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_PERSONAL_MOBILE_API_", extra="ignore")

    port: int = 8001
    # http://host:port, or unix:/absolute/path for a service on this host (docs/front-apis.md)
    wallet_api_url: str = "http://127.0.0.1:8010"
    withdrawals_url: str = "http://127.0.0.1:8011"
    onboarding_url: str = "http://127.0.0.1:8012"
    # The currencies the document names (as wallet-api's and the orchestrator's settings).
    currencies: list[str] = Field(default_factory=lambda: ["TRY", "EUR", "USD"])


@lru_cache(maxsize=1)
def get_personal_mobile_api_settings() -> PersonalMobileApiSettings:
    return PersonalMobileApiSettings()
