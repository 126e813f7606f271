"""The ledger's service layer, :class:`Ledger`: what every writer of the ledger calls - wallet-api
today (its transfers, refunds, promos and wallets), the command line, and wallet-consumer and the
withdrawal orchestrator next - through the package's declared API (``hiwallet.ledger``).

Each use case builds a posting with a rule and posts it through the store in one database
transaction, or, given ``conn``, in the caller's unit of work (its idempotency record commits
with the posting). A caller whose own SQL posts many in its own transaction, through
``ledger_api.post_batch`` (wallet-consumer; wallet-api's ``wallet.transfer_batch``, its
postings' argument typed ``ledger_api.posting_in[]``) builds the postings here
(:meth:`Ledger.transfer_posting`, …), passes :meth:`Ledger.batch_arguments` to its statement
and reads each answer with :meth:`Ledger.answer`, a failure with :meth:`Ledger.error_of`.
No HTTP and no broker here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import asyncpg

from hiwallet.core.ids import derived_id
from hiwallet.ledger import rules
from hiwallet.ledger.accounts import (
    CENTRAL_BUCKET,
    Role,
    cash_account,
    new_wallet_id,
    random_bucket,
)
from hiwallet.ledger.errors import LedgerError, LedgerInternalError, NothingToExpire, TransactionIdReused
from hiwallet.ledger.model import (
    HoldResult,
    Posting,
    PostResult,
    PromoBatch,
    Statement,
    TransactionView,
    TxType,
    WalletBalance,
)
from hiwallet.ledger.rules import FeePolicy
from hiwallet.ledger.settings import LedgerSettings, get_ledger_settings
from hiwallet.ledger.store import LedgerStore, translate

# How many times one promo batch may be expired (each after a refund gave it money back): a
# bound on the keys tried, never reached by a real batch.
MAX_EXPIRY_ROUNDS = 1000

# The per-bucket system accounts a sweep gathers into their central account (rules.sweep):
# transit is not (rules.sweep refuses it: its sub-accounts carry cross-bucket parts).
SWEPT_ROLES = (Role.CLEARING, Role.REVENUE, Role.PROMO_EXPENSE, Role.PROMO_BREAKAGE)


@dataclass(frozen=True)
class Fees:
    payment: FeePolicy
    withdrawal: FeePolicy

    @classmethod
    def from_settings(cls, settings: LedgerSettings | None = None) -> Fees:
        settings = settings or get_ledger_settings()
        return cls(
            payment=FeePolicy(bps=settings.payment_fee_bps, min_minor=settings.payment_fee_min_minor),
            withdrawal=FeePolicy(fixed_minor=settings.withdrawal_fee_minor),
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
        conn: asyncpg.Connection | None = None,
    ) -> WalletBalance:
        """Open a wallet (its cash and promo accounts); with ``conn``, in the caller's unit of
        work."""
        wallet_id = wallet_id or new_wallet_id(bucket if bucket is not None else random_bucket())
        rules.check_text(owner, "owner")
        return await self.store.open_wallet(wallet_id, currency, owner=owner, conn=conn)

    # -- posting what the caller built, and the batched path ----------------------------------

    def unit_of_work(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """One connection in one transaction, for a caller that writes more than the posting (an
        inbox or outbox row, an idempotency record): pass it as ``conn`` to the use cases."""
        return self.store.unit_of_work()

    async def post(self, posting: Posting, *, conn: asyncpg.Connection | None = None) -> PostResult:
        """Post a posting built with this API (:meth:`transfer_posting`, :meth:`promo_grant_posting`,
        :meth:`refund_posting`); with ``conn``, in the caller's unit of work."""
        return await self.store.post(posting, conn=conn)

    async def post_batch(
        self, postings: Sequence[Posting]
    ) -> list[PostResult | LedgerError | LedgerInternalError]:
        """Many postings in one database transaction and one round trip (at most
        :data:`MAX_BATCH`): an answer for each, a refusal or a posting's own failure as its
        error, which does not stop the others. For a caller that has many at once (messages
        taken from a queue); concurrent single postings are batched by the store anyway."""
        return await self.store.post_batch(postings)

    def topup_posting(
        self,
        key: str,
        wallet: str,
        amount: int,
        currency: str = "TRY",
        *,
        provider: str,
        actor: str,
        ref: str,
    ) -> Posting:
        return rules.topup(key, wallet, amount, currency, provider=provider, actor=actor, ref=ref)

    def withdrawal_posting(
        self,
        key: str,
        wallet: str,
        amount: int,
        currency: str = "TRY",
        *,
        actor: str,
        ref: str,
        provider: str = "bank",
    ) -> Posting:
        return rules.withdrawal(
            key, wallet, amount, currency, fee=self.fees.withdrawal, actor=actor, ref=ref, provider=provider
        )

    @staticmethod
    def settlement_withdrawal_posting(
        key: str,
        provider: str,
        currency: str = "TRY",
        *,
        owed: int,
        actor: str,
        ref: str,
        bucket: int = CENTRAL_BUCKET,
    ) -> Posting:
        """What :meth:`settle_withdrawals` posts, built first: its id is known before it is
        posted (a caller that locks the central nostro row last, right before its commit)."""
        return rules.settlement_withdrawal(
            key, provider, currency, owed=owed, actor=actor, ref=ref, bucket=bucket
        )

    def transfer_posting(
        self,
        key: str,
        sender: str,
        receiver: str,
        amount: int,
        currency: str,
        *,
        type_: TxType,
        actor: str,
        ref: str,
    ) -> Posting:
        """The posting of a wallet-to-wallet movement of ``type_``: a payment (its fee by this
        ledger's policy) or a p2p, B2P or B2B transfer."""
        return rules.wallet_transfer(
            key, sender, receiver, amount, currency, type_=type_, fee=self.fees.payment, actor=actor, ref=ref
        )

    def promo_grant_posting(
        self,
        key: str,
        customer: str,
        amount: int,
        currency: str,
        *,
        expires_at: datetime,
        actor: str,
        ref: str,
        business: str | None = None,
    ) -> Posting:
        return rules.promo_grant(
            key, customer, amount, currency, expires_at=expires_at, actor=actor, ref=ref, business=business
        )

    @staticmethod
    def goodwill_posting(
        key: str, wallet: str, amount: int, currency: str, *, actor: str, ref: str
    ) -> Posting:
        """A goodwill credit's posting (goodwill_expense −, customer cash +)."""
        return rules.goodwill(key, wallet, amount, currency, actor=actor, ref=ref)

    @staticmethod
    def refund_posting(original: TransactionView, *, actor: str, ref: str | None = None) -> Posting:
        return rules.refund(original, actor=actor, ref=ref)

    def batch_arguments(self, postings: Sequence[Posting]) -> Any:
        """``ledger_api.post_batch``'s one argument for ``postings`` (an array of the ledger's
        posting type), for a caller whose own SQL posts them through ``ledger_api.post_batch``
        in its own transaction (or, as wallet-api's ``wallet.transfer_batch``, in the same
        statement as its own writes). Its encoding is the ledger's: pass it on as it is."""
        return self.store.batch_arguments(postings)

    @staticmethod
    def answer(raw: dict[str, Any]) -> PostResult:
        """One posting's answer from ``ledger_api.post_batch`` (or ``ledger.post``) as a result; a
        refusal raises the ledger's error, an unknown one :class:`LedgerInternalError`."""
        return LedgerStore.post_answer(raw)

    @staticmethod
    def error_of(exc: BaseException) -> LedgerError | LedgerInternalError:
        """The ledger's error for the driver's ``exc`` from a statement that posted through the
        ledger: a refusal, :class:`LedgerUnavailable` if a retry can cure it, else
        :class:`LedgerInternalError`."""
        return translate(exc)

    # -- reading -------------------------------------------------------------------------------

    async def wallet_balance(self, wallet_id: str) -> WalletBalance:
        return await self.store.wallet_balance(wallet_id)

    async def statement(self, account_id: str, *, cursor: str | None = None, limit: int = 50) -> Statement:
        return await self.store.statement(account_id, cursor=cursor, limit=limit)

    async def actors(self, account_id: str, transaction_ids: list[str]) -> dict[str, str]:
        return await self.store.actors(account_id, transaction_ids)

    async def daily_balances(self, account_id: str, first: date, last: date) -> list[tuple[date, int]]:
        return await self.store.daily_balances(account_id, first, last)

    async def counterparties(self, account_id: str, transaction_ids: list[str]) -> dict[str, str]:
        return await self.store.counterparties(account_id, transaction_ids)

    async def transaction(self, transaction_id: str) -> TransactionView:
        return await self.store.transaction(transaction_id)

    async def has_lines(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """For each (transaction id, account id): whether the transaction has a line on the
        account (a batch's check that each command names its own wallet's posting), one read."""
        return await self.store.has_lines(pairs)

    async def promo_batches(self, wallet_id: str) -> list[PromoBatch]:
        return await self.store.promo_batches(wallet_id)

    async def goodwill(
        self,
        key: str,
        wallet: str,
        amount: int,
        currency: str = "TRY",
        *,
        actor: str,
        ref: str,
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        """The platform credits a customer's cash from its goodwill expense (staff)."""
        return await self.store.post(
            rules.goodwill(key, wallet, amount, currency, actor=actor, ref=ref), conn=conn
        )

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
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        return await self.store.post(
            rules.topup(key, wallet, amount, currency, provider=provider, actor=actor, ref=ref),
            conn=conn,
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
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        return await self.store.post(
            rules.transfer(key, sender, receiver, amount, currency, actor=actor, ref=ref, type_=type_),
            conn=conn,
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
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        return await self.store.post(
            rules.payment(
                key, payer, merchant, amount, currency, fee=self.fees.payment, actor=actor, ref=ref
            ),
            conn=conn,
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
        conn: asyncpg.Connection | None = None,
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
            ),
            conn=conn,
        )

    async def expire_promos(
        self,
        *,
        actor: str,
        now: datetime | None = None,
        batch_size: int = 500,
        max_rounds: int = 100,
        on_expired: Callable[[str, PostResult, str, str], None] | None = None,
    ) -> int:
        """Expire every batch past its date that still holds money; returns how many. Safe to
        run concurrently and repeatedly: each expiry is keyed by its batch. Bounded: at most
        ``max_rounds`` pages a run; the next run takes the rest. ``on_expired(batch_id,
        result, expire_to, currency)`` is told of each expiry this run posted (not a replay):
        what went where is ``result.line_of(expire_to)``."""
        now = now or datetime.now(UTC)
        expired = 0
        for _ in range(max_rounds):
            rows = await self.store.expired_promo_batches(now, batch_size)
            for row in rows:
                result = await self._expire_batch(row, actor)
                if result is not None:
                    expired += 1
                    if on_expired is not None:
                        on_expired(row["id"], result, row["expire_to_account"], row["currency"])
            if len(rows) < batch_size:
                break
        return expired

    async def _expire_batch(self, row: Any, actor: str) -> PostResult | None:
        """Expire one listed batch: the posting, or None when there was nothing to do (spent,
        or expired by a concurrent round, since it was listed).

        A key already taken while the batch still holds money (it was listed with some) is an
        earlier expiry of this batch that a refund has given money back to since: the next
        round's key. A concurrent twin's key is taken too; its next key then finds nothing to
        expire. The posting function's lock on the batch row and its refusal of an empty batch
        keep every remainder returned once, whatever the keys."""
        for round_ in range(MAX_EXPIRY_ROUNDS):
            posting = rules.promo_expiry(
                row["id"],
                row["account_id"],
                row["expire_to_account"],
                row["currency"],
                actor=actor,
                round_=round_,
            )
            try:
                result = await self.store.post(posting)
            except NothingToExpire:
                return None  # spent or expired by someone else since we looked
            except TransactionIdReused:
                continue  # that round's expiry was another actor's (the job's, an operator's)
            if not result.replayed:
                return result
        raise LedgerInternalError(f"promo batch {row['id']} expired {MAX_EXPIRY_ROUNDS} times")

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
        conn: asyncpg.Connection | None = None,
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
            ),
            conn=conn,
        )

    async def refund(
        self,
        transaction_id: str,
        *,
        actor: str,
        ref: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        original = await self.store.transaction(transaction_id)
        return await self.store.post(rules.refund(original, actor=actor, ref=ref), conn=conn)

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
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        """clearing(provider) +gross, nostro −net (−gross in the gross model), and in the net
        model provider_expense −fee. With ``conn``, in the caller's unit of work (wallet-consumer
        posts a payout with its processed_events row and its settled top-ups)."""
        return await self.store.post(
            rules.settlement_topup(
                key, provider, currency, gross=gross, fee=fee, model=model, actor=actor, ref=ref
            ),
            conn=conn,
        )

    async def settle_withdrawals(
        self,
        key: str,
        provider: str,
        currency: str = "TRY",
        *,
        owed: int,
        actor: str,
        ref: str,
        bucket: int | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        """clearing(provider) −owed, nostro +owed: the central clearing by default; with
        ``bucket``, that bucket's clearing sub-account (one withdrawal settled in its own
        bucket: the withdrawal saga). With ``conn``, in the caller's unit of work."""
        return await self.store.post(
            rules.settlement_withdrawal(
                key,
                provider,
                currency,
                owed=owed,
                actor=actor,
                ref=ref,
                bucket=CENTRAL_BUCKET if bucket is None else bucket,
            ),
            conn=conn,
        )

    async def provider_invoice(
        self,
        key: str,
        provider: str,
        currency: str = "TRY",
        *,
        amount: int,
        actor: str,
        ref: str,
        period: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        """provider_expense −amount, nostro +amount for the month ``period`` (YYYY-MM); with
        ``conn``, in the caller's unit of work."""
        return await self.store.post(
            rules.provider_invoice(
                key, provider, currency, amount=amount, actor=actor, ref=ref, period=period
            ),
            conn=conn,
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
        conn: asyncpg.Connection | None = None,
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
            ),
            conn=conn,
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
        conn: asyncpg.Connection | None = None,
    ) -> PostResult:
        return await self.store.post(
            rules.debit(wallet, amount, currency, cash_account(destination_wallet), actor=actor, ref=ref),
            conn=conn,
        )

    async def sweep(
        self,
        role: Role,
        currency: str = "TRY",
        *,
        actor: str,
        provider: str | None = None,
        on_swept: Callable[[Role, str, int], None] | None = None,
    ) -> int:
        """Move each per-bucket sub-account's balance of ``role`` into the central account;
        returns how many moved. Keyed by the sub-account's version, so a repeat moves nothing.
        ``on_swept(role, currency, amount)`` is told of each move this call posted."""
        moved = 0
        for sub in await self.store.sub_accounts_to_sweep(role, currency, provider):
            key = f"sweep:{derived_id(sub.id, str(sub.version))}"
            posting = rules.sweep(
                role, currency, sub.bucket, sub.balance, actor=actor, provider=provider, key=key
            )
            if not (await self.store.post(posting)).replayed:
                moved += 1
                if on_swept is not None:
                    on_swept(role, currency, sub.balance)
        return moved

    async def sweep_all(self, *, actor: str, on_swept: Callable[[Role, str, int], None] | None = None) -> int:
        """:meth:`sweep` of every swept role (clearing of each provider), in every currency
        whose sub-accounts hold something; returns how many moved."""
        moved = 0
        for currency in await self.store.currencies_to_sweep(SWEPT_ROLES):
            for role in SWEPT_ROLES:
                providers: list[str | None] = list(self.store.providers) if role is Role.CLEARING else [None]
                for provider in providers:
                    moved += await self.sweep(
                        role, currency, actor=actor, provider=provider, on_swept=on_swept
                    )
        return moved
