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

A bank top-up (a wire) credited for the first time also writes ``TopupCredited``
(contracts/events.py) into ``wallet.outbox``, in the same transaction: onboarding raises a customer
to verified on the first wire from their own account. Only the bank's: a card top-up writes
nothing more (its path carries 1,000/s), and a replay wrote it the first time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import structlog
from pydantic import ValidationError

from hiwallet.contracts.events import EVENTS_EXCHANGE, topup_credited
from hiwallet.core import db
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.outbox import enqueue
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
    PostResult,
    TransactionIdReused,
    TxType,
    cash_account,
    promo_account,
)
from hiwallet.wallet_consumer.metrics import TopupMetrics
from hiwallet.wallet_consumer.topups import (
    MESSAGE_TYPE,
    OUTBOX_TABLE,
    Q,
    TopupRecorded,
    Unattributed,
    UnattributedTopup,
    credited_under_key,
    outcome,
    record_unattributed,
    unattributed_of,
    wallet_bucket,
    why_not_creditable,
)

log = structlog.get_logger(__name__)

CONSUMER_NAME = "wallet-consumer"
# The provider whose credited top-ups are announced (TopupCredited): wires from a bank account.
ANNOUNCED_PROVIDER = "bank"

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

    def __init__(
        self,
        ledger: Ledger,
        metrics: TopupMetrics | None = None,
        *,
        events_exchange: str = EVENTS_EXCHANGE,
    ) -> None:
        self.ledger = ledger
        self.metrics = metrics
        self.events_exchange = events_exchange

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        done = await self.handle(conn, parse(message))
        if self.metrics is not None:
            self.metrics.count(done["result"])
        return done

    async def batch(
        self, conn: asyncpg.Connection, messages: Sequence[IncomingMessage]
    ) -> list[Mapping[str, Any]]:
        """``core.consumer.BatchHandler``: the batch's top-ups in the consumer's transaction, an
        outcome each in order. A malformed body (Unprocessable) fails the batch: the consumer
        then takes its messages one at a time and dead-letters that one only."""
        done = await self.handle_batch(conn, [parse(m) for m in messages])
        if self.metrics is not None:
            for one in done:
                self.metrics.count(one["result"])
        return list(done)

    async def handle_batch(
        self, conn: asyncpg.Connection, bodies: Sequence[TopupRecorded]
    ) -> list[dict[str, Any]]:
        """The common case in two statements: one reads every wallet's state (and any
        unattributed row of the payments), one posts every creditable top-up through the
        ledger's batched path (postings decided in the given order: one wallet's lines in
        message order). Any other top-up (not creditable now, unattributed before, or refused
        by the ledger) is answered as :meth:`handle` answers it, each outcome the same as one
        at a time. Those others touch no wallet's balance, and no two top-ups of the batch
        share a payment (else all go one by one, in order), so the order between them and the
        postings changes nothing."""
        if len({b.payment_id for b in bodies}) < len(bodies):
            # One payment twice in a batch: the second must see what the first did.
            return [await self.handle(conn, body) for body in bodies]
        buckets = [wallet_bucket(b.wallet) if b.wallet is not None else None for b in bodies]
        rows = await conn.fetch(
            Q["batch_state"],
            [b.payment_id for b in bodies],
            buckets,
            [b.wallet if bucket is not None else None for b, bucket in zip(bodies, buckets, strict=True)],
            [
                cash_account(b.wallet) if bucket is not None and b.wallet is not None else None
                for b, bucket in zip(bodies, buckets, strict=True)
            ],
        )
        if len(rows) != len(bodies):
            raise RuntimeError(f"batch_state answered {len(rows)} rows for {len(bodies)} top-ups")
        answers: list[dict[str, Any] | None] = [None] * len(bodies)
        creditable = [
            i
            for i, (body, row, bucket) in enumerate(zip(bodies, rows, buckets, strict=True))
            if bucket is not None
            and not row["unattributed"]
            and row["currency"] == body.currency
            and row["closed_at"] is None
        ]
        if creditable:
            postings = [
                self.ledger.topup_posting(
                    bodies[i].payment_id,
                    bodies[i].wallet or "",
                    bodies[i].amount_minor,
                    bodies[i].currency,
                    provider=bodies[i].provider,
                    actor=bodies[i].actor,
                    ref=bodies[i].provider_payment_id,
                )
                for i in creditable
            ]
            try:
                raw = await conn.fetchval(Q["post_topups"], self.ledger.batch_arguments(postings))
            except Exception as exc:
                # LedgerUnavailable pauses the consumer; anything else fails the batch, whose
                # messages then go one at a time.
                raise self.ledger.error_of(exc) from exc
            if len(raw) != len(creditable):
                raise RuntimeError(f"ledger.post_batch answered {len(raw)} for {len(creditable)} postings")
            credited: list[dict[str, Any]] = []
            for i, answer in zip(creditable, raw, strict=True):
                try:
                    posted = self.ledger.answer(answer)
                except LedgerError as exc:
                    answers[i] = await self._refused(conn, bodies[i], exc)
                else:
                    answers[i] = await self._credited(conn, bodies[i], posted, logged=False)
                    credited.append(_credit_fields(bodies[i], posted))
            if credited:
                # One line for the batch's credits, not one a top-up: a line is a write(2) of its
                # own (core.logging), about 20 µs, a tenth of this process's CPU per top-up.
                log.info("top-ups credited", count=len(credited), credits=credited)
        done: list[dict[str, Any]] = []
        for body, answer in zip(bodies, answers, strict=True):
            done.append(answer if answer is not None else await self.handle(conn, body))
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
        except LedgerError as exc:
            return await self._refused(conn, body, exc)
        return await self._credited(conn, body, posted)

    async def _refused(
        self, conn: asyncpg.Connection, body: TopupRecorded, exc: LedgerError
    ) -> dict[str, Any]:
        """The ledger's refusal of the top-up: an outcome, or raised (see the module's list)."""
        wallet = body.wallet or ""
        if isinstance(exc, TransactionIdReused):
            return await self._reused(body, exc)
        if isinstance(exc, AccountNotFound):
            if exc.fields.get("account") in (cash_account(wallet), promo_account(wallet)):
                return await self._unattributed(conn, body, Unattributed.UNKNOWN_WALLET)
            # No clearing account for this provider or currency: fixable, then replayable.
            raise Unprocessable(f"no ledger account {str(exc.fields.get('account'))[:120]}") from exc
        if isinstance(exc, CurrencyMismatch):
            return await self._unattributed(conn, body, Unattributed.CURRENCY_MISMATCH)
        if isinstance(exc, InvalidRequest):
            raise Unprocessable(f"the ledger refused the top-up as invalid ({exc.code})") from exc
        if isinstance(exc, LedgerUnavailable):
            raise exc  # a retry cures it: the consumer pauses (is_transient)
        if isinstance(exc, _IMPOSSIBLE):
            raise Unprocessable(f"the ledger refused a top-up with {exc.code}: a defect") from exc
        raise Unprocessable(f"unknown ledger refusal {exc.code}: a defect") from exc

    async def _credited(
        self, conn: asyncpg.Connection, body: TopupRecorded, posted: PostResult, *, logged: bool = True
    ) -> dict[str, Any]:
        """``logged=False``: the caller logs it (handle_batch, one line a batch)."""
        if not posted.replayed and body.provider == ANNOUNCED_PROVIDER and body.wallet is not None:
            await announce(conn, body, body.wallet, posted, exchange=self.events_exchange)
        if logged:
            log.info(
                "top-up credited" if not posted.replayed else "top-up credited before",
                **_credit_fields(body, posted),
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


def _credit_fields(body: TopupRecorded, posted: PostResult) -> dict[str, Any]:
    return {
        "payment_id": body.payment_id,
        "transaction_id": posted.id,
        "provider": body.provider,
        "route": body.route,
        "replayed": posted.replayed,
    }


async def announce(
    conn: asyncpg.Connection,
    topup: TopupRecorded | UnattributedTopup,
    wallet: str,
    posted: PostResult,
    *,
    exchange: str = EVENTS_EXCHANGE,
) -> None:
    """``TopupCredited`` for a top-up just credited to ``wallet``, into the outbox in the
    caller's transaction (the credit's). Ids and the amount only: no personal data."""
    await enqueue(
        conn,
        topup_credited(
            payment_id=topup.payment_id,
            provider=topup.provider,
            provider_payment_id=topup.provider_payment_id,
            wallet=wallet,
            amount_minor=topup.amount_minor,
            currency=topup.currency,
            credited_at=posted.posted_at,
            exchange=exchange,
        ),
        table=OUTBOX_TABLE,
    )
