"""staff-admin settings: ``HIWALLET_STAFF_ADMIN_*`` environment variables with local defaults."""

from __future__ import annotations

from functools import lru_cache

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class StaffAdminSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_STAFF_ADMIN_", extra="ignore")

    port: int = 8013
    # The database name; None means hiwallet_staff_admin. Tests use clones.
    database: str | None = None
    # GET /v1/me is called on every staff request of every service: one short query each.
    db_pool_max_size: int = 10
    max_body_bytes: int = 16_384

    # The staff realm (identity's hiwallet-staff realm, :8180). staff-admin trusts ONLY its tokens,
    # for the audience every internal service shares: the employee's token that backoffice-bff
    # forwards, and that wallet-api and the orchestrator pass on to GET /v1/me as it is.
    staff_issuer_base: str = "http://127.0.0.1:8180"
    staff_realm: str = "hiwallet-staff"
    audience: str = "hiwallet-api"

    # staff-admin's own service account in the staff realm (manage-users): it creates the
    # invited employee's user and has the identity service mail the link.
    client_id: str = "staff-admin"
    client_secret: SecretStr = SecretStr("dev-staff-admin-secret")
    identity_timeout_s: float = 5.0
    # Where the invitation link's flow ends (the staff panel's login); a redirect URI of the
    # client, as Keycloak checks.
    invitation_client_id: str = "backoffice-bff"
    invitation_redirect_uri: str = "http://127.0.0.1:8005/auth/callback"
    # An invitation (and its link) is valid this long: 3 days.
    invitation_ttl_s: int = 259_200

    # At start: if nobody holds staff.manage, the first administrator invitation goes here,
    # once. Empty: no invitation is sent (`hiwallet staff bootstrap-invite` sends one by hand).
    bootstrap_email: str = ""

    # Pages of the lists (employees, invitations, audit).
    page_size: int = 50
    max_page_size: int = 200

    @property
    def staff_issuer(self) -> str:
        return f"{self.staff_issuer_base.rstrip('/')}/realms/{self.staff_realm}"


@lru_cache(maxsize=1)
def get_staff_admin_settings() -> StaffAdminSettings:
    return StaffAdminSettings()
