"""personal-web-bff settings: ``HIWALLET_PERSONAL_WEB_BFF_*`` with local defaults (the secrets
among them ship in this repository: a production start refuses them)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from schwifty import IBAN

__all__ = ["PersonalWebBffSettings", "get_personal_web_bff_settings"]


class PersonalWebBffSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_PERSONAL_WEB_BFF_", extra="ignore")

    port: int = 8002
    # Where browsers reach this BFF (its cookies' origin, the CSRF check's origin, the redirect URI).
    public_url: str = "http://127.0.0.1:8002"
    issuer: str = "http://127.0.0.1:8080/realms/hiwallet"
    client_id: str = "personal-web-bff"
    client_secret: SecretStr = SecretStr("dev-personal-web-bff-secret")
    # The cookie-sealing key ring, "id:base64url-32-bytes[,older…]" (core.bff.parse_key_ring).
    session_keys: SecretStr = SecretStr("dev1:ZGV2LXBlcnNvbmFsLXdlYi1iZmYta2V5LTMyYnl0ZXM")
    wallet_api_url: str = "http://127.0.0.1:8010"
    withdrawals_url: str = "http://127.0.0.1:8011"
    onboarding_url: str = "http://127.0.0.1:8012"
    # The card provider (stripe-fake locally): its hosted checkout takes the card, never this BFF.
    stripe_url: str = "http://127.0.0.1:8096"
    stripe_api_key: SecretStr = SecretStr("sk_test_hiwallet_dev")
    # Our account at the bank (bank-fake's receiver_iban locally): the home page tells a person
    # to wire money here, the wallet named in the reference (topup-webhook finds it there).
    bank_iban: str = "TR420006100000000012345678"
    # How far back the top-up page looks for the credited payment in the wallet's movements.
    topup_search_pages: int = 5
    # The versions of the user agreement and the privacy notice a person accepts here (onboarding
    # refuses another, naming the current one: the two must move together).
    consent_version: str = "2026-01"
    # Each call to an internal service: a page waits at most this long for it.
    upstream_timeout_s: float = 5.0
    identity_timeout_s: float = 5.0
    statement_page_size: int = 20

    @field_validator("bank_iban")
    @classmethod
    def _an_iban(cls, value: str) -> str:
        # A wrong account shown to every person would send their money elsewhere: refuse to start.
        return str(IBAN(value).compact)


@lru_cache(maxsize=1)
def get_personal_web_bff_settings() -> PersonalWebBffSettings:
    return PersonalWebBffSettings()
