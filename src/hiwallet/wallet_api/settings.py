"""wallet-api settings: ``HIWALLET_WALLET_API_*`` environment variables with local defaults."""

from __future__ import annotations

from functools import cached_property, lru_cache
from typing import Annotated, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.contracts.merchant_events import DEV_SECRET_KEYS
from hiwallet.core.settings import OFF_IN_PRODUCTION
from hiwallet.wallet_api.domain import LimitKind, Tier


class WalletApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_WALLET_API_", extra="ignore")

    port: int = 8010
    # Worker processes behind the one port (uvicorn's supervisor). Each keeps its own caches
    # and coalescer; the database decides what they share (keys, limits, balances). On this
    # 2-core kind, where PostgreSQL shares the cores, one process carried more transfers than
    # two at concurrency 8 and 32 (bench/: its batches are twice as big, and a transfer now
    # costs it ~150 µs of CPU); a machine with more cores would run more.
    workers: int = 1
    # Also a Unix domain socket at this absolute path, beside the port, for the front APIs on
    # the same host (their upstream ``unix:<path>``; core.http.runtime.serve). Empty: the port only.
    uds: str = ""
    # The HTTP protocol under uvicorn's server: "lean" (core/http/protocol.py: the answer's head
    # and body in one write, a request's work done once, bounds on heads and idle connections;
    # less CPU a transfer, docs/performance.md) or "uvicorn" (its own httptools protocol).
    http_server: Literal["lean", "uvicorn"] = "lean"
    # The database name; empty means hiwallet_wallet (core/db.py). Tests and benches use clones.
    database: str = ""
    # Trusted issuers (docs/architecture.md): customers' and staff's identity providers, and the audience
    # every internal service shares. Which realm a token came from is told by which key signed it.
    customer_issuer_base: str = "http://127.0.0.1:8080"
    customer_realm: str = "hiwallet"
    staff_issuer_base: str = "http://127.0.0.1:8180"
    staff_realm: str = "hiwallet-staff"
    audience: str = "hiwallet-api"
    # Only this client (a service account of the customer realm) opens personal accounts and
    # raises tiers (these endpoints look for onboarding's client in the token's azp).
    onboarding_client: str = "onboarding"

    # Staff endpoints (/v1/staff/...): staff-admin's GET /v1/me is asked, with the employee's
    # own token, on every staff request (contracts.staff: no cache); bounded so a slow staff-admin
    # holds no worker for long (503 staff-admin-unavailable, customers unaffected).
    staff_admin_url: str = "http://127.0.0.1:8013"
    staff_admin_timeout_s: float = 2.0
    staff_admin_max_connections: int = 20
    # Finding a customer by e-mail: the customer realm's admin API, with wallet-api's own
    # service account (client "wallet-api", realm-management view-users only).
    identity_admin_client: str = "wallet-api"
    identity_admin_secret: SecretStr = SecretStr("dev-wallet-api-secret")
    identity_admin_timeout_s: float = 3.0

    # Staff money (docs/staff.md), in minor units per currency. A goodwill credit above the
    # threshold waits for a second employee; what one employee asks for in goodwill (pending
    # or posted) and grants in platform promo outside a campaign is capped per UTC day.
    goodwill_approval_threshold_minor: int = 500_00
    goodwill_daily_ceiling_minor: int = 5_000_00
    staff_promo_daily_ceiling_minor: int = 10_000_00

    currencies: list[str] = ["TRY", "EUR", "USD"]
    max_body_bytes: int = 16_384
    db_pool_max_size: int = 20
    # Concurrent transfers share a statement and a commit (core/coalesce.py): how many batches
    # may be in flight at once, and how many transfers one holds. 0 writers: each alone. One
    # writer drains (the next batch gathers while one runs): measured best at 8 and 32 (bench/:
    # more writers split the same transfers into smaller batches, each paying its own commit).
    # Another starts only when a batch has been in flight for transfer_spare_after_ms with
    # transfers waiting (a lock held elsewhere), so a stuck batch does not hold back the rest.
    transfer_writers: int = 4
    transfer_spare_after_ms: int = 50
    transfer_max_batch: int = 50
    # Before a batch is taken, wait at most this long for as many transfers as were in flight at
    # once lately (core/coalesce.py's linger; 0: off). Callers whose answers just went out then
    # join the next batch instead of the clients splitting into two alternating half batches,
    # each paying the statement's fixed cost (bench/: −25 % of the database's CPU a transfer at
    # 8 clients, docs/performance.md). At most this much latency added to a batch.
    transfer_linger_ms: float = Field(default=2.0, ge=0)
    # The linger gathers at most this many: at 32 clients, waiting for all of the last batch's
    # callers cost throughput (0.89 of no linger); a batch of 8 already spreads the fixed cost.
    transfer_linger_batch: int = Field(default=8, ge=1)
    # Parties of recent transfers (wallet, account, kind, currency; membership and tiers are
    # checked again in the transfer's own statement), so a transfer needs one statement.
    party_cache_size: int = Field(default=10_000, ge=0)
    # Statement lines already read with their counterparties (parties.StatementLines: a line's
    # never changes), so a statement page read again is only counted, its lines not read nor
    # looked up: at most this many lines (~6 MB; 0: off).
    statement_party_cache_size: int = Field(default=10_000, ge=0)
    # Cash accounts' closing balances of days long over (parties.ClosedDays: such a day's never
    # changes), so an overview read again probes only the last day or two: of at most this many
    # accounts (~1 KB each for 30 days: ~5 MB; 0: off).
    overview_day_cache_size: int = Field(default=5_000, ge=0)

    # Idempotency records are kept at least this long, then purged by a periodic job.
    idempotency_retention_h: int = 48
    purge_interval_s: float = 600.0

    # Merchants' webhooks (docs/webhooks.md). The endpoints' signing secrets are sealed at rest
    # (AES-GCM, "kid:base64key,..."; the first seals, all open): merchant-webhooks must hold
    # the same ring (HIWALLET_MERCHANT_WEBHOOKS_SECRET_KEYS) to sign. Endpoint URLs may name
    # no private, loopback or link-local address unless allow_private_targets (development:
    # `hiwallet up` and the tests deliver to 127.0.0.1; refused in production).
    webhook_secret_keys: SecretStr = SecretStr(DEV_SECRET_KEYS)
    webhook_allow_private_targets: Annotated[bool, OFF_IN_PRODUCTION] = False
    # After a rotation, the previous secret still signs for this long (both signatures sent).
    webhook_rotation_overlap_s: float = 24 * 3600.0
    webhook_max_endpoints_per_account: int = 16
    webhook_dns_timeout_s: float = 2.0
    webhook_page_max: int = 100

    # Monthly limits in minor units, per currency, on what a personal account sends (transfer)
    # and pays to businesses (payment). Unknown moves nothing; Unverified sends no transfer.
    limit_unverified_payment_minor: int = 5_000_00
    limit_verified_transfer_minor: int = 50_000_00
    limit_verified_payment_minor: int = 50_000_00
    limit_contracted_transfer_minor: int = 500_000_00
    limit_contracted_payment_minor: int = 500_000_00

    def monthly_limit(self, tier: Tier, kind: LimitKind) -> int:
        return self._limits.get((tier, kind), 0)

    @cached_property
    def _limits(self) -> dict[tuple[Tier, LimitKind], int]:
        # Built once (settings do not change after start): asked on every transfer.
        return {
            (Tier.UNVERIFIED, LimitKind.PAYMENT): self.limit_unverified_payment_minor,
            (Tier.VERIFIED, LimitKind.TRANSFER): self.limit_verified_transfer_minor,
            (Tier.VERIFIED, LimitKind.PAYMENT): self.limit_verified_payment_minor,
            (Tier.CONTRACTED, LimitKind.TRANSFER): self.limit_contracted_transfer_minor,
            (Tier.CONTRACTED, LimitKind.PAYMENT): self.limit_contracted_payment_minor,
        }

    @property
    def customer_issuer(self) -> str:
        return f"{self.customer_issuer_base.rstrip('/')}/realms/{self.customer_realm}"


@lru_cache(maxsize=1)
def get_wallet_api_settings() -> WalletApiSettings:
    return WalletApiSettings()
