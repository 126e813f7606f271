"""The nostro (our account at the bank, a ledger account) against the bank's statement.

The bank's side: each day's statement as bank-adapter read it and wallet-consumer kept it
(``wallet.bank_statements`` and its lines, migrations/wallet/0021), every credit and debit
signed as the bank sees it. The ledger's side: the nostro's lines (hiwallet.ledger's
:func:`nostro_movements`), an asset, so of the opposite sign. Both are reduced to a reference
that names the same movement on either side:

- a credit whose bank reference is a wire (``wire_…``) is ``wire:<wire id>``; in the ledger, the
  bank's day that settled it (``settlement_topup``, ref ``payout:statement-…``), one reference
  per wire it settled (``wallet.settled_topups``), each with its own amount;
- a debit of a transfer bank-adapter made is ``withdrawal:<saga>`` (bank-adapter names the
  saga); in the ledger, the withdrawal's settlement (``settlement_withdrawal``, the same ref);
- a credit with the payer's reference (a card provider's payout) is ``payout:<payout id>``; in
  the ledger, that payout's settlement (ref ``payout:<payout id>``);
- a debit with the payee's reference (a provider collecting its invoice by direct debit) is
  ``invoice:<number>``; in the ledger, the invoice (ref ``invoice <provider> <number>``).

Findings (subjects carry the currency): a statement line no nostro line answers
(``bank_line_unmatched``, ``<cur>:<day>:<bank reference>``), a nostro line no statement shows
(``nostro_not_at_bank``, ``<cur>:<reference>``), both there with other amounts
(``bank_amount_differs``, ``<cur>:<reference>``): either side is given ``nostro_wait_days``
before it is missing the other (a day's wires are posted when its statement is read, a payout
when its provider reports it). And a day's opening balance that is not the closing balance of
the day before (``bank_opening_differs``, ``<cur>:<day>``; a day not recorded is no comparison),
and a day with no statement kept ``nostro_wait_days`` after it ended (``bank_statement_missing``,
``<cur>:<day>``): the bank writes one every day, movements or not, so a gap is bank-adapter's import
not running or the bank not answering, and every check above is blind to that day.

Only the last ``nostro_lookback_days`` of statements are read, and nostro lines only from the
first statement kept: before it, the ledger's history has no statement to meet. More than
``nostro_max_lines`` on either side: only the opening balances are checked that round.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import asyncpg
import structlog

from hiwallet.contracts.bank_references import WIRE_PREFIX
from hiwallet.ledger import NostroMovement, nostro_movements
from hiwallet.reconciliation.findings import (
    BANK_AMOUNT_DIFFERS,
    BANK_LINE_UNMATCHED,
    BANK_OPENING_DIFFERS,
    BANK_STATEMENT_MISSING,
    NOSTRO_KINDS,
    NOSTRO_NOT_AT_BANK,
    Q,
)
from hiwallet.reconciliation.settings import ReconciliationSettings

__all__ = ["NostroCheck", "check_nostro", "line_reference", "movement_reference"]

log = structlog.get_logger(__name__)

Found = tuple[str, str, dict[str, Any]]  # kind, subject, details
PAYOUT_REF = "payout:"  # wallet-consumer's ref of a settlement (settlements.py)
WITHDRAWAL_REF = "withdrawal:"  # wallet-consumer's ref of a withdrawal's settlement
INVOICE_REF = "invoice "  # wallet-api's ref of an invoice: "invoice <provider> <number>"


@dataclass
class NostroCheck:
    found: list[Found]
    complete: list[str]  # the kinds it looked at in full (their open findings not found: gone)


def line_reference(bank_reference: str, customer_reference: str | None, amount: int, saga: str | None) -> str:
    """What a statement line is in the ledger's terms (the table above)."""
    if bank_reference.startswith(WIRE_PREFIX) and amount > 0:
        return f"wire:{bank_reference}"
    if saga is not None and amount < 0:
        return f"withdrawal:{saga}"
    if customer_reference:
        return f"{'payout' if amount > 0 else 'invoice'}:{customer_reference}"
    return f"bank:{bank_reference}"  # nothing in the ledger is named so: unmatched


