"""wallet-api's use cases, one facade over their modules. One public method is one database
transaction; the rules live in the modules below (who may see and move what, tiers, limits,
idempotency); SQL lives in adapters and the ledger, reached through its declared API
(``hiwallet.ledger``).

- :mod:`~hiwallet.wallet_api.idempotency`: the key, the fingerprint, the stored first answer;
- :mod:`~hiwallet.wallet_api.retry`: a unit of work (core.uow), and what a database failure answers;
- :mod:`~hiwallet.wallet_api.views`: what the API shows;
- :mod:`~hiwallet.wallet_api.access`: the caller's own wallets, accounts and transfers;
- :mod:`~hiwallet.wallet_api.parties`: the party cache of transfers;
- :mod:`~hiwallet.wallet_api.accounts`: accounts, members, wallets, statements;
- :mod:`~hiwallet.wallet_api.transfers`: the transfer pipeline;
- :mod:`~hiwallet.wallet_api.promos`: refunds and promo grants;
- :mod:`~hiwallet.wallet_api.staff_money`: staff promo, campaigns, promo programmes, goodwill.

Answers are JSON-ready dicts: a money-moving answer is stored as-is for idempotent replays."""

from __future__ import annotations

import asyncpg

from hiwallet.contracts.merchant_events import NOTIFY_CHANNEL
from hiwallet.core.relay_hint import RelayHint
from hiwallet.ledger import Fees, Ledger, LedgerStore
from hiwallet.wallet_api import idempotency
from hiwallet.wallet_api.accounts import Accounts
from hiwallet.wallet_api.parties import PartyCache
from hiwallet.wallet_api.promos import Promos
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.staff_money import StaffMoney
from hiwallet.wallet_api.transfers import Transfers
from hiwallet.wallet_api.webhooks import Webhooks

__all__ = ["WalletService"]


class WalletService:
    """Every use case of wallet-api. The methods are its parts' own, bound here once: a call
    costs no extra frame (POST /v1/transfers is the hot path)."""

    def __init__(
        self, pool: asyncpg.Pool, store: LedgerStore, fees: Fees, settings: WalletApiSettings
    ) -> None:
        self.pool = pool
        self.store = store
        self.fees = fees
        self.settings = settings
        self.ledger = Ledger(store, fees)
        accounts = Accounts(pool, self.ledger, settings)
        self._transfers = transfers = Transfers(
            pool, self.ledger, settings, PartyCache(settings.party_cache_size)
        )
        staff = StaffMoney(pool, self.ledger, settings)
        promos = Promos(pool, self.ledger, settings, staff)
        # The merchants' events of wallet-api's movements wake merchant-webhooks after their
        # commit (one coalesced pg_notify; its poll finds what a lost hint did not say).
        self.events_hint = RelayHint(pool, NOTIFY_CHANNEL)
        transfers.events_hint = promos.events_hint = self.events_hint
        self.webhooks = Webhooks(pool, settings)
        # accounts and wallets
        self.open_personal = accounts.open_personal
        self.open_business = accounts.open_business
        self.link = accounts.link
        self.raise_tier = accounts.raise_tier
        self.accounts = accounts.accounts
        self.account = accounts.account
        self.open_wallet = accounts.open_wallet
        self.wallet = accounts.wallet
        self.statement = accounts.statement
        self.promos = accounts.promos
        self.balance_history = accounts.balance_history
        self.overview = accounts.overview
        # money
        self.transfer = transfers.transfer
        self.transfer_of = transfers.transfer_of
        self.refund = promos.refund
        self.promo_grant = promos.promo_grant
        # promo programmes (a business proposes, staff decide) and staff money (docs/staff.md)
        self.propose_programme = staff.propose_programme
        self.programmes_of = staff.programmes_of
        self.programme_of = staff.programme_of
        self.staff = staff

    # -- housekeeping -------------------------------------------------------------------------------

    async def purge_idempotency(self, *, batch: int = 1000, max_rounds: int = 100) -> int:
        older_than_s = self.settings.idempotency_retention_h * 3600
        purged = 0
        for _ in range(max_rounds):
            n = await idempotency.STORE.purge(self.pool, older_than_s, batch)
            purged += n
            if n < batch:
                break
        return purged
