"""The statement importer: our account's daily statement, read as a bank's statement is read.

bank-adapter owns the bank's connection, so it reads the statements: each round asks the bank
for the MT940 statement (``GET /v1/statements/{day}``) of every complete day (UTC) of the last
``statement_lookback_days`` not recorded yet, parses it with the ``mt-940`` package, and records
the day with one ``SettlementReported`` (contracts/settlements.py, provider ``bank``, model gross:
the bank keeps no fee) through ``bank.record_statement``: the day's row and its outbox row in
one statement, or nothing when it was recorded before. Its lines are the day's credits whose
details name a wire (the bank's reference ``wire_…``): the customers' bank top-ups, now money in
our account, so wallet-consumer moves them from the bank's clearing to nostro. The other
movements of the day belong to other flows (a card provider's payout: its own settlement; a
transfer out: the withdrawal saga) and are not settlement lines; but the message carries the
whole statement too (``statement``: every credit and debit, signed, with the day's opening and
closing balance, each transfer out with the saga it belongs to, from ``bank.transfers``), which
wallet-consumer keeps for reconciliation's nostro check.

A day is read once it is over (today's statement still grows); a bank that does not answer,
or a statement that does not parse, is logged and the day tried again next round.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time
from decimal import Decimal
from typing import Any

import httpx
import mt940
import structlog

from hiwallet.bank.store import BankStore, Q
from hiwallet.contracts.bank_references import WIRE_PREFIX
from hiwallet.contracts.settlements import (
    MAX_LINES,
    BankStatement,
    BankStatementLine,
    SettlementLine,
    settlement_reported,
)
from hiwallet.core.ids import derived_id
from hiwallet.core.outbox import outbox_row

__all__ = ["StatementImporter", "StatementUnreadable", "statement_of", "wire_lines"]

log = structlog.get_logger(__name__)

PROVIDER = "bank"
EREF = "/EREF/"  # the customer's reference in :86: (bank-fake writes it so; docs/fakes.md)


class StatementUnreadable(Exception):
    """The bank did not answer with a statement, or one that does not parse."""


def wire_lines(text: str) -> tuple[str, list[SettlementLine]]:
    """The statement's currency and its credits that name a wire, as settlement lines."""
    try:
        parsed = mt940.models.Transactions()
        parsed.parse(text)
        balance = parsed.data.get("final_closing_balance")
        currency = str(balance.amount.currency) if balance is not None else ""
        lines = []
        for transaction in parsed:
            data: dict[str, Any] = transaction.data
            details = str(data.get("transaction_details") or "").split()
            amount: Decimal = data["amount"].amount
            if amount <= 0 or not details or not details[0].startswith(WIRE_PREFIX):
                continue
            wire_id = details[0]
            minor = _minor(amount)
            lines.append(
                SettlementLine(
                    line_id=wire_id,
                    type="wire",
                    provider_payment_id=wire_id,
                    # the top-up's id as topup-webhook derived it (topup_webhook.providers.Payment.id)
                    payment_id=derived_id("topup", PROVIDER, wire_id),
                    gross_minor=minor,
                    fee_minor=0,
                    net_minor=minor,
                )
            )
    except Exception as exc:  # the parser's errors are many and untyped: all mean "unreadable"
        raise StatementUnreadable(f"the statement does not parse: {type(exc).__name__}") from exc
    return currency, lines


def _minor(amount: Decimal) -> int:
    return int((amount * 100).to_integral_exact())


