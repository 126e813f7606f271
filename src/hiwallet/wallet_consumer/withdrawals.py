"""The withdrawal saga's wallet commands (CONTRACT-11 part B): ``DebitForWithdrawal``,
``SettleWithdrawal`` and ``RefundWithdrawal`` from ``hiwallet.withdrawals.wallet``, each
answered with one result to the orchestrator.

Every handler stores its response: in core's Consumer's transaction, the command's id is
locked (one handling of it at a time), its stored response looked up in
``wallet.processed_messages``; found, the same response is put into ``wallet.outbox`` again
(a new message id, the same body) and nothing else happens; else the effect, the response
stored under the command's id and put into the outbox, all in that one transaction. So a
command published again (the orchestrator's stuck saga scan: the same command id, another
message id) gets the stored response published again, and the saga moves on; a redelivery of
the same message is core's Consumer's (processed_events): acked, nothing done.

The debit is decided before anything is written, as wallet-api decides a transfer's source
(the same tables): the wallet exists (wallet-api's record) and ``requested_by`` is a member of
its account, else "membership" (the orchestrator must not learn which wallets exist); the
request's currency is the wallet's ("currency"); a personal account's tier allows withdrawals
(verified, contracted; unknown and unverified: "tier"; a business account has no tier and no
monthly limit); the month's withdrawals with this one stay within the tier's limit
(``HIWALLET_WALLET_CONSUMER_LIMIT_*_WITHDRAWAL_MINOR``, counted in ``wallet.limit_usage``
kind ``withdrawal``: "limit"); then the ledger's withdrawal ("insufficient_funds" when the
wallet cannot pay amount and fee). A refusal writes nothing but the stored rejection (the
limit's count and the posting are one savepoint, rolled back together).

A refund gives back what its debit counted against the monthly limit, to the month it was
counted in (the money did not leave; ``wallet.return_withdrawal``, at most once).

Settle and refund check the command against this saga's stored debit (the transaction, the
amount, the currency) and against each other (a settled withdrawal is not refunded, a refunded
one not settled): a mismatch is a defect upstream, :class:`Unprocessable` (dead-lettered after
the bounded attempts), never money moved on a wrong message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

import asyncpg
import orjson
import structlog
from pydantic import BaseModel, ValidationError

from hiwallet.contracts.merchant_events import WITHDRAWAL_COMPLETED, WITHDRAWAL_FAILED, event_id
from hiwallet.contracts.withdrawals import (
    DebitForWithdrawal,
    RefundWithdrawal,
    RejectReason,
    SettleWithdrawal,
    WithdrawalDebited,
    WithdrawalDebitRejected,
    WithdrawalRefunded,
    WithdrawalSettled,
    command_id,
)
from hiwallet.core.broker import OutgoingMessage
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.db import after_commit
from hiwallet.core.ids import derived_id, new_id
from hiwallet.core.outbox import enqueue, enqueue_many
from hiwallet.core.queries import load_queries
from hiwallet.ledger import (
    MAX_KEY,
    MAX_TEXT,
    AccountNotFound,
    CurrencyMismatch,
    InsufficientFunds,
    InvalidRequest,
    Ledger,
    LedgerError,
    LedgerUnavailable,
    Posting,
    TransactionIdReused,
    cash_account,
)
from hiwallet.wallet_consumer.topups import OUTBOX_TABLE, wallet_bucket

log = structlog.get_logger(__name__)

Q = load_queries(Path(__file__).parent / "sql" / "withdrawals.sql")

# The consumer's name in processed_events: apart from the top-ups' (one database, two consumers).
WITHDRAWALS_CONSUMER_NAME = "wallet-consumer-withdrawals"
OUTBOX_CHANNEL = "wallet_outbox"
COMMAND_TYPES: dict[str, type[BaseModel]] = {
    "DebitForWithdrawal": DebitForWithdrawal,
    "SettleWithdrawal": SettleWithdrawal,
    "RefundWithdrawal": RefundWithdrawal,
}
# The clearing the saga's money sits in between the debit and the bank's transfer.
PROVIDER = "bank"
# Who the ledger records for a settlement: the bank's transfer, reported through the saga.
SETTLE_ACTOR = "system:withdrawal-saga"
_KEY = re.compile(r"^[A-Za-z0-9:_.\-]+$")
Command = DebitForWithdrawal | SettleWithdrawal | RefundWithdrawal


class _NotForTheBatch(Exception):
    """The batch path met what it leaves to the one-command path (a refusal, a replay): its
    savepoint is rolled back and the batch's commands go one by one, in the same transaction."""


