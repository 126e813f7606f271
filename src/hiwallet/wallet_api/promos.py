"""Refunds of payments, and promo money a business grants."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from hiwallet import ledger
from hiwallet.core.db import after_commit
from hiwallet.core.http.idempotency import check_idempotency_key
from hiwallet.core.ids import new_id
from hiwallet.core.relay_hint import RelayHint
from hiwallet.ledger import TxType
from hiwallet.wallet_api import domain, errors
from hiwallet.wallet_api.access import check_currency, own_wallet, visible_transaction
from hiwallet.wallet_api.adapters import Repo, WalletRow
from hiwallet.wallet_api.domain import AccountKind, Caller
from hiwallet.wallet_api.idempotency import Answer, idempotent, request_hash
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.staff_money import StaffMoney, check_expiry
from hiwallet.wallet_api.views import view_of_post
from hiwallet.wallet_api.webhooks import payment_refunded, promo_granted, write_event


class Promos:
    def __init__(
        self,
        pool: asyncpg.Pool,
        the_ledger: ledger.Ledger,
        settings: WalletApiSettings,
        staff_money: StaffMoney,
    ) -> None:
        self.pool = pool
        self.ledger = the_ledger
        self.settings = settings
        self.staff_money = staff_money
        # Wakes merchant-webhooks after a commit that wrote an event (set by the service).
        self.events_hint: RelayHint | None = None

    def _wake(self) -> None:
        if self.events_hint is not None:
            self.events_hint.committed()

    async def refund(
        self, caller: Caller, key: str | None, transfer_id: str, reference: str | None
    ) -> Answer:
        """The business that received a payment gives it back: all its legs negated, once."""
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(transfer_id)
        payload = {"transfer_id": transfer_id, "reference": reference}

        async def work(conn: asyncpg.Connection) -> Answer:
            original = await visible_transaction(self.ledger, caller, transfer_id, conn)
            payee = original.view["to_wallet"]
            if original.type != TxType.PAYMENT or original.mine.get(payee) is not AccountKind.BUSINESS:
                raise errors.NotRefundable(
                    "only a payment can be refunded, by the business that received it",
                    transfer_id=transfer_id,
                    transfer_type=original.type,
                )
            posting = self.ledger.refund_posting(original.tx, actor=caller.actor, ref=reference)
            result = await self.ledger.post(posting, conn=conn)
            if result.replayed:
                raise errors.AlreadyRefunded("this payment has been refunded already", refund_id=result.id)
            currency = original.tx.legs[0].currency
            payee_bucket = domain.bucket_in(payee)
            payee_account = await Repo(conn).account_of_wallet(payee_bucket, payee)
            if payee_account is None:
                raise AssertionError("a posted payment's payee wallet does not exist")
            # The merchant's event, in the refund's transaction.
            await write_event(
                conn,
                payment_refunded(
                    transfer_id,
                    result.id,
                    WalletRow(payee, payee_bucket, payee_account, currency, "", result.posted_at),
                    int(original.view["amount"]),
                    currency,
                    posting.ref,
                ),
            )
            after_commit(self._wake, once=True)
            return Answer(201, view_of_post(result, TxType.REFUND, posting.ref, {}, currency, transfer_id))

        return await idempotent(self.pool, bucket, caller, key, request_hash("refund", payload), work)

    async def promo_grant(
        self,
        caller: Caller,
        key: str | None,
        *,
        from_wallet: str,
        to_wallet_number: str,
        amount: int,
        currency: str,
        programme: str,
        expires_at: datetime | None,
        reference: str | None,
    ) -> Answer:
        """A business gives promo money to a customer under a promo programme staff accepted
        (its budget and amount per customer spent in this transaction); what is left at expiry
        returns to the business."""
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(from_wallet)
        payload = {
            "from_wallet": from_wallet,
            "to_wallet_number": to_wallet_number,
            "amount": amount,
            "currency": currency,
            "programme": programme,
            "expires_at": expires_at.isoformat() if expires_at else None,
            "reference": reference,
        }

        async def work(conn: asyncpg.Connection) -> Answer:
            src = await own_wallet(conn, caller, from_wallet)
            if src.kind is not AccountKind.BUSINESS:
                raise errors.NotABusiness("only a business grants promo money", operation="promo_grant")
            if expires_at is not None:
                check_expiry(expires_at)
            to_bucket, number = domain.parse_wallet_number(to_wallet_number)
            dst = await Repo(conn).wallet_by_number(to_bucket, number)
            if dst is None:
                raise errors.RecipientNotFound("no wallet has this number")
            if dst.kind is not AccountKind.PERSONAL:
                raise errors.RecipientCannotReceive("promo money goes to personal accounts only")
            domain.check_may_receive(dst.kind, dst.tier)
            check_currency(self.settings, currency)
            if currency != src.wallet.currency or currency != dst.wallet.currency:
                raise errors.CurrencyMismatch(
                    "both wallets must hold the request's currency", currency=currency
                )
            expires = await self.staff_money.spend_programme(
                conn,
                programme,
                business_wallet=src.wallet.id,
                customer_wallet=dst.wallet.id,
                amount=amount,
                expires_at=expires_at,
            )
            ref = reference or f"promo to {number}"
            posting = self.ledger.promo_grant_posting(
                new_id(),
                dst.wallet.id,
                amount,
                currency,
                expires_at=expires,
                actor=caller.actor,
                ref=ref,
                business=src.wallet.id,
            )
            # The promo batch lives in the customer's bucket, so the posting's home is there.
            result = await self.ledger.post(posting, conn=conn)
            await write_event(
                conn,
                promo_granted(
                    result.id, src.wallet, to_wallet_number, programme, amount, currency, expires, ref
                ),
            )
            after_commit(self._wake, once=True)
            return Answer(201, view_of_post(result, TxType.PROMO_GRANT, ref, posting.metadata, currency))

        return await idempotent(self.pool, bucket, caller, key, request_hash("promo", payload), work)