def statement_of(text: str, day: date) -> BankStatement:
    """The whole statement: every movement signed (+ credit, − debit), the opening and closing
    balance. Refused (:class:`StatementUnreadable`) when a balance is missing, the closing
    balance is of another day, or the movements do not lead from the opening to the closing
    balance: a statement that does not add up is not one to reconcile against."""
    try:
        parsed = mt940.models.Transactions()
        parsed.parse(text)
        opening = parsed.data["final_opening_balance"].amount
        closing_balance = parsed.data["final_closing_balance"]
        closing = closing_balance.amount
        if closing_balance.date != day:  # another day's statement is not this day's
            raise ValueError("the closing balance is of another day")
        lines = []
        for transaction in parsed:
            data: dict[str, Any] = transaction.data
            tokens = str(data.get("transaction_details") or "").split()
            eref = next((t[len(EREF) :] for t in tokens[1:] if t.startswith(EREF)), "")
            lines.append(
                BankStatementLine(
                    bank_reference=tokens[0],
                    customer_reference=eref or None,
                    amount_minor=_minor(data["amount"].amount),  # mt-940 signs a debit −
                    booked_on=data["date"],
                )
            )
        statement = BankStatement(
            day=day,
            currency=str(closing.currency),
            opening_minor=_minor(opening.amount),
            closing_minor=_minor(closing.amount),
            lines=lines,
        )
    except Exception as exc:  # the parser's and the model's errors: all mean "unreadable"
        raise StatementUnreadable(f"the statement does not parse: {type(exc).__name__}") from exc
    if statement.opening_minor + sum(line.amount_minor for line in lines) != statement.closing_minor:
        raise StatementUnreadable("the movements do not lead from the opening to the closing balance")
    return statement


class StatementImporter:
    def __init__(
        self,
        store: BankStore,
        client: httpx.AsyncClient,
        *,
        lookback_days: int,
        exchange: str,
        clock: Any = time.time,
    ) -> None:
        self.store = store
        self.client = client
        self.lookback_days = lookback_days
        self.exchange = exchange
        self._clock = clock

    def days(self) -> list[date]:
        """The complete days to read, oldest first (yesterday the newest)."""
        today = datetime.fromtimestamp(self._clock(), tz=UTC).date()
        return [today - timedelta(days=n) for n in range(self.lookback_days, 0, -1)]

    async def run(self) -> int:
        """One round: how many days' statements it announced."""
        days = self.days()
        known = await self.store.recorded_statements(days)
        announced = 0
        for day in days:
            if day in known:
                continue
            try:
                if await self._announce(day):
                    announced += 1
            except StatementUnreadable as exc:
                log.warning("statement not read; next round tries again", day=day.isoformat(), error=str(exc))
        return announced

    async def _announce(self, day: date) -> bool:
        try:
            response = await self.client.get(f"/v1/statements/{day.isoformat()}")
        except httpx.HTTPError as exc:
            raise StatementUnreadable(f"the bank did not answer: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise StatementUnreadable(f"the bank answered {response.status_code}")
        currency, lines = wire_lines(response.text)
        if len(lines) > MAX_LINES or len(currency) != 3:
            raise StatementUnreadable(f"{len(lines)} wire lines, currency {currency!r}")
        statement = statement_of(response.text, day)
        if len(statement.lines) > MAX_LINES:
            raise StatementUnreadable(f"{len(statement.lines)} movements")
        # Each transfer out named with its saga (our record of the transfer, by the bank's
        # reference): what reconciliation matches it to in the ledger.
        sagas = {
            r["bank_reference"]: r["saga_id"]
            for r in await self.store.pool.fetch(
                Q["sagas_of_references"],
                [line.bank_reference for line in statement.lines if line.amount_minor < 0],
            )
        }
        statement = statement.model_copy(
            update={
                "lines": [
                    line.model_copy(update={"saga_id": sagas.get(line.bank_reference)})
                    for line in statement.lines
                ]
            }
        )
        amount = sum(line.gross_minor for line in lines)
        message = settlement_reported(
            provider=PROVIDER,
            payout_id=f"statement-{day:%Y%m%d}",
            currency=currency,
            model="gross",
            amount_minor=amount,
            paid_at=datetime.combine(day, day_time.max, tzinfo=UTC),
            lines=lines,
            exchange=self.exchange,
            statement=statement,
        )
        # The day and its announcement in one statement (autocommit): or nothing, recorded before.
        recorded = bool(
            await self.store.pool.fetchval(
                Q["record_statement"], day, currency, amount, len(lines), *outbox_row(message)
            )
        )
        if recorded:
            self.store.on_committed()  # wakes the relay
        if recorded:
            log.info("statement announced", day=day.isoformat(), wires=len(lines), amount_minor=amount)
        return recorded
