"""The handler of ``SettlementReported`` (contracts/settlements.py): a provider's payout posted
to the ledger, exactly once, in the consumer's transaction (core.consumer records the message
in processed_events in the same one).

Each line of the payout is checked against the ledger: a card payment's line must name a top-up
the ledger holds (the transaction under the payment's key, type topup), with the same gross
amount and currency, not settled by an earlier payout (``wallet.settled_topups``), and its own
arithmetic right (net = gross − fee, a fee of 0 in the gross model). What matches is posted in
one ledger transaction keyed by the payout (``settlement:<settlement id>``): clearing +gross,
nostro −net, and in the net model provider_expense −fee (a net payout whose fees are all 0 is
posted as gross: the same legs). What does not is a finding (``wallet.reconciliation_findings``, kind below,
subject ``provider:payout:line``), not a posting: the payout's money that reached the bank for
it stays to be explained (the reconciliation against the bank's statement shows it).

The bank's day carries its whole statement (``statement``): kept in the same transaction
(``wallet.bank_statements`` and its lines, once per day) for reconciliation's nostro check.

Exactly once per payout, whatever repeats: the same message again is a processed_events repeat;
the same payout announced under another message id (it cannot be: the id is derived from it)
would meet the ledger's key (a replay) and settled_topups' primary key (nothing new).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncpg
import structlog
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

from hiwallet.contracts.settlements import BankStatement, SettlementLine, SettlementReported
from hiwallet.core.consumer import IncomingMessage, Unprocessable
from hiwallet.core.queries import load_queries
from hiwallet.ledger import BUCKETS, InvalidRequest, Ledger, LedgerError, LedgerUnavailable, NotFound
from hiwallet.reconciliation import (
    MAX_SUBJECT,
    PAYOUT_ALREADY_SETTLED,
    PAYOUT_AMOUNT_DIFFERS,
    PAYOUT_INCONSISTENT_LINE,
    PAYOUT_TOTAL_DIFFERS,
    PAYOUT_UNMATCHED,
    PAYOUT_UNSUPPORTED_LINE,
    record_finding,
)

__all__ = [
    "FINDING_KINDS",
    "MESSAGE_TYPE",
    "SETTLED_LINE_TYPES",
    "SETTLEMENTS_CONSUMER_NAME",
    "SettlementHandler",
    "SettlementMetrics",
]

log = structlog.get_logger(__name__)
Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")

MESSAGE_TYPE = "SettlementReported"
SETTLEMENTS_CONSUMER_NAME = "wallet-consumer-settlements"

# The findings a payout can leave: reconciliation's kinds (hiwallet.reconciliation: one table of
# findings for the books, listed and resolved by staff in one place).
UNMATCHED = PAYOUT_UNMATCHED
AMOUNT_DIFFERS = PAYOUT_AMOUNT_DIFFERS
ALREADY_SETTLED = PAYOUT_ALREADY_SETTLED
UNSUPPORTED = PAYOUT_UNSUPPORTED_LINE
INCONSISTENT = PAYOUT_INCONSISTENT_LINE
TOTAL_DIFFERS = PAYOUT_TOTAL_DIFFERS
# The lines that settle a top-up: a card payment (Stripe's charge), a wire (the bank's statement).
SETTLED_LINE_TYPES = frozenset({"charge", "wire"})
FINDING_KINDS = (UNMATCHED, AMOUNT_DIFFERS, ALREADY_SETTLED, UNSUPPORTED, INCONSISTENT, TOTAL_DIFFERS)


class SettlementMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.payouts = Counter(
            "hiwallet_settlements_handled",
            "SettlementReported messages handled, by result (settled, nothing-settled)",
            ["result"],
            registry=self.registry,
        )
        self.findings = Counter(
            "hiwallet_settlement_findings",
            "Payout lines (or payouts) recorded as findings instead of postings, by kind",
            ["kind"],
            registry=self.registry,
        )


# (kind, subject, details): details as a JSON object (the connection's jsonb codec encodes it:
# ledger.init_connection)
Finding = tuple[str, str, dict[str, Any]]


def _finding(kind: str, body: SettlementReported, subject: str, **details: Any) -> Finding:
    return (
        kind,
        f"{body.provider}:{body.payout_id}:{subject}"[:MAX_SUBJECT],
        {"provider": body.provider, "payout_id": body.payout_id, **details},
    )


class SettlementHandler:
    """``core.consumer.Handler`` of ``SettlementReported``."""

    def __init__(self, ledger: Ledger, metrics: SettlementMetrics) -> None:
        self.ledger = ledger
        self.metrics = metrics

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        try:
            body = SettlementReported.model_validate(message.body)
        except ValidationError as exc:
            raise Unprocessable(f"not a SettlementReported: {exc.errors()[0]['msg']}") from exc
        actor = f"settlement-importer:{body.provider}"
        if body.statement is not None:
            await self._keep_statement(conn, body.statement)
        findings: list[Finding] = []
        candidates: list[SettlementLine] = []
        for line in body.lines:
            if line.type not in SETTLED_LINE_TYPES:
                findings.append(_finding(UNSUPPORTED, body, line.line_id, line=line.model_dump()))
            elif line.net_minor != line.gross_minor - line.fee_minor or not (
                0 <= line.fee_minor < line.gross_minor
            ):
                findings.append(_finding(INCONSISTENT, body, line.line_id, line=line.model_dump()))
            elif body.model == "gross" and line.fee_minor:
                findings.append(
                    _finding(
                        INCONSISTENT, body, line.line_id, line=line.model_dump(), why="fee in the gross model"
                    )
                )
            elif line.payment_id is None:
                findings.append(_finding(UNMATCHED, body, line.line_id, line=line.model_dump()))
            else:
                candidates.append(line)
        if sum(line.net_minor for line in body.lines) != body.amount_minor:
            findings.append(
                _finding(
                    TOTAL_DIFFERS,
                    body,
                    "total",
                    amount_minor=body.amount_minor,
                    lines_net_minor=sum(line.net_minor for line in body.lines),
                )
            )
        matched = await self._matching(conn, body, candidates, findings)
        settled: list[SettlementLine] = []
        if matched:
            rows = await conn.fetch(
                Q["settle_topups"],
                [line.payment_id for line in matched],
                [body.provider] * len(matched),
                [body.payout_id] * len(matched),
                [line.line_id for line in matched],
                [line.gross_minor for line in matched],
                [line.fee_minor for line in matched],
            )
            fresh = {r["payment_id"] for r in rows}
            for line in matched:
                if line.payment_id in fresh:
                    settled.append(line)
                else:
                    findings.append(_finding(ALREADY_SETTLED, body, line.line_id, line=line.model_dump()))
        if findings:
            # In the settlement's transaction: its postings and its findings commit together (a
            # redelivered message finds the same open findings and refreshes their details).
            for kind, subject, details in findings:
                await record_finding(conn, kind, subject, details)
            for kind, subject, _ in findings:
                self.metrics.findings.labels(kind).inc()
                log.warning("settlement finding", kind=kind, subject=subject)
        gross = sum(line.gross_minor for line in settled)
        fee = sum(line.fee_minor for line in settled)
        if not settled:
            self.metrics.payouts.labels("nothing-settled").inc()
            return {"result": "nothing-settled", "findings": len(findings)}
        try:
            result = await self.ledger.settle_topups(
                f"settlement:{body.settlement_id}",
                body.provider,
                body.currency,
                gross=gross,
                fee=fee if body.model == "net" and fee else 0,
                model="net" if body.model == "net" and fee else "gross",
                actor=actor,
                ref=f"payout:{body.payout_id}"[:200],
                conn=conn,
            )
        except LedgerUnavailable:
            raise  # transient: the consumer pauses and tries again
        except InvalidRequest as exc:
            raise Unprocessable(f"the ledger refused the settlement: {exc}") from exc
        except LedgerError as exc:  # e.g. no clearing account of that provider and currency
            raise Unprocessable(f"the ledger refused the settlement: {type(exc).__name__}") from exc
        self.metrics.payouts.labels("settled").inc()
        log.info(
            "payout settled",
            provider=body.provider,
            payout=body.payout_id,
            transaction=result.id,
            gross=gross,
            fee=fee,
            lines=len(settled),
            findings=len(findings),
        )
        return {
            "result": "settled",
            "transaction": result.id,
            "gross_minor": gross,
            "fee_minor": fee,
            "lines": len(settled),
            "findings": len(findings),
        }

    @staticmethod
    async def _keep_statement(conn: asyncpg.Connection, statement: BankStatement) -> None:
        """The day's statement and its lines, once (a day recorded before: nothing)."""
        day = await conn.fetchval(
            Q["record_bank_statement"],
            statement.day,
            statement.currency,
            statement.opening_minor,
            statement.closing_minor,
            len(statement.lines),
        )
        if day is None or not statement.lines:
            return
        lines = statement.lines
        await conn.execute(
            Q["record_bank_statement_lines"],
            statement.day,
            statement.currency,
            list(range(1, len(lines) + 1)),
            [line.bank_reference for line in lines],
            [line.customer_reference for line in lines],
            [line.amount_minor for line in lines],
            [line.booked_on for line in lines],
            [line.saga_id for line in lines],
        )

    async def _matching(
        self,
        conn: asyncpg.Connection,
        body: SettlementReported,
        lines: list[SettlementLine],
        findings: list[Finding],
    ) -> list[SettlementLine]:
        """The lines whose top-up the ledger holds with their gross and currency; the others
        appended to ``findings``."""
        if not lines:
            return []
        rows = await conn.fetch(Q["topups_under_keys"], [line.payment_id for line in lines], BUCKETS)
        credited = {r["payment_id"]: r["id"] for r in rows}
        matched = []
        for line in lines:
            transaction_id = credited.get(line.payment_id)
            if transaction_id is None:
                findings.append(_finding(UNMATCHED, body, line.line_id, line=line.model_dump()))
                continue
            try:
                view = await self.ledger.transaction(transaction_id)
            except NotFound:
                findings.append(_finding(UNMATCHED, body, line.line_id, line=line.model_dump()))
                continue
            clearing = [leg for leg in view.legs if ":sys:clearing:" in leg.account]
            amount = -sum(leg.amount for leg in clearing)
            currency = clearing[0].currency if clearing else None
            if amount != line.gross_minor or currency != body.currency:
                findings.append(
                    _finding(
                        AMOUNT_DIFFERS,
                        body,
                        line.line_id,
                        line=line.model_dump(),
                        topup=transaction_id,
                        topup_amount_minor=amount,
                        topup_currency=currency,
                    )
                )
                continue
            matched.append(line)
        return matched
