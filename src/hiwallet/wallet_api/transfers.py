"""The transfer pipeline: p2p, payment, B2P and B2B, one coalesced statement each in the common
case, and reading a transfer back."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

import asyncpg
import structlog

from hiwallet import ledger
from hiwallet.core import uow
from hiwallet.core.coalesce import Coalescer
from hiwallet.core.db import is_connection_error, is_transient
from hiwallet.core.http import ProblemError
from hiwallet.core.http.idempotency import check_idempotency_key, in_progress, reused
from hiwallet.core.ids import new_id
from hiwallet.core.logging import error_fields
from hiwallet.core.relay_hint import RelayHint
from hiwallet.ledger import Posting
from hiwallet.wallet_api import domain, errors
from hiwallet.wallet_api.access import check_currency, visible_transaction
from hiwallet.wallet_api.adapters import Q, WalletAccess
from hiwallet.wallet_api.domain import AccountKind, Caller, Tier
from hiwallet.wallet_api.idempotency import Answer, lock_key, replay, request_hash
from hiwallet.wallet_api.parties import PartyCache
from hiwallet.wallet_api.retry import answer_for, problem_for
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.views import JSON, view_of_posted
from hiwallet.wallet_api.webhooks import payment_received

log = structlog.get_logger(__name__)

TRANSFER_ATTEMPTS = 3  # a transfer decided again after "stale" or "retry" answers


# (UTC day number, its month's first day): the month of the limits, worked out once a day
# rather than on every transfer.
_month: tuple[int, date] = (-1, date(1970, 1, 1))


def _this_month() -> date:
    global _month
    day = int(time.time() // 86_400)
    if day != _month[0]:
        _month = (day, datetime.fromtimestamp(day * 86_400, UTC).date().replace(day=1))
    return _month[1]


# Not frozen: a frozen dataclass sets each of its 21 fields through object.__setattr__, 4.4 µs a
# transfer against 1.1 (timeit); nothing changes an item once made.
@dataclass
class TransferItem:
    """One transfer as wallet.transfer_batch takes it: the key, what was decided on, the limit,
    the view's inputs and the posting."""

    bucket: int
    scope: str
    key: str
    lock: int
    fingerprint: bytes
    issuer: str
    subject: str
    src_account: str
    src_tier: Tier | None
    dst_bucket: int
    dst_account: str
    dst_tier: Tier | None
    month: date
    limit_kind: domain.LimitKind | None
    limit_lock: int
    currency: str
    amount: int
    limit: int | None
    view: JSON
    posting: Posting
    # The merchant's event (wallet.webhook_events' row) when the payee is a business: written
    # in the batch's own statement, for this transfer only if it posts (transfer_batch_events).
    event: JSON | None = None


class _DecideAgain(Exception):
    """wallet.transfer_batch answered "stale" or "retry", or the cache's parties were refused:
    the transfer is decided again (from parties read afresh, unless it was "retry")."""


