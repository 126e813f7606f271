"""backoffice-bff settings: ``HIWALLET_BACKOFFICE_BFF_*`` with local defaults.

The client secret and the session keys ship with development values; production refuses them
(core.settings.refuse_insecure_start)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["BackofficeBffSettings", "get_backoffice_bff_settings"]


class BackofficeBffSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_BACKOFFICE_BFF_", extra="ignore")

    port: int = 8005
    # Where the employees' browsers reach this BFF: the cookies' names and flags (https ->
    # __Host- and Secure) and the redirect URI registered in the staff realm follow from it.
    public_url: str = "http://127.0.0.1:8005"
    staff_issuer: str = "http://127.0.0.1:8180/realms/hiwallet-staff"
    client_id: str = "backoffice-bff"
    client_secret: SecretStr = SecretStr("dev-backoffice-bff-secret")
    # The cookies' AES-GCM key ring: "id:base64url(32 bytes)[,id:...]", the first seals.
    session_keys: SecretStr = SecretStr("dev:ZGV2LWJhY2tvZmZpY2UtYmZmLWtleS0zMi1ieXRlcyE")
    staff_admin_url: str = "http://127.0.0.1:8013"
    wallet_api_url: str = "http://127.0.0.1:8010"
    withdrawals_url: str = "http://127.0.0.1:8011"
    # Each internal call: an employee waits for a page, not for a hung service.
    upstream_timeout_s: float = 5.0
    oidc_timeout_s: float = 5.0
    # Rows a list page asks of its service (employees, audit, campaigns …): next and previous
    # links page through the rest. Bounded by the smallest upstream ceiling (wallet-api's 200).
    page_size: int = Field(default=50, ge=1, le=200)


@lru_cache(maxsize=1)
def get_backoffice_bff_settings() -> BackofficeBffSettings:
    return BackofficeBffSettings()
