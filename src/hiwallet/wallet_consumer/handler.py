"""The handler of ``TopupRecorded``: credit the wallet through the ledger, in the consumer's
transaction (core.consumer.Consumer records the message in processed_events in the same one),
or store the top-up as unattributed.

Every answer of the ledger is mapped here, deliberately:

- a result, first or replayed: credited (a replay is a payment credited before, by the same
  request: another message of the same payment);
- :class:`TransactionIdReused`: the key (the payment id) names a transaction of another
  request. The same payment's top-up under another actor (an operator's attribution) is
  "credited already"; anything else under that key is a conflict a person must see
  (:class:`Unprocessable`, dead-lettered);
- :class:`AccountNotFound` on the wallet: an unknown wallet (unattributed). On a system account
  (no clearing account of that provider or currency): :class:`Unprocessable`, dead-lettered,
  replayable once the accounts exist (``ledger.ensure_system_accounts``);
- :class:`CurrencyMismatch`: unattributed, currency-mismatch;
- :class:`InvalidRequest` (and :class:`InvalidPosting`): the body holds what the ledger
  refuses (checked before, so a mismatch of the checks): :class:`Unprocessable`;
- :class:`LedgerUnavailable`: raised as it is: a retry cures it, the consumer pauses
  (:func:`is_transient`);
- the refusals a top-up cannot meet (insufficient funds, holds, refunds, promo expiry,
  transaction not found, cursors) and any :class:`LedgerError` this code does not know:
  :class:`Unprocessable` naming the code (a defect, dead-lettered after the bounded attempts,
  never retried forever);
- :class:`LedgerInternalError` and anything else: raised as they are (a defect: the consumer's
  bounded attempts, then the dead letter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg
import structlog
from pydantic import ValidationError

from hiwallet.core import db
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.ledger import (
    AccountNotFound,
    CurrencyMismatch,
    HoldNotUsable,
    InsufficientFunds,
    InvalidRequest,
    Ledger,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    NothingToExpire,
    NotRefundable,
    TransactionIdReused,
    TxType,
    cash_account,
    promo_account,
)
from hiwallet.wallet_consumer.metrics import TopupMetrics
from hiwallet.wallet_consumer.topups import (
    MESSAGE_TYPE,
    TopupRecorded,
    Unattributed,
    credited_under_key,
    outcome,
    record_unattributed,
    unattributed_of,
    why_not_creditable,
)

log = structlog.get_logger(__name__)

CONSUMER_NAME = "wallet-consumer"

# Refusals a top-up posting cannot meet: if one comes, the ledger or this code is wrong.
_IMPOSSIBLE = (InsufficientFunds, HoldNotUsable, NotRefundable, NothingToExpire, NotFound)


def parse(message: IncomingMessage) -> TopupRecorded:
    """The message's body as a :class:`TopupRecorded`, or :class:`Unprocessable` saying which
    fields are wrong (their names and pydantic's error type, never their values)."""
    if message.type != MESSAGE_TYPE:
        raise Unprocessable(f"unknown message type {message.type[:60]!r}")
    if not isinstance(message.body, Mapping):
        raise Unprocessable("the body is not a JSON object")
    try:
        return TopupRecorded.model_validate(message.body)
    except ValidationError as exc:
        fields = sorted({f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['type']}" for e in exc.errors()})
        raise Unprocessable(f"malformed TopupRecorded ({'; '.join(fields)[:300]})") from None


def is_transient(exc: BaseException) -> bool:
    """What pauses the consumer instead of counting an attempt: the ledger's "unavailable", or
    a driver error a retry can cure (the consumer's own statements)."""
    return isinstance(exc, LedgerUnavailable) or db.is_transient(exc)


class TopupHandler:
    """``core.consumer.Handler`` of ``TopupRecorded``: ``await handler(conn, message)`` in the
    consumer's transaction, answering the outcome stored with the message."""

    def __init__(self, ledger: Ledger, metrics: TopupMetrics | None = None) -> None:
        self.ledger = ledger
        self.metrics = metrics

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        done = await self.handle(conn, parse(message))
        if self.metrics is not None:
            self.metrics.count(done["result"])
        return done

    async def handle(self, conn: asyncpg.Connection, body: TopupRecorded) -> dict[str, Any]:
        # A payment that was unattributed is the operator's: credited only by its attribution
        # (which may have chosen a wallet in another bucket, where the key would not replay).
        existing = await unattributed_of(conn, body.payment_id)
        if existing is not None:
            result = "attributed-already" if existing.attributed else "unattributed-already"
            return outcome(result, reason=existing.reason)
        reason = await why_not_creditable(conn, body.wallet, body.currency)
        if reason is not None or body.wallet is None:
            return await self._unattributed(conn, body, reason or Unattributed.NO_REFERENCE)
        wallet = body.wallet
        try:
            posted = await self.ledger.topup(
                body.payment_id,
                wallet,
                body.amount_minor,
                body.currency,
                provider=body.provider,
                actor=body.actor,
                ref=body.provider_payment_id,
                conn=conn,
            )
        except TransactionIdReused as exc:
            return await self._reused(body, exc)
        except AccountNotFound as exc:
            if exc.fields.get("account") in (cash_account(wallet), promo_account(wallet)):
                return await self._unattributed(conn, body, Unattributed.UNKNOWN_WALLET)
            # No clearing account for this provider or currency: fixable, then replayable.
            raise Unprocessable(f"no ledger account {str(exc.fields.get('account'))[:120]}") from exc
        except CurrencyMismatch:
            return await self._unattributed(conn, body, Unattributed.CURRENCY_MISMATCH)
        except InvalidRequest as exc:
            raise Unprocessable(f"the ledger refused the top-up as invalid ({exc.code})") from exc
        except LedgerUnavailable:
            raise  # a retry cures it: the consumer pauses (is_transient)
        except _IMPOSSIBLE as exc:
            raise Unprocessable(f"the ledger refused a top-up with {exc.code}: a defect") from exc
        except LedgerError as exc:
            raise Unprocessable(f"unknown ledger refusal {exc.code}: a defect") from exc
        log.info(
            "top-up credited" if not posted.replayed else "top-up credited before",
            payment_id=body.payment_id,
            transaction_id=posted.id,
            provider=body.provider,
            route=body.route,
        )
        return outcome("replayed" if posted.replayed else "credited", transaction_id=posted.id)

    async def _unattributed(
        self, conn: asyncpg.Connection, body: TopupRecorded, reason: Unattributed
    ) -> dict[str, Any]:
        # Not attributable now, but perhaps credited before (an earlier message of this payment
        # named a wallet): then it is not the operator's to credit again.
        credited = await credited_under_key(conn, body.payment_id)
        if credited is not None:
            return outcome("credited-already", transaction_id=credited)
        stored = await record_unattributed(conn, body, reason)
        log.info(
            "top-up unattributed", payment_id=body.payment_id, reason=reason.value, provider=body.provider
        )
        return outcome("unattributed" if stored else "unattributed-already", reason=reason.value)

    async def _reused(self, body: TopupRecorded, exc: TransactionIdReused) -> dict[str, Any]:
        """The payment id names a transaction of another request: the same payment credited by
        another actor is fine; anything else is a conflict for a person."""
        transaction_id = str(exc.fields.get("id", ""))
        try:
            # committed by another transaction: read on the ledger's own connection
            seen = await self.ledger.transaction(transaction_id)
        except LedgerUnavailable:
            raise
        except LedgerError as lookup:
            raise Unprocessable(f"ledger key {body.payment_id} reused, unreadable") from lookup
        same_payment = (
            seen.type == TxType.TOPUP
            and seen.ref == body.provider_payment_id
            and seen.metadata.get("provider") == body.provider
        )
        if not same_payment:
            raise Unprocessable(f"ledger key {body.payment_id} names another transaction") from exc
        log.info("top-up credited before by another route", payment_id=body.payment_id)
        return outcome("credited-already", transaction_id=seen.id)