class Transfers:
    def __init__(
        self,
        pool: asyncpg.Pool,
        the_ledger: ledger.Ledger,
        settings: WalletApiSettings,
        parties: PartyCache,
    ) -> None:
        self.pool = pool
        self.ledger = the_ledger
        self.settings = settings
        self.parties = parties
        # Wakes merchant-webhooks after a commit that wrote events (set by the service).
        self.events_hint: RelayHint | None = None
        # Concurrent transfers share a statement and a commit; two of one source account never
        # share a batch (wallet.transfer_batch would answer "retry" to the second). One writer
        # drains; spares only beside a stalled batch (settings).
        spare_after_ms = settings.transfer_spare_after_ms
        self.coalescer: Coalescer[TransferItem, JSON] = Coalescer(
            self._transfer_batch,
            writers=max(1, settings.transfer_writers),
            max_batch=max(1, settings.transfer_max_batch) if settings.transfer_writers > 0 else 1,
            conflict_key=lambda item: (item.bucket, item.src_account),
            spare_after_s=spare_after_ms / 1000 if spare_after_ms > 0 else None,
            linger_s=settings.transfer_linger_ms / 1000 if settings.transfer_linger_ms > 0 else None,
            linger_batch=settings.transfer_linger_batch,
        )

    async def transfer(
        self,
        caller: Caller,
        key: str | None,
        *,
        from_wallet: str,
        to_wallet_number: str,
        amount: int,
        currency: str,
        reference: str | None,
    ) -> Answer:
        """p2p, payment, B2P or B2B, by the kinds of the two accounts; one ledger transaction.

        One statement in the common case: the parties come from the cache (a statement to read
        them otherwise), and everything that writes is one call of wallet.transfer_batch,
        shared with the transfers that arrive at the same moment (migration 0005). That call
        checks again, under the key's lock, what was decided here from the cache (membership
        and tiers) and answers "stale" when it changed: then the parties are read again and
        the decision made again. A refusal at any point writes nothing."""
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(from_wallet)
        payload = {
            "from_wallet": from_wallet,
            "to_wallet_number": to_wallet_number,
            "amount": amount,
            "currency": currency,
            "reference": reference,
        }
        fingerprint = request_hash("transfer", payload)
        to_bucket, number = domain.parse_wallet_number(to_wallet_number)
        check_currency(self.settings, currency)
        src_key, dst_key = (from_wallet, caller.issuer, caller.subject), (to_bucket, number)
        must_read = False

        async def decide() -> Answer:
            nonlocal must_read
            src, dst = self.parties.src.get(src_key), self.parties.dst.get(dst_key)
            cached = not must_read and src is not None and dst is not None
            if not cached:
                read = await self.parties.read(
                    self.pool, caller, key, fingerprint, bucket, from_wallet, to_bucket, number
                )
                if isinstance(read, Answer):
                    return read
                src, dst = read
            if src is None or dst is None:
                raise AssertionError("parties neither cached nor read")
            try:
                item = self._transfer_item(caller, key, fingerprint, src, dst, amount, currency, reference)
            except ProblemError:
                if not cached:
                    raise
                # Refused on what the cache knew: a tier may have risen since. Read and decide
                # again before refusing.
                self.parties.forget(src_key, dst_key)
                must_read = True
                raise _DecideAgain() from None
            answer = await self.coalescer.submit(item)
            if "result" in answer:
                return Answer(201, view_of_posted({"result": answer["result"], "view": item.view}))
            if answer.get("stale"):
                # Membership or a tier changed since the cache saw them: read and decide again.
                self.parties.forget(src_key, dst_key)
                must_read = True
                raise _DecideAgain()
            if answer.get("retry"):
                # Another transfer of this source shared the batch (the coalescer keeps them
                # apart, so this is rare): send it again as it is.
                raise _DecideAgain()
            return self._refused(item, answer)

        # Decided again at once after "stale" or "retry": not the unit of work's retry (nothing
        # failed; the parties changed, or the batch held another transfer of this source).
        for attempt in range(1, TRANSFER_ATTEMPTS + 1):
            try:
                return await decide()
            except _DecideAgain as exc:
                if attempt == TRANSFER_ATTEMPTS:
                    raise errors.Unavailable("the transfer could not be decided; retry") from exc
        raise AssertionError("unreachable")

    def _transfer_item(
        self,
        caller: Caller,
        key: str,
        fingerprint: bytes,
        src: WalletAccess,
        dst: WalletAccess,
        amount: int,
        currency: str,
        reference: str | None,
    ) -> TransferItem:
        """What may be moved, decided from both parties: the posting and what to check with it."""
        if dst.wallet.id == src.wallet.id:
            raise errors.SameWallet("a wallet cannot send to itself")
        if currency != src.wallet.currency or currency != dst.wallet.currency:
            raise errors.CurrencyMismatch(
                "both wallets must hold the request's currency",
                currency=currency,
                from_currency=src.wallet.currency,
                to_currency=dst.wallet.currency,
            )
        type_ = domain.transfer_type(src.kind, dst.kind)
        domain.check_may_send(src.kind, src.tier, type_)
        domain.check_may_receive(dst.kind, dst.tier)
        # A personal account's transfers count against its tier's monthly limit.
        kind = domain.limit_kind(type_) if src.kind is AccountKind.PERSONAL and src.tier else None
        ref = reference or f"{type_.value} to {dst.wallet.number}"
        posting = self.ledger.transfer_posting(
            new_id(), src.wallet.id, dst.wallet.id, amount, currency, type_=type_, actor=caller.actor, ref=ref
        )
        event = None
        if dst.kind is AccountKind.BUSINESS:
            event = payment_received(posting.id, type_.value, dst.wallet, amount, currency, ref)
        bucket, account = src.wallet.bucket, src.wallet.account_id
        month = _this_month()
        return TransferItem(
            bucket=bucket,
            scope=caller.scope,
            key=key,
            lock=lock_key(bucket, caller.scope, key),
            fingerprint=fingerprint,
            issuer=caller.issuer,
            subject=caller.subject,
            src_account=account,
            src_tier=src.tier,
            dst_bucket=dst.wallet.bucket,
            dst_account=dst.wallet.account_id,
            dst_tier=dst.tier,
            month=month,
            limit_kind=kind,
            # 0 when no limit applies (wallet.transfer_batch then takes no limit lock)
            limit_lock=lock_key(bucket, f"limit:{account}", f"{month}:{kind}:{currency}") if kind else 0,
            currency=currency,
            amount=amount,
            limit=self.settings.monthly_limit(src.tier, kind) if kind and src.tier else None,
            view={"type": type_.value, "ref": ref, "metadata": posting.metadata, "currency": currency},
            posting=posting,
            event=event,
        )

    def _refused(self, item: TransferItem, answer: JSON) -> Answer:
        """An answer of wallet.transfer_batch other than posted, stale or retry."""
        if answer.get("in_progress"):
            raise in_progress()
        if answer.get("reused"):
            raise reused()
        if "stored" in answer:
            found = answer["stored"]
            return replay(found["status"], found["body"], found["posted"])
        if "limit" in answer and item.limit_kind and item.src_tier:
            self._check_limit(
                item.src_tier, item.limit_kind, item.currency, item.amount, answer["limit"]["used"]
            )
        try:
            self.ledger.answer(answer)  # a refusal: raises the ledger's error
        except ledger.LedgerError as refused:
            problem = problem_for(refused)
            if problem is None:
                raise
            raise problem from refused
        raise AssertionError(f"unexpected answer from wallet.transfer_batch: {answer}")

    async def _transfer_batch(self, items: Sequence[TransferItem]) -> list[JSON | BaseException]:
        """One call of wallet.transfer_batch: an answer per transfer. Retried whole after a
        deadlock or serialization failure; any other failure of a batch of many makes each
        transfer go alone, so one cannot take its neighbours down."""
        args = (
            [i.bucket for i in items],
            [i.scope for i in items],
            [i.key for i in items],
            [i.lock for i in items],
            [i.fingerprint for i in items],
            [i.issuer for i in items],
            [i.subject for i in items],
            [i.src_account for i in items],
            [i.src_tier for i in items],
            [i.dst_bucket for i in items],
            [i.dst_account for i in items],
            [i.dst_tier for i in items],
            [i.month for i in items],
            [i.limit_kind for i in items],
            [i.limit_lock for i in items],
            [i.currency for i in items],
            [i.amount for i in items],
            [i.limit for i in items],
            [i.view for i in items],
            self.ledger.batch_arguments([i.posting for i in items]),
        )

        events = [i.event for i in items]
        # A batch with a payment to a business writes its events in the same statement (one
        # transaction: the movement and its event, or neither); the others pay nothing for it.
        with_events = any(e is not None for e in events)
        query = Q["transfer_batch_events"] if with_events else Q["transfer_batch"]
        extra = (events,) if with_events else ()

        async def call(conn: asyncpg.Connection) -> list[JSON]:
            answers: list[JSON] = await conn.fetchval(query, *args, *extra)
            return list(answers)

        try:
            # One autocommit statement (the same round trip as pool.fetchval), done again by the
            # unit of work's policy after a deadlock or serialization failure.
            answers = list(await uow.in_transaction(self.pool, call, one_statement=True))
            if with_events and self.events_hint is not None:
                self.events_hint.committed()
            return list[JSON | BaseException](answers)
        except uow.Unavailable as exc:
            if not uow.is_conflict(exc):  # a lost connection each time: the outage's answer
                return [answer_for(exc.__cause__ or exc)] * len(items)
            log.info("transfer batch busy after retries", **error_fields(exc.__cause__ or exc))
            return [errors.Unavailable("the database is busy; retry")] * len(items)
        except asyncpg.PostgresError as exc:
            if is_connection_error(exc):
                # The server went away: each transfer alone would only meet the same outage.
                return [answer_for(exc)] * len(items)
            if len(items) > 1:
                return [answer for item in items for answer in await self._transfer_batch([item])]
            # This transfer's own failure, as the ledger classifies it: a refusal, "unavailable"
            # if a retry can cure it, else a defect (500, never "retry").
            return [answer_for(self.ledger.error_of(exc))]
        except Exception as exc:
            if not is_transient(exc):  # not the database's failure: a defect, for every caller
                raise
            return [answer_for(exc)] * len(items)

    def _check_limit(self, tier: Tier, kind: domain.LimitKind, currency: str, amount: int, used: int) -> None:
        limit = self.settings.monthly_limit(tier, kind)
        if used > limit:
            raise errors.MonthlyLimitExceeded(
                f"this {kind.value} would exceed the monthly limit of the {tier.value} tier",
                kind=kind.value,
                tier=tier.value,
                currency=currency,
                limit=limit,
                used=used - amount,
                remaining=max(0, limit - (used - amount)),
                amount=amount,
            )

    # -- reading transfers --------------------------------------------------------------------------

    async def transfer_of(self, caller: Caller, transfer_id: str) -> JSON:
        return (await visible_transaction(self.ledger, caller, transfer_id, self.pool)).view
