"""onboarding settings: ``HIWALLET_ONBOARDING_*`` environment variables with local defaults.

The data keys, the hash key and the secrets below are development defaults, published in this
repository: with ``HIWALLET_PRODUCTION=true`` the service refuses to start on any of them
(``check_production``, core.settings.refuse_insecure_start)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.core.settings import Settings, refuse_insecure_start

# Published in the repository: fine on a laptop, refused with production=true.
DEV_DATA_KEYS = "dev1:ZGV2LW9uYm9hcmRpbmctZGF0YS1rZXktMDEyMzQ1Njc="
DEV_HASH_KEY = "ZGV2LW9uYm9hcmRpbmctaGFzaC1rZXktMDEyMzQ1Njc4OQ=="
DEV_CLIENT_SECRET = "dev-onboarding-secret"


class OnboardingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_ONBOARDING_", extra="ignore")

    port: int = 8012
    # The database name; None means hiwallet_onboarding. Tests use clones.
    database: str | None = None
    db_pool_max_size: int = 10
    max_body_bytes: int = 16_384

    # Field encryption (AES-GCM): "kid:base64key,kid:base64key"; the first encrypts, all
    # decrypt (rotation: put the new key first, run `hiwallet onboarding rekey`, then drop
    # the old one). Keys are 16, 24 or 32 bytes.
    data_keys: SecretStr = SecretStr(DEV_DATA_KEYS)
    # The keyed hash (HMAC-SHA256) of the e-mail, the TCKN and the phone: base64, >= 32 bytes.
    # Changing it orphans every lookup; it is not rotated like the data keys.
    hash_key: SecretStr = SecretStr(DEV_HASH_KEY)

    # The customers' realm: its admin API (users) and token endpoint, and the issuer of the
    # customers' tokens this service accepts.
    customer_issuer_base: str = "http://127.0.0.1:8080"
    customer_realm: str = "hiwallet"
    # The login page's client (login_url's client_id) and where it returns to.
    login_client_id: str = "personal-web-bff"
    login_redirect_uri: str = "http://127.0.0.1:8002/auth/callback"
    staff_issuer_base: str = "http://127.0.0.1:8180"
    staff_realm: str = "hiwallet-staff"
    audience: str = "hiwallet-api"
    # onboarding's own client (client credentials): identity's admin API and wallet-api.
    client_id: str = "onboarding"
    client_secret: SecretStr = SecretStr(DEV_CLIENT_SECRET)
    identity_timeout_s: float = 5.0

    wallet_api_url: str = "http://127.0.0.1:8010"
    wallet_api_timeout_s: float = 5.0

    # The e-mail codes go out over SMTP (the mail catcher locally).
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 1025
    smtp_timeout_s: float = 5.0
    mail_from: str = "no-reply@hiwallet.dev"

    sms_url: str = "http://127.0.0.1:8095"
    sms_api_key: SecretStr = SecretStr("sms_dev_key")
    sms_sender: str = "HIWALLET"
    sms_timeout_s: float = 5.0

    # The population registry (KPS/NVI TCKimlikNoDogrula; nvi-fake locally).
    nvi_url: str = "http://127.0.0.1:8097/Service/KPSPublic.asmx"
    nvi_timeout_s: float = 5.0
    # How long a client is asked to wait after registry-unavailable (Retry-After).
    nvi_retry_after_s: int = 30

    # Codes (e-mail and SMS): 6 digits, this long, this many tries; then a new one is needed.
    code_ttl_s: int = Field(default=600, ge=30)
    code_max_attempts: int = Field(default=5, ge=1)
    # A registration not completed by then is gone (its code too): 24 hours.
    registration_ttl_s: int = 86_400
    # Rate limits, per window: codes sent to one address (registrations and resends), and
    # requests from one client IP (registrations, resends, verifies).
    rate_window_s: int = 3_600
    rate_per_address: int = 5
    rate_per_ip: int = 60
    # Phone codes sent to one customer per window.
    rate_per_customer_phone: int = 5
    # X-Forwarded-For is believed only from these peers (the front APIs): a comma list of IPs.
    trusted_proxies: str = ""

    # The current versions of what a customer accepts; an older one is refused.
    user_agreement_version: str = "2026-01"
    privacy_notice_version: str = "2026-01"

    # The background round that finishes what a failed call left (the tier raise when wallet-api
    # was down) and purges expired registrations and rate windows.
    sweep_interval_s: float = 30.0
    sweep_batch: int = 100

    @property
    def customer_issuer(self) -> str:
        return f"{self.customer_issuer_base.rstrip('/')}/realms/{self.customer_realm}"

    @property
    def token_url(self) -> str:
        return f"{self.customer_issuer}/protocol/openid-connect/token"

    @property
    def auth_url(self) -> str:
        return f"{self.customer_issuer}/protocol/openid-connect/auth"

    @property
    def admin_users_url(self) -> str:
        return f"{self.customer_issuer_base.rstrip('/')}/admin/realms/{self.customer_realm}/users"

    @property
    def consent_versions(self) -> dict[str, str]:
        return {"user_agreement": self.user_agreement_version, "privacy_notice": self.privacy_notice_version}

    @property
    def proxies(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.trusted_proxies.split(",") if p.strip())


def check_production(
    settings: OnboardingSettings, *others: BaseSettings, core: Settings | None = None
) -> None:
    """With ``HIWALLET_PRODUCTION=true``: refuse (core.settings.InsecureSettings) the
    development keys and secrets of ``settings`` and ``others`` (the wires consumer's
    settings), and a test fault hook (HIWALLET_ONBOARDING_FAULT_AFTER_USER_CREATED)."""
    refuse_insecure_start(settings, *others, core=core)


@lru_cache(maxsize=1)
def get_onboarding_settings() -> OnboardingSettings:
    return OnboardingSettings()