def movement_reference(m: NostroMovement) -> str:
    if m.type == "settlement_topup" and m.ref.startswith(PAYOUT_REF):
        return f"payout:{m.ref[len(PAYOUT_REF) :]}"
    if m.type == "settlement_withdrawal" and m.ref.startswith(WITHDRAWAL_REF):
        return f"withdrawal:{m.ref[len(WITHDRAWAL_REF) :]}"
    if m.type == "provider_invoice" and m.ref.startswith(INVOICE_REF):
        return f"invoice:{m.ref.split()[-1]}"
    return f"ledger:{m.transaction_id}"


def _start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


async def check_nostro(
    conn: asyncpg.Connection, settings: ReconciliationSettings, *, now: datetime, limit: int
) -> NostroCheck:
    wait = timedelta(days=settings.nostro_wait_days)
    first_reported = (now - timedelta(days=settings.nostro_lookback_days)).date()
    # Read a little before what is reported: a line of the first days may answer a movement
    # posted before them, and the first day's opening needs the day before's closing.
    first_read = first_reported - timedelta(days=settings.nostro_wait_days + 1)
    statements = await conn.fetch(Q["bank_statements_since"], first_read)
    if not statements:
        # Nothing looked at (no statement kept yet, or none for the whole lookback: bank-adapter's
        # import is down): the open findings stay open, none is "not found again".
        return NostroCheck([], [])
    max_lines = settings.nostro_max_lines
    rows = await conn.fetch(Q["bank_statement_lines_since"], first_read, max_lines)

    found: list[Found] = []
    closing = {(s["currency"], s["day"]): s["closing_minor"] for s in statements}
    for s in statements:
        before = closing.get((s["currency"], s["day"] - timedelta(days=1)))
        if s["day"] >= first_reported and before is not None and before != s["opening_minor"]:
            found.append(
                (
                    BANK_OPENING_DIFFERS,
                    f"{s['currency']}:{s['day'].isoformat()}",
                    {
                        "currency": s["currency"],
                        "day": s["day"].isoformat(),
                        "opening_minor": s["opening_minor"],
                        "previous_closing_minor": before,
                    },
                )
            )

    first_statement = min(s["day"] for s in statements)
    found.extend(_missing_days(statements, first=max(first_reported, first_statement), now=now, wait=wait))
    if len(rows) >= max_lines:
        return _lines_not_read(found, "statement lines", max_lines)
    read: dict[str, list[NostroMovement]] = {}
    for currency in sorted({s["currency"] for s in statements}):
        read[currency] = await nostro_movements(
            conn, currency, since=_start(first_statement), limit=max_lines
        )
        if len(read[currency]) >= max_lines:
            return _lines_not_read(found, "nostro lines", max_lines)
    for currency, movements in read.items():
        bank: dict[str, list[asyncpg.Record]] = defaultdict(list)
        for r in rows:
            if r["currency"] == currency:
                ref = line_reference(
                    r["bank_reference"], r["customer_reference"], r["amount_minor"], r["saga_id"]
                )
                bank[ref].append(r)
        ledger = await _ledger_side(conn, movements)
        gate = _start(max(first_reported, first_statement))
        for ref in sorted(bank.keys() - ledger.keys()):
            for r in bank[ref]:
                if r["day"] >= first_reported and _start(r["day"] + timedelta(days=1)) + wait <= now:
                    found.append(
                        (
                            BANK_LINE_UNMATCHED,
                            f"{currency}:{r['day'].isoformat()}:{r['bank_reference']}",
                            {
                                "currency": currency,
                                "day": r["day"].isoformat(),
                                "bank_reference": r["bank_reference"],
                                "customer_reference": r["customer_reference"],
                                "amount_minor": r["amount_minor"],
                                "reference": ref,
                            },
                        )
                    )
        for ref in sorted(ledger.keys() - bank.keys()):
            amount, m = ledger[ref]
            if m.posted_at >= gate and m.posted_at + wait <= now:
                found.append(
                    (
                        NOSTRO_NOT_AT_BANK,
                        f"{currency}:{ref}",
                        {
                            "currency": currency,
                            "reference": ref,
                            "transaction_id": m.transaction_id,
                            "type": m.type,
                            "amount_minor": amount,  # as the bank would show it
                            "posted_at": m.posted_at.isoformat(),
                        },
                    )
                )
        for ref in sorted(ledger.keys() & bank.keys()):
            amount, m = ledger[ref]
            at_bank = sum(r["amount_minor"] for r in bank[ref])
            if at_bank != amount:
                found.append(
                    (
                        BANK_AMOUNT_DIFFERS,
                        f"{currency}:{ref}",
                        {
                            "currency": currency,
                            "reference": ref,
                            "bank_amount_minor": at_bank,
                            "nostro_amount_minor": amount,
                            "bank_references": [r["bank_reference"] for r in bank[ref]],
                            "transaction_id": m.transaction_id,
                        },
                    )
                )
    by_kind: dict[str, list[Found]] = defaultdict(list)
    for f in found:
        by_kind[f[0]].append(f)
    kept = [f for kind in NOSTRO_KINDS for f in by_kind[kind][:limit]]
    complete = [kind for kind in NOSTRO_KINDS if len(by_kind[kind]) < limit]
    return NostroCheck(kept, complete)