class _Refused(Exception):
    """A debit refused before or by the ledger: rolls its savepoint back (nothing counted,
    nothing posted); the rejection is then stored and answered."""

    def __init__(self, reason: RejectReason, detail: str = "") -> None:
        super().__init__(reason)
        self.reason: RejectReason = reason
        self.detail = detail


@dataclass(frozen=True)
class WithdrawalLimits:
    """Monthly withdrawal limits of personal accounts, per tier and currency, in minor units.
    Tiers not here may not withdraw; business accounts have no limit."""

    verified_minor: int
    contracted_minor: int

    def of(self, tier: str) -> int | None:
        return {"verified": self.verified_minor, "contracted": self.contracted_minor}.get(tier)


def ledger_key(step: str, saga_id: str) -> str:
    """The ledger key of a saga's step: ``withdrawal:<saga>`` (readable, the saga's UUIDv7 id)
    when the saga id fits the ledger's key, else derived from it."""
    key = f"{step}:{saga_id}"
    if len(key) <= MAX_KEY and _KEY.match(key):
        return key
    return f"{step}:{derived_id('withdrawal-ledger-key', step, saga_id)}"


def _this_month() -> date:
    return datetime.now(UTC).date().replace(day=1)


def parse(message: IncomingMessage) -> BaseModel:
    """The command's body as its model, or :class:`Unprocessable` naming the wrong fields
    (their names and pydantic's error types, never their values)."""
    kind = message.type or message.routing_key
    model = COMMAND_TYPES.get(kind)
    if model is None:
        raise Unprocessable(f"unknown withdrawal command {kind[:60]!r}")
    if not isinstance(message.body, Mapping):
        raise Unprocessable("the body is not a JSON object")
    try:
        return model.model_validate(message.body)
    except ValidationError as exc:
        fields = sorted({f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['type']}" for e in exc.errors()})
        raise Unprocessable(f"malformed {kind} ({'; '.join(fields)[:300]})") from None


class WithdrawalHandler:
    """``core.consumer.Handler`` of the wallet's withdrawal commands: ``await handler(conn,
    message)`` in the consumer's transaction, answering the outcome stored with the message."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        exchange: str,
        limits: WithdrawalLimits,
        count: Callable[[str], None] | None = None,
        this_month: Callable[[], date] = _this_month,
        on_committed: Callable[[], None] | None = None,
        on_events: Callable[[], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.exchange = exchange
        self.limits = limits
        self._count = count
        self._this_month = this_month
        # After a commit that wrote wallet.outbox: wakes the relay (a RelayHint's committed;
        # wallet.outbox has no NOTIFY trigger, migrations/wallet/0014).
        self._on_committed = on_committed or (lambda: None)
        # After a commit that wrote merchants' events: wakes merchant-webhooks (a RelayHint).
        self._on_events = on_events or (lambda: None)

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        return await self._one(conn, parse(message))

    async def _one(self, conn: asyncpg.Connection, command: BaseModel) -> Mapping[str, Any]:
        done = await self.handle(conn, command)
        if self._count is not None:
            self._count(done["result"])
        return done

    async def batch(
        self, conn: asyncpg.Connection, messages: Sequence[IncomingMessage]
    ) -> list[Mapping[str, Any]]:
        """Commands in one transaction (core.consumer.BatchHandler), answered in delivery order.

        The common batch (new debits and settlements, each saga once, every debit allowed) is
        handled set-based: a statement for each step of the whole batch (:meth:`_all_at_once`),
        about ten round trips a batch instead of about nine a command. Anything else (a refund,
        a command answered before, a refusal, a command twice, a command that does not fit its
        saga) goes through :meth:`handle` one command at a time, in the same transaction: the
        one implementation of the rare cases and of their errors."""
        commands = [parse(message) for message in messages]
        done = await self._all_at_once(conn, commands)
        if done is None:
            return [await self._one(conn, command) for command in commands]
        if self._count is not None:
            for outcome in done:
                self._count(outcome["result"])
        return list[Mapping[str, Any]](done)

    async def _all_at_once(
        self, conn: asyncpg.Connection, commands: Sequence[BaseModel]
    ) -> list[dict[str, Any]] | None:
        """The batch path: the same checks, writes and answers as :meth:`handle` for each
        command, or None (nothing written) when a command needs the one-command path."""
        debits = [c for c in commands if isinstance(c, DebitForWithdrawal)]
        settles = [c for c in commands if isinstance(c, SettleWithdrawal)]
        if len(debits) + len(settles) != len(commands):
            return None  # a refund (rare: a failed or cancelled withdrawal), or no command
        ids = [c.command_id for c in debits + settles]
        if len(set(ids)) != len(ids) or len({c.saga_id for c in debits + settles}) != len(ids):
            return None  # a command twice, or two steps of one saga: in order, one by one
        await conn.execute(Q["lock_commands"], ids)
        lookups = [
            *ids,
            *(command_id(c.saga_id, "debit") for c in settles),
            *(command_id(c.saga_id, "refund") for c in settles),
        ]
        stored = {row["command_id"]: row for row in await conn.fetch(Q["stored_responses"], lookups)}
        if any(i in stored for i in ids):
            return None  # answered before: its stored response is published again
        if not await self._settles_fit(settles, stored):
            return None
        allowed = await self._debits_allowed(conn, debits)
        if allowed is None:
            return None
        postings: list[Posting] = []
        responses: dict[str, BaseModel] = {}
        try:
            for debit in debits:
                posting = self._withdrawal_posting(debit)
                postings.append(posting)
                responses[debit.command_id] = _debited(debit, posting, posting.id)
            for settle in settles:
                posting = self._settlement_posting(settle)
                postings.append(posting)
                responses[settle.command_id] = WithdrawalSettled(
                    command_id=settle.command_id, saga_id=settle.saga_id, transaction_id=posting.id
                )
        except LedgerError:
            return None  # the one-command path answers it (a rejection, or Unprocessable)
        bodies = {i: r.model_dump(mode="json") for i, r in responses.items()}
        savepoint = conn.transaction()
        await savepoint.start()
        try:
            if allowed:
                await self._count_all(conn, allowed)
            commands_in_order = [*debits, *settles]
            await conn.execute(
                Q["store_responses"],
                ids,
                [type(c).__name__ for c in commands_in_order],
                [c.saga_id for c in commands_in_order],
                [type(responses[i]).__name__ for i in ids],
                [orjson.dumps(bodies[i]).decode() for i in ids],
            )
            after_commit(self._on_committed, once=True)
            await enqueue_many(
                conn,
                [
                    self._message(type(responses[i]).__name__, bodies[i], c.saga_id)
                    for i, c in zip(ids, commands_in_order, strict=True)
                ],
                table=OUTBOX_TABLE,
            )
            if settles:
                await self._events(
                    conn,
                    [(s.wallet, WITHDRAWAL_COMPLETED, s.saga_id, responses[s.command_id].transaction_id,  # type: ignore[attr-defined]
                      s.amount_minor) for s in settles],
                )  # fmt: skip
            # Last: the settlements lock the one central nostro row until the commit.
            raw = await conn.fetchval(Q["post_batch"], self.ledger.batch_arguments(postings))
            for posting, answer in zip(postings, raw, strict=True):
                try:
                    posted = Ledger.answer(answer)
                except LedgerError as exc:
                    raise _NotForTheBatch from exc  # e.g. insufficient funds: a rejection
                if posted.id != posting.id:  # the responses name posting.id: never another
                    raise RuntimeError("the ledger answered another transaction for a withdrawal")
        except _NotForTheBatch:
            await savepoint.rollback()
            return None
        except BaseException:
            await savepoint.rollback()
            raise
        await savepoint.commit()
        done: list[dict[str, Any]] = []
        by_id = {c.command_id: c for c in commands_in_order}
        for command in commands:
            i = command.command_id  # type: ignore[attr-defined]
            kind = type(responses[i]).__name__
            result = "debited" if kind == "WithdrawalDebited" else "settled"
            log.info(
                "withdrawal command handled",
                command=type(by_id[i]).__name__,
                saga_id=by_id[i].saga_id,
                result=result,
                reason=None,
            )
            done.append({"result": result, "command_id": i, "response": kind, **_ids(bodies[i])})
        return done

    async def _settles_fit(
        self, settles: Sequence[SettleWithdrawal], stored: Mapping[str, asyncpg.Record]
    ) -> bool:
        """Each settlement names its saga's stored debit (transaction, amount, currency, the
        wallet's bucket and cash account), and the saga was not refunded: what
        :meth:`_settle` checks, for the batch (one read of the ledger for all)."""
        for settle in settles:
            if wallet_bucket(settle.wallet) is None or not settle.debit_transaction_id.startswith(
                f"{wallet_bucket(settle.wallet):04d}:"
            ):
                return False
            debit = stored.get(command_id(settle.saga_id, "debit"))
            if debit is None or debit["response_type"] != "WithdrawalDebited":
                return False
            body = _object(debit["response"])
            if (body.get("transaction_id"), body.get("amount_minor"), body.get("currency")) != (
                settle.debit_transaction_id,
                settle.amount_minor,
                settle.currency,
            ):
                return False
            if command_id(settle.saga_id, "refund") in stored:
                return False
        if not settles:
            return True
        # committed by earlier commands: read on the ledger's own connection
        found = await self.ledger.has_lines(
            [(s.debit_transaction_id, cash_account(s.wallet)) for s in settles]
        )
        return all(found)

    async def _debits_allowed(
        self, conn: asyncpg.Connection, debits: Sequence[DebitForWithdrawal]
    ) -> list[tuple[DebitForWithdrawal, int, str, int]] | None:
        """What :meth:`_decide_and_debit` decides before the ledger, for every debit at once:
        the personal accounts' debits to count against their limits (debit, bucket, account,
        limit), or None when any debit would be refused."""
        if not debits:
            return []
        buckets = [wallet_bucket(d.wallet) for d in debits]
        if any(b is None for b in buckets):
            return None
        parties = await conn.fetch(
            Q["debit_parties"],
            buckets,
            [d.wallet for d in debits],
            [d.requested_by.issuer for d in debits],
            [d.requested_by.subject for d in debits],
        )
        counted: list[tuple[DebitForWithdrawal, int, str, int]] = []
        for debit, bucket, party in zip(debits, buckets, parties, strict=True):
            if party["currency"] is None or not party["member"] or party["currency"] != debit.currency:
                return None
            if party["kind"] == "personal":
                limit = self.limits.of(str(party["tier"]))
                if limit is None:
                    return None
                counted.append((debit, int(bucket or 0), str(party["account_id"]), limit))
        return counted

    async def _count_all(
        self, conn: asyncpg.Connection, allowed: Sequence[tuple[DebitForWithdrawal, int, str, int]]
    ) -> None:
        rows = await conn.fetch(
            Q["count_withdrawals"],
            [bucket for _, bucket, _, _ in allowed],
            [d.command_id for d, _, _, _ in allowed],
            [account for _, _, account, _ in allowed],
            self._this_month(),
            [d.currency for d, _, _, _ in allowed],
            [d.amount_minor for d, _, _, _ in allowed],
            [limit for _, _, _, limit in allowed],
        )
        if not all(_object(row["counted"])["counted"] for row in rows):
            raise _NotForTheBatch  # a limit reached: the one-command path rejects that debit

    async def handle(self, conn: asyncpg.Connection, command: BaseModel) -> dict[str, Any]:
        if not isinstance(command, Command):
            raise Unprocessable(f"not a wallet command: {type(command).__name__}")
        await conn.execute(Q["lock_command"], command.command_id)
        stored = await conn.fetchrow(Q["stored_response"], command.command_id)
        if stored is not None:
            return await self._republish(conn, command, stored)
        response: BaseModel
        settlement: Posting | None = None
        if isinstance(command, DebitForWithdrawal):
            response = await self._debit(conn, command)
        elif isinstance(command, SettleWithdrawal):
            response, settlement = await self._settle(conn, command)
        else:
            response = await self._refund(conn, command)
        body = response.model_dump(mode="json")
        kind = type(response).__name__
        await conn.execute(
            Q["store_response"], command.command_id, type(command).__name__, command.saga_id, kind, body
        )
        await self._enqueue(conn, kind, body, command.saga_id)
        if isinstance(command, SettleWithdrawal):
            await self._events(
                conn,
                [
                    (
                        command.wallet,
                        WITHDRAWAL_COMPLETED,
                        command.saga_id,
                        body["transaction_id"],
                        command.amount_minor,
                    )
                ],
            )
        elif isinstance(command, RefundWithdrawal):
            debit = await conn.fetchrow(Q["stored_response"], command_id(command.saga_id, "debit"))
            amount = int(_object(debit["response"]).get("amount_minor", 0)) if debit is not None else 0
            await self._events(
                conn, [(command.wallet, WITHDRAWAL_FAILED, command.saga_id, body["transaction_id"], amount)]
            )
        if settlement is not None:
            await self._post_settlement(conn, settlement)
        result = {
            "WithdrawalDebited": "debited",
            "WithdrawalDebitRejected": "rejected",
            "WithdrawalSettled": "settled",
            "WithdrawalRefunded": "refunded",
        }[kind]
        log.info(
            "withdrawal command handled",
            command=type(command).__name__,
            saga_id=command.saga_id,
            result=result,
            reason=body.get("reason"),
        )
        return {"result": result, "command_id": command.command_id, "response": kind, **_ids(body)}

    async def _events(self, conn: asyncpg.Connection, done: Sequence[tuple[str, str, str, str, int]]) -> None:
        """The merchants' events of settled or refunded withdrawals (wallet, type, saga id, the
        transaction, the amount) of businesses' wallets, in the command's transaction."""
        buckets = [wallet_bucket(w) for w, *_ in done]
        written = await conn.execute(
            Q["withdrawal_events"],
            buckets,
            [w for w, *_ in done],
            [t for _, t, *_ in done],
            [event_id(t, saga) for _, t, saga, *_ in done],
            [saga for _, _, saga, *_ in done],
            [tx for *_, tx, _ in done],
            [amount for *_, amount in done],
        )
        if written != "INSERT 0 0":
            after_commit(self._on_events, once=True)

    # -- the stored response, published again ---------------------------------------------------

    async def _republish(
        self, conn: asyncpg.Connection, command: Command, stored: asyncpg.Record
    ) -> dict[str, Any]:
        kind = type(command).__name__
        if stored["command_type"] != kind:
            # Two commands under one id: contracts.withdrawals.command_id makes that impossible.
            raise Unprocessable(f"command id of a {stored['command_type']} reused by a {kind}")
        body = _object(stored["response"])
        await self._enqueue(conn, stored["response_type"], body, stored["saga_id"])
        log.info(
            "withdrawal command answered again",
            command=kind,
            saga_id=stored["saga_id"],
            response=stored["response_type"],
        )
        return {
            "result": "republished",
            "command_id": command.command_id,
            "response": stored["response_type"],
            **_ids(body),
        }

    def _message(self, kind: str, body: Mapping[str, Any], saga_id: str) -> OutgoingMessage:
        return OutgoingMessage(
            message_id=new_id(),
            exchange=self.exchange,
            routing_key=kind,
            type=kind,
            body=orjson.dumps(body),
            correlation_id=saga_id,
        )

    async def _enqueue(
        self, conn: asyncpg.Connection, kind: str, body: Mapping[str, Any], saga_id: str
    ) -> None:
        await enqueue(conn, self._message(kind, body, saga_id), table=OUTBOX_TABLE)
        after_commit(self._on_committed, once=True)

    def _withdrawal_posting(self, command: DebitForWithdrawal) -> Posting:
        """The debit's posting (wallet -amount-fee, clearing +amount, revenue +fee), its id
        known before it is posted (the ledger's id is its bucket and key)."""
        return self.ledger.withdrawal_posting(
            ledger_key("withdrawal", command.saga_id),
            command.wallet,
            command.amount_minor,
            command.currency,
            actor=f"customer:{command.requested_by.subject}"[:MAX_TEXT],
            ref=f"withdrawal:{command.saga_id}"[:MAX_TEXT],
            provider=PROVIDER,
        )

    def _settlement_posting(self, command: SettleWithdrawal) -> Posting:
        """The settlement's posting (clearing -, nostro +) in the debit's bucket."""
        return self.ledger.settlement_withdrawal_posting(
            ledger_key("withdrawal-settle", command.saga_id),
            PROVIDER,
            command.currency,
            owed=command.amount_minor,
            actor=SETTLE_ACTOR,
            ref=f"withdrawal:{command.saga_id}"[:MAX_TEXT],
            bucket=_debit_bucket(command.wallet, command.debit_transaction_id),
        )

    # -- DebitForWithdrawal -----------------------------------------------------------------------

    async def _debit(self, conn: asyncpg.Connection, command: DebitForWithdrawal) -> BaseModel:
        try:
            async with conn.transaction():  # a savepoint: a refusal leaves nothing behind
                return await self._decide_and_debit(conn, command)
        except _Refused as refused:
            return WithdrawalDebitRejected(
                command_id=command.command_id,
                saga_id=command.saga_id,
                reason=refused.reason,
                detail=refused.detail[:500],
            )

    async def _decide_and_debit(self, conn: asyncpg.Connection, command: DebitForWithdrawal) -> BaseModel:
        bucket = wallet_bucket(command.wallet)
        if bucket is None:
            raise _Refused("membership")
        requester = command.requested_by
        party = await conn.fetchrow(
            Q["debit_party"], bucket, command.wallet, requester.issuer, requester.subject
        )
        if party is None or not party["member"]:
            raise _Refused("membership")  # a stranger learns nothing about the wallet
        if party["currency"] != command.currency:
            raise _Refused("currency", f"the wallet holds {party['currency']}, not {command.currency}")
        if party["kind"] == "personal":
            tier = str(party["tier"])
            limit = self.limits.of(tier)
            if limit is None:
                raise _Refused("tier", f"a {tier} account may not withdraw")
            counted = await conn.fetchval(
                Q["count_withdrawal"],
                bucket,
                command.command_id,
                party["account_id"],
                self._this_month(),
                command.currency,
                command.amount_minor,
                limit,
            )
            if not counted["counted"]:
                raise _Refused(
                    "limit",
                    f"the month's withdrawals would be {counted['used']} of a {limit} limit"
                    f" ({command.currency}, minor units)",
                )
        try:
            posting = self._withdrawal_posting(command)
            posted = await self.ledger.post(posting, conn=conn)
        except InsufficientFunds as exc:
            raise _Refused(
                "insufficient_funds", "the wallet's available balance is less than amount and fee"
            ) from exc
        except CurrencyMismatch as exc:
            raise _Refused("currency", "the wallet holds another currency") from exc
        except AccountNotFound as exc:
            if exc.fields.get("account") == cash_account(command.wallet):
                raise _Refused("membership") from exc  # wallet-api's record without the ledger's
            raise Unprocessable(f"no ledger account {str(exc.fields.get('account'))[:120]}") from exc
        except TransactionIdReused as exc:
            # The saga's key names another request (another amount or wallet): a defect upstream.
            raise Unprocessable("the saga's debit key names another ledger transaction") from exc
        except InvalidRequest as exc:
            raise _Refused("invalid", f"the ledger refused the withdrawal as invalid ({exc.code})") from exc
        except LedgerUnavailable:
            raise  # a retry cures it: the consumer pauses
        except LedgerError as exc:
            raise Unprocessable(f"the ledger refused a withdrawal with {exc.code}: a defect") from exc
        return _debited(command, posting, posted.id)

    # -- SettleWithdrawal and RefundWithdrawal ------------------------------------------------------

    async def _saga_debit(
        self, conn: asyncpg.Connection, saga_id: str, debit_transaction_id: str, wallet: str
    ) -> dict[str, Any]:
        """This saga's stored WithdrawalDebited, which the command must name."""
        stored = await conn.fetchrow(Q["stored_response"], command_id(saga_id, "debit"))
        if stored is None or stored["response_type"] != "WithdrawalDebited":
            raise Unprocessable("no debit of this saga to settle or refund")
        debit = _object(stored["response"])
        if debit.get("transaction_id") != debit_transaction_id:
            raise Unprocessable("the command names another transaction than the saga's debit")
        try:
            # committed by an earlier command: read on the ledger's own connection
            posted = await self.ledger.transaction(debit_transaction_id)
        except LedgerUnavailable:
            raise
        except LedgerError as exc:
            raise Unprocessable(f"the saga's debit cannot be read ({exc.code})") from exc
        if cash_account(wallet) not in {leg.account for leg in posted.legs}:
            raise Unprocessable("the command's wallet is not the debit's")
        return debit

    async def _answered(
        self, conn: asyncpg.Connection, saga_id: str, step: Literal["settle", "refund"]
    ) -> bool:
        return await conn.fetchrow(Q["stored_response"], command_id(saga_id, step)) is not None

    async def _settle(self, conn: asyncpg.Connection, command: SettleWithdrawal) -> tuple[BaseModel, Posting]:
        """The settlement's response and its posting, not yet posted: every settlement locks
        the one central nostro row (central-only by design, ledger/accounts.py) until its
        commit, so the handler posts it last (:meth:`_post_settlement`), after the response is
        stored and queued. Its id is known before (the ledger's id is its bucket and key)."""
        _debit_bucket(command.wallet, command.debit_transaction_id)
        debit = await self._saga_debit(conn, command.saga_id, command.debit_transaction_id, command.wallet)
        if (debit.get("amount_minor"), debit.get("currency")) != (command.amount_minor, command.currency):
            raise Unprocessable("the settlement's amount or currency is not the debit's")
        if await self._answered(conn, command.saga_id, "refund"):
            raise Unprocessable("a refunded withdrawal cannot be settled")
        try:
            posting = self._settlement_posting(command)
        except LedgerError as exc:
            raise Unprocessable(f"the ledger refused the settlement with {exc.code}") from exc
        response = WithdrawalSettled(
            command_id=command.command_id, saga_id=command.saga_id, transaction_id=posting.id
        )
        return response, posting

    async def _post_settlement(self, conn: asyncpg.Connection, posting: Posting) -> None:
        try:
            posted = await self.ledger.post(posting, conn=conn)
        except LedgerUnavailable:
            raise
        except LedgerError as exc:
            raise Unprocessable(f"the ledger refused the settlement with {exc.code}") from exc
        if posted.id != posting.id:  # the response already names posting.id: never another
            raise RuntimeError("the ledger answered another transaction for the settlement")

    async def _refund(self, conn: asyncpg.Connection, command: RefundWithdrawal) -> BaseModel:
        bucket = _debit_bucket(command.wallet, command.debit_transaction_id)
        await self._saga_debit(conn, command.saga_id, command.debit_transaction_id, command.wallet)
        if await self._answered(conn, command.saga_id, "settle"):
            raise Unprocessable("a settled withdrawal cannot be refunded")
        try:
            posted = await self.ledger.refund(
                command.debit_transaction_id,
                actor=command.actor,
                ref=f"withdrawal:{command.saga_id}"[:MAX_TEXT],
                conn=conn,
            )
        except LedgerUnavailable:
            raise
        except LedgerError as exc:
            raise Unprocessable(f"the ledger refused the refund with {exc.code}") from exc
        await conn.fetchval(Q["return_withdrawal"], bucket, command_id(command.saga_id, "debit"))
        return WithdrawalRefunded(
            command_id=command.command_id, saga_id=command.saga_id, transaction_id=posted.id
        )


def _debited(command: DebitForWithdrawal, posting: Posting, transaction_id: str) -> WithdrawalDebited:
    """The debit's answer: the ledger's transaction, the amount and the fee the posting took."""
    return WithdrawalDebited(
        command_id=command.command_id,
        saga_id=command.saga_id,
        transaction_id=transaction_id,
        amount_minor=command.amount_minor,
        fee_minor=int(posting.metadata.get("fee", 0)),
        currency=command.currency,
    )


def _debit_bucket(wallet: str, debit_transaction_id: str) -> int:
    """The wallet's bucket, which must be the debit's home (a withdrawal posts in its wallet's
    bucket): the clearing sub-account the settlement takes from, the limit given back."""
    bucket = wallet_bucket(wallet)
    if bucket is None or not debit_transaction_id.startswith(f"{bucket:04d}:"):
        raise Unprocessable("the command's wallet is not the debit's")
    return bucket


def _object(value: Any) -> dict[str, Any]:
    """A jsonb column as a dict, whatever codec the connection has."""
    if isinstance(value, str | bytes):
        value = orjson.loads(value)
    if not isinstance(value, dict):
        raise Unprocessable("a stored response is not a JSON object")
    return value


def _ids(body: Mapping[str, Any]) -> dict[str, Any]:
    """What an outcome keeps of a response: ids and the reason, never amounts or people."""
    return {k: body[k] for k in ("transaction_id", "reason") if k in body}
