"""business-web-bff settings: ``HIWALLET_BUSINESS_WEB_BFF_*``."""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class BusinessWebBffSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_BUSINESS_WEB_BFF_", extra="ignore")

    port: int = 8004


@lru_cache(maxsize=1)
def get_business_web_bff_settings() -> BusinessWebBffSettings:
    return BusinessWebBffSettings()