def _missing_days(
    statements: list[asyncpg.Record], *, first: date, now: datetime, wait: timedelta
) -> list[Found]:
    """The days from ``first`` on, over ``wait`` ago, with no statement kept, per currency."""
    kept = {(s["currency"], s["day"]) for s in statements}
    missing: list[Found] = []
    for currency in sorted({s["currency"] for s in statements}):
        day = first
        while _start(day + timedelta(days=1)) + wait <= now:
            if (currency, day) not in kept:
                details = {"currency": currency, "day": day.isoformat()}
                missing.append((BANK_STATEMENT_MISSING, f"{currency}:{day.isoformat()}", details))
            day += timedelta(days=1)
    return missing


def _lines_not_read(opening: list[Found], what: str, max_lines: int) -> NostroCheck:
    """More lines than a round reads: only the balances' chain and the days kept are checked this round (the
    matching of a part would report the rest as missing), and the other kinds' open findings
    stay open."""
    log.error(
        "nostro check: too many lines to match; only the opening balances checked",
        what=what,
        max_lines=max_lines,
    )
    return NostroCheck(opening, [BANK_OPENING_DIFFERS, BANK_STATEMENT_MISSING])


async def _ledger_side(
    conn: asyncpg.Connection, movements: list[NostroMovement]
) -> dict[str, tuple[int, NostroMovement]]:
    """Each reference's amount as the bank would show it (the nostro's sign turned), and its
    (last) movement. A bank's day is its wires, each with its own amount."""
    payouts = [movement_reference(m)[len("payout:") :] for m in movements if m.type == "settlement_topup"]
    wires: dict[str, list[tuple[str, int]]] = defaultdict(list)
    if payouts:
        for r in await conn.fetch(Q["wires_of_payouts"], payouts):
            wires[r["payout_id"]].append((r["line_id"], r["gross_minor"]))
    side: dict[str, tuple[int, NostroMovement]] = {}
    for m in movements:
        ref = movement_reference(m)
        settled = wires.get(ref[len("payout:") :]) if ref.startswith("payout:") else None
        parts = [(f"wire:{wire}", gross) for wire, gross in settled] if settled else [(ref, -m.amount)]
        for key, amount in parts:
            before = side.get(key, (0, m))[0]
            side[key] = (before + amount, m)
    return side
