"""bank-adapter's StartBankTransfer handler (core.consumer.Handler), inside the consumer's
transaction ("every handler stores its response", CONTRACT-11):

1. the body read as contracts.withdrawals.StartBankTransfer (malformed: Unprocessable, dead-lettered
   after the attempts);
2. its transfer looked up under the command id: with an outcome, that outcome announced again
   (a new message id, the same body: a command published again by the stuck saga scan moves the
   saga on); pending, nothing (the callback or the reconciliation will bring the outcome);
3. else the bank asked (``POST /v1/transfers``, Idempotency-Key = the command id) and the
   transfer recorded: pending with the bank's reference, or failed when the bank refused it
   (announced). A callback that came before the record is applied then (bank.record_transfer).

The bank is called before the row is written, inside the transaction: a process killed in
between leaves no row and an unacked command, whose redelivery asks again with the same key and
gets the same reference. The bank away (BankUnavailable, after the client's own attempts) is
transient: the consumer pauses and tries the same command again, nothing dead-lettered.

The batch path (:meth:`TransferHandler.batch`, settings.consumer_batch) is the same per command,
in one transaction for the batch, with step 3's bank calls made all at once before any record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import structlog
from pydantic import ValidationError

from hiwallet.bank.client import Accepted, BankClient, BankUnavailable, Refused
from hiwallet.bank.metrics import AdapterMetrics
from hiwallet.bank.store import BankStore, NewTransfer, Recorded, Transfer
from hiwallet.contracts.withdrawals import StartBankTransfer
from hiwallet.core import tracing
from hiwallet.core.consumer import IncomingMessage, Unprocessable

log = structlog.get_logger(__name__)

CONSUMER_NAME = "bank-adapter"
COMMAND_TYPE = "StartBankTransfer"


def _fields(exc: ValidationError) -> str:
    """Which fields were wrong: their names only (the values may be an IBAN)."""
    return ", ".join(sorted({".".join(str(p) for p in e["loc"]) or "body" for e in exc.errors()}))


class TransferHandler:
    def __init__(self, store: BankStore, bank: BankClient, metrics: AdapterMetrics) -> None:
        self.store = store
        self.bank = bank
        self.metrics = metrics

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        command = _command(message)
        return await self._handle(conn, command, await self.store.transfer(conn, command.command_id))

    async def batch(
        self, conn: asyncpg.Connection, messages: Sequence[IncomingMessage]
    ) -> list[Mapping[str, Any]]:
        """Commands in one transaction (core.consumer.BatchHandler), each as one alone, in
        delivery order; the bank asked for every new transfer of the batch at once, before any
        is recorded (as the single path asks before it records: a process killed in between
        leaves no row, and the redelivered commands ask again under the same keys). A command
        twice in the batch (published again) is asked once; the second finds the first's
        record, as it would after the first's commit."""
        commands = [_command(m) for m in messages]
        # One statement for the batch's lookups (one probe each), not a round trip a command:
        # on a busy machine each round trip waits for PostgreSQL's turn on a core, and
        # bank-adapter's queue was the saga's backlog (bench/withdrawal_bench.py).
        known = await self.store.transfers(conn, [c.command_id for c in commands])
        new = [c for c in {c.command_id: c for c in commands}.values() if c.command_id not in known]
        # Every call ends (each bounded by the client's timeout and attempts) before a failure is
        # raised: none is left running behind a batch that rolls back. The first failure in the
        # batch's order is the batch's (BankUnavailable: transient, the consumer pauses).
        asked = await asyncio.gather(*(self._ask(c) for c in new), return_exceptions=True)
        answers: dict[str, Accepted | Refused] = {}
        for asked_of, got in zip(new, asked, strict=True):
            if isinstance(got, BaseException):
                if isinstance(got, BankUnavailable):
                    self.metrics.bank_unavailable.inc()
                raise got
            answers[asked_of.command_id] = got
        # The new transfers first, all in one statement (one round trip, not one a transfer),
        # each as _handle records one; then the others in the batch's order: a known transfer,
        # or a command's second copy, which finds the first's record as after its commit.
        first: dict[int, StartBankTransfer] = {}
        taken: set[str] = set()
        for i, command in enumerate(commands):
            if command.command_id in answers and command.command_id not in taken:
                first[i] = command
                taken.add(command.command_id)
        recorded = await self.store.record_transfers(
            conn, [_new_transfer(c, answers[c.command_id]) for c in first.values()]
        )
        done: dict[int, Mapping[str, Any]] = {}
        for (i, command), outcome in zip(first.items(), recorded, strict=True):
            with tracing.continuing(command.saga_id):  # its lines and spans in its saga's trace
                done[i] = self._recorded(command, answers[command.command_id], outcome)
        for i, command in enumerate(commands):
            if i in done:
                continue
            seen = known.get(command.command_id)
            if seen is None:  # the batch's second copy: the first recorded it
                seen = await self.store.transfer(conn, command.command_id)
            with tracing.continuing(command.saga_id):
                done[i] = await self._handle(conn, command, seen)
        return [done[i] for i in range(len(commands))]

    async def _ask(self, command: StartBankTransfer) -> Accepted | Refused:
        with tracing.continuing(command.saga_id):  # the bank's call in the saga's trace
            return await self.bank.start_transfer(command)

    async def _handle(
        self,
        conn: asyncpg.Connection,
        command: StartBankTransfer,
        known: Transfer | None,
        answer: Accepted | Refused | None = None,
    ) -> Mapping[str, Any]:
        """One command, its transfer row (``known``) read in this transaction; ``answer``: the
        bank's, asked already (a batch), else asked here."""
        if known is not None:
            if known.state == "pending":
                self.metrics.commands.labels("in_progress").inc()
                log.info("transfer in progress; nothing to do", command_id=command.command_id)
                return {"result": "in_progress", "bank_reference": known.bank_reference}
            await self.store.republish_outcome(conn, command.command_id)
            self.metrics.commands.labels("republished").inc()
            log.info("transfer outcome announced again", command_id=command.command_id, state=known.state)
            return {"result": "republished", "state": known.state}

        if answer is None:
            try:
                answer = await self.bank.start_transfer(command)
            except BankUnavailable:
                self.metrics.bank_unavailable.inc()
                raise
        item = _new_transfer(command, answer)
        recorded = await self.store.record_transfer(
            conn,
            command_id=item.command_id,
            saga_id=item.saga_id,
            amount_minor=item.amount_minor,
            currency=item.currency,
            destination_iban=item.destination_iban,
            bank_reference=item.bank_reference,
            refusal=item.refusal,
        )
        return self._recorded(command, answer, recorded)

    def _recorded(
        self, command: StartBankTransfer, answer: Accepted | Refused, recorded: Recorded
    ) -> Mapping[str, Any]:
        """A new transfer's result, counted and logged, once recorded."""
        if isinstance(answer, Accepted):
            result = recorded.value
            reference: str | None = answer.reference
        else:
            result = "refused" if recorded is Recorded.FAILED else recorded.value
            reference = None
        self.metrics.commands.labels(result).inc()
        log.info(
            "bank transfer recorded",
            command_id=command.command_id,
            saga_id=command.saga_id,
            result=result,
            bank_reference=reference,
        )
        return {"result": result, "bank_reference": reference}


def _new_transfer(command: StartBankTransfer, answer: Accepted | Refused) -> NewTransfer:
    """What to record of a command the bank answered: accepted with its reference, or refused."""
    if isinstance(answer, Accepted):
        bank_reference: str | None = answer.reference
        refusal = None
    else:
        bank_reference, refusal = None, f"refused by the bank: {answer.reason}"
    return NewTransfer(
        command_id=command.command_id,
        saga_id=command.saga_id,
        amount_minor=command.amount_minor,
        currency=command.currency,
        destination_iban=command.destination_iban,
        bank_reference=bank_reference,
        refusal=refusal,
    )


def _command(message: IncomingMessage) -> StartBankTransfer:
    if message.type and message.type != COMMAND_TYPE:
        raise Unprocessable(f"bank-adapter handles StartBankTransfer only, not {message.type[:100]!r}")
    try:
        return StartBankTransfer.model_validate(message.body)
    except ValidationError as exc:
        raise Unprocessable(f"malformed StartBankTransfer: {_fields(exc)}") from exc
