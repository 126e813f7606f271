"""Identity settings: ``HIWALLET_IDENTITY_*`` environment variables with working local defaults."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.contracts.databases import DATABASES
from hiwallet.core.settings import NON_EMPTY_IN_PRODUCTION

REALMS_DIR = Path(__file__).resolve().parent / "realms"


class IdentitySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_IDENTITY_", extra="ignore")

    # The public base URLs; a token's ``iss`` is <base>/realms/<realm>, so these must be what
    # clients and verifying services see, not an internal address.
    public_url: str = "http://127.0.0.1:8080"
    staff_public_url: str = "http://127.0.0.1:8180"
    port: int = 8080
    staff_port: int = 8180
    realms_dir: Path = REALMS_DIR
    # The realms' database names; empty means hiwallet_identity and hiwallet_staff_identity
    # (core/db.py, DATABASES). Tests run `hiwallet up` on clones.
    database: str = ""
    staff_database: str = ""

    # Lifetimes in seconds (Keycloak's defaults where it has one).
    access_token_lifetime_s: int = 300
    refresh_token_lifetime_s: int = 1800  # SSO session idle
    session_max_lifetime_s: int = 36_000  # SSO session max
    code_lifetime_s: int = 60  # authorization codes: single use, one minute
    login_flow_lifetime_s: int = 1800  # time to fill in the login pages
    action_token_lifetime_s: int = 43_200  # "execute actions" links: 12 hours

    # Brute-force protection: ``max_login_failures`` failures, each within ``failure_window_s``
    # of the previous one, lock the user out for ``lockout_s``.
    max_login_failures: int = 5
    failure_window_s: int = 900
    lockout_s: int = 900

    # argon2id at the OWASP Password Storage Cheat Sheet's first configuration (19 MiB, 2
    # passes, 1 lane); Keycloak's default is a lighter one of the same list (7 MiB, 5 passes).
    # Until 2026-12-05: RFC 9106's second option (64 MiB, 3 passes, 4 lanes), which held identity
    # at 145 MB while it hashed (issue 26: every process < 120 MB); a hash made under those still
    # verifies and is stored again under these at its next sign-in. Tests lower these to run fast.
    argon2_time_cost: int = 2
    argon2_memory_kib: int = 19_456
    argon2_parallelism: int = 1
    # Each hash holds argon2_memory_kib for its duration, so this bounds the process's peak
    # memory: about 81 MB at rest plus the hash's memory a hash running (bench/up_rss.py,
    # docs/performance.md "Memory"). At 64 MiB, one kept identity near 145 MB and four took it to
    # 341 MB. Scale sign-ins with processes.
    argon2_max_concurrent_hashes: Annotated[int, Field(ge=1, le=64)] = 1
    # How long a sign-in waits for a slot before it is answered 503 (retryable).
    argon2_slot_wait_s: Annotated[float, Field(gt=0, le=60)] = 5.0
    max_password_length: int = 256  # hashing a megabyte of "password" is a denial of service

    # How long a process keeps the signing keys it read; a rotation done by another process
    # (the CLI) is picked up within this time. The old key stays published, so nothing breaks.
    key_cache_s: float = 10.0
    key_bits: int = 2048

    # Mail for the "execute actions" links: written to outgoing_mail, then sent over SMTP.
    smtp_enabled: bool = True
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 1025
    smtp_timeout_s: float = 5.0
    mail_from: str = "no-reply@hiwallet.dev"

    # The staff realm answers only these client networks (it is reachable only from the internal
    # network: docs/architecture.md). Behind a proxy the proxy's address is what is seen, so
    # the proxy must enforce it too. Empty list: no restriction (refused with
    # HIWALLET_PRODUCTION=true).
    staff_allowed_networks: Annotated[list[str], NON_EMPTY_IN_PRODUCTION] = [
        "127.0.0.0/8",
        "::1/128",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "fc00::/7",
    ]
    purge_interval_s: float = 600.0  # how often expired flows, sessions and tokens are deleted
    metrics_interval_s: float = 60.0  # how often the signing key's gauge is read again
    max_body_bytes: int = 64_000  # forms and admin JSON are small

    def base_url(self, realm: str) -> str:
        return self.staff_public_url if realm == "hiwallet-staff" else self.public_url

    def database_name(self, key: str) -> str:
        """The database of the realm whose database key is ``key`` (``identity`` or
        ``staff_identity``)."""
        override = self.staff_database if key == "staff_identity" else self.database
        return override or DATABASES[key]

    def default_port(self, realm: str) -> int:
        return self.staff_port if realm == "hiwallet-staff" else self.port


@lru_cache(maxsize=1)
def get_identity_settings() -> IdentitySettings:
    return IdentitySettings()
