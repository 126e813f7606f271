"""The ledger's service layer: what wallet-api, wallet-consumer and the command line call.

Each method is one use case: it builds a posting with a rule and posts it through the store in
one database transaction. No HTTP and no broker here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from hiwallet.core.ids import derived_id
from hiwallet.core.settings import Settings
from hiwallet.ledger import rules
from hiwallet.ledger.accounts import (
    Role,
    cash_account,
    new_wallet_id,
    random_bucket,
)
from hiwallet.ledger.errors import NothingToExpire
from hiwallet.ledger.model import HoldResult, PostResult, TxType, WalletBalance
from hiwallet.ledger.rules import FeePolicy
from hiwallet.ledger.store import LedgerStore


@dataclass(frozen=True)
class Fees:
    payment: FeePolicy
    withdrawal: FeePolicy

    @classmethod
    def from_settings(cls, settings: Settings) -> Fees:
        return cls(
            payment=FeePolicy(
                bps=settings.ledger_payment_fee_bps, min_minor=settings.ledger_payment_fee_min_minor
            ),
            withdrawal=FeePolicy(fixed_minor=settings.ledger_withdrawal_fee_minor),
        )


class Ledger:
    def __init__(self, store: LedgerStore, fees: Fees) -> None:
        self.store = store
        self.fees = fees

    async def open_wallet(
        self,
        owner: str,
        currency: str = "TRY",
        *,
        bucket: int | None = None,
        wallet_id: str | None = None,
    ) -> WalletBalance:
        wallet_id = wallet_id or new_wallet_id(bucket if bucket is not None else random_bucket())
        rules.check_text(owner, "owner")
        return await self.store.open_wallet(wallet_id, currency, owner=owner)

    async def topup(
        self,
        key: str,
        wallet: str,
        amount: int,
        currency: str = "TRY",
        *,
        provider: str,
        actor: str,
        ref: str,
    ) -> PostResult:
        return await self.store.post(
            rules.topup(key, wallet, amount, currency, provider=provider, actor=actor, ref=ref)
        )

    async def transfer(
        self,
        key: str,
        sender: str,
        receiver: str,
        amount: int,
        currency: str = "TRY",
        *,
        actor: str,
        ref: str,
        type_: TxType = TxType.P2P,
    ) -> PostResult:
        return await self.store.post(
            rules.transfer(key, sender, receiver, amount, currency, actor=actor, ref=ref, type_=type_)
        )

    async def payment(
        self,
        key: str,
        payer: str,
        merchant: str,
        amount: int,
        currency: str = "TRY",
        *,
        actor: str,
        ref: str,
    ) -> PostResult:
        return await self.store.post(
            rules.payment(key, payer, merchant, amount, currency, fee=self.fees.payment, actor=actor, ref=ref)
        )

    async def promo_grant(
        self,
        key: str,
        customer: str,
        amount: int,
        currency: str = "TRY",
        *,
        expires_at: datetime,
        actor: str,
        ref: str,
        business: str | None = None,
    ) -> PostResult:
        return await self.store.post(
            rules.promo_grant(
                key,
                customer,
                amount,
                currency,
                expires_at=expires_at,
                actor=actor,
                ref=ref,
                business=business,
            )
        )

    async def expire_promos(
        self, *, actor: str, now: datetime | None = None, batch_size: int = 500, max_rounds: int = 100
    ) -> int:
        """Expire every batch past its date that still holds money; returns how many. Safe to
        run concurrently and repeatedly: each expiry is keyed by its batch. Bounded: at most
        ``max_rounds`` pages a run; the next run takes the rest."""
        now = now or datetime.now(UTC)
        expired = 0
        for _ in range(max_rounds):
            rows = await self.store.expired_promo_batches(now, batch_size)
            for row in rows:
                posting = rules.promo_expiry(
                    row["id"], row["account_id"], row["expire_to_account"], row["currency"], actor=actor
                )
                try:
                    result = await self.store.post(posting)
                except NothingToExpire:
                    continue  # spent or expired by someone else since we looked
                expired += not result.replayed
            if len(rows) < batch_size:
                break
        return expired

    async def withdrawal(
        self,
        key: str,
        wallet: str,
        amount: int,
        currency: str = "TRY",
        *,
        actor: str,
        ref: str,
        provider: str = "bank",
    ) -> PostResult:
        return await self.store.post(
            rules.withdrawal(
                key,
                wallet,
                amount,
                currency,
                fee=self.fees.withdrawal,
                actor=actor,
                ref=ref,
                provider=provider,
            )
        )

    async def refund(self, transaction_id: str, *, actor: str, ref: str | None = None) -> PostResult:
        original = await self.store.transaction(transaction_id)
        return await self.store.post(rules.refund(original, actor=actor, ref=ref))

    async def settle_topups(
        self,
        key: str,
        provider: str,
        currency: str = "TRY",
        *,
        gross: int,
        fee: int = 0,
        model: str = "gross",
        actor: str,
        ref: str,
    ) -> PostResult:
        return await self.store.post(
            rules.settlement_topup(
                key, provider, currency, gross=gross, fee=fee, model=model, actor=actor, ref=ref
            )
        )

    async def settle_withdrawals(
        self, key: str, provider: str, currency: str = "TRY", *, owed: int, actor: str, ref: str
    ) -> PostResult:
        return await self.store.post(
            rules.settlement_withdrawal(key, provider, currency, owed=owed, actor=actor, ref=ref)
        )

    async def provider_invoice(
        self, key: str, provider: str, currency: str = "TRY", *, amount: int, actor: str, ref: str
    ) -> PostResult:
        return await self.store.post(
            rules.provider_invoice(key, provider, currency, amount=amount, actor=actor, ref=ref)
        )

    async def hold(self, wallet: str, key: str, amount: int) -> HoldResult:
        return await self.store.place_hold(wallet, key, amount)

    async def release(self, wallet: str, key: str) -> HoldResult:
        return await self.store.release_hold(wallet, key)

    async def capture(
        self,
        wallet: str,
        key: str,
        amount: int,
        destination_wallet: str,
        currency: str = "TRY",
        *,
        actor: str,
        ref: str,
    ) -> PostResult:
        return await self.store.post(
            rules.capture_hold(
                wallet,
                key,
                amount,
                currency,
                cash_account(destination_wallet),
                actor=actor,
                ref=ref,
            )
        )

    async def debit(
        self,
        wallet: str,
        amount: int,
        destination_wallet: str,
        currency: str = "TRY",
        *,
        actor: str,
        ref: str,
    ) -> PostResult:
        return await self.store.post(
            rules.debit(wallet, amount, currency, cash_account(destination_wallet), actor=actor, ref=ref)
        )

    async def sweep(
        self, role: Role, currency: str = "TRY", *, actor: str, provider: str | None = None
    ) -> int:
        """Move each per-bucket sub-account's balance of ``role`` into the central account;
        returns how many moved. Keyed by the sub-account's version, so a repeat moves nothing."""
        moved = 0
        for sub in await self.store.sub_accounts_to_sweep(role, currency, provider):
            key = f"sweep:{derived_id(sub.id, str(sub.version))}"
            posting = rules.sweep(
                role, currency, sub.bucket, sub.balance, actor=actor, provider=provider, key=key
            )
            moved += not (await self.store.post(posting)).replayed
        return moved
