"""The nostro against the bank's statement (reconciliation/nostro.py), on a real ledger: the
nostro's movements posted as wallet-consumer and wallet-api post them (a day's wires, a card
payout, a withdrawal's settlement, an invoice), the bank's statements kept as wallet-consumer
keeps them (its settlement handler's own code, as its role). A clean month reports nothing; each
planted discrepancy is found, under its own kind, and nothing else."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import asyncpg
import pytest

from hiwallet.contracts.settlements import BankStatement, BankStatementLine
from hiwallet.core.ids import new_id
from hiwallet.ledger import Ledger
from hiwallet.reconciliation import (
    BANK_AMOUNT_DIFFERS,
    BANK_LINE_UNMATCHED,
    BANK_OPENING_DIFFERS,
    BANK_STATEMENT_MISSING,
    NOSTRO_NOT_AT_BANK,
    ROUND_ACTOR,
    Reconciler,
    ReconciliationMetrics,
    list_findings,
    record_finding,
)
from hiwallet.wallet_consumer.settlements import SettlementHandler
from tests.reconciliation.conftest import TL, recon_settings

YESTERDAY = datetime.now(UTC).date() - timedelta(days=1)
BEFORE = YESTERDAY - timedelta(days=1)
STATEMENT_PAYOUT = f"statement-{YESTERDAY:%Y%m%d}"


@pytest.fixture(autouse=True)
def _days_of_this_test() -> None:
    """The days as of each test, not of the module's import: a run that crosses midnight UTC
    between the two would keep statements of a day before yesterday, and the round (real
    clock) would find yesterday's statement missing."""
    global YESTERDAY, BEFORE, STATEMENT_PAYOUT
    YESTERDAY = datetime.now(UTC).date() - timedelta(days=1)
    BEFORE = YESTERDAY - timedelta(days=1)
    STATEMENT_PAYOUT = f"statement-{YESTERDAY:%Y%m%d}"


def _line(
    ref: str, amount: int, *, customer: str | None = None, saga: str | None = None
) -> BankStatementLine:
    return BankStatementLine(
        bank_reference=ref,
        customer_reference=customer,
        amount_minor=amount,
        booked_on=YESTERDAY,
        saga_id=saga,
    )


def _statement(day: date, opening: int, lines: list[BankStatementLine]) -> BankStatement:
    return BankStatement(
        day=day,
        currency="TRY",
        opening_minor=opening,
        closing_minor=opening + sum(line.amount_minor for line in lines),
        lines=lines,
    )


async def _keep(pool: asyncpg.Pool, *statements: BankStatement) -> None:
    async with pool.acquire() as conn, conn.transaction():
        for statement in statements:
            await SettlementHandler._keep_statement(conn, statement)


async def _month(ledger: Ledger, pool: asyncpg.Pool) -> dict[str, str]:
    """Money through the nostro, each movement as its writer posts it: a wire of 50 settled by
    yesterday's statement, a card payout of 100, a withdrawal of 30, an invoice of 5."""
    wallet = (await ledger.open_wallet(f"owner-{uuid.uuid4().hex[:8]}")).wallet_id
    wire = f"wire_{uuid.uuid4().hex[:12]}"
    payout = f"po_{uuid.uuid4().hex[:16]}"
    saga = new_id()
    await ledger.topup(new_id(), wallet, 100 * TL, provider="stripe", actor="test", ref="card")
    await ledger.topup(new_id(), wallet, 50 * TL, provider="bank", actor="test", ref=wire)
    # the bank's day: its wire settled (wallet-consumer's ref, and its settled_topups row)
    await ledger.settle_topups(
        new_id(), "bank", gross=50 * TL, actor="test", ref=f"payout:{STATEMENT_PAYOUT}"
    )
    await pool.execute(
        "INSERT INTO wallet.settled_topups (payment_id, provider, payout_id, line_id, gross_minor, fee_minor)"
        " VALUES ($1, 'bank', $2, $3, $4, 0)",
        new_id(),
        STATEMENT_PAYOUT,
        wire,
        50 * TL,
    )
    await ledger.settle_topups(new_id(), "stripe", gross=100 * TL, actor="test", ref=f"payout:{payout}")
    await ledger.settle_withdrawals(new_id(), "bank", owed=30 * TL, actor="test", ref=f"withdrawal:{saga}")
    await ledger.provider_invoice(
        new_id(), "stripe", amount=5 * TL, actor="test", ref="invoice stripe INV-2026-7", period=None
    )
    return {"wire": wire, "payout": payout, "saga": saga}


def _bank_lines(m: dict[str, str]) -> list[BankStatementLine]:
    """What the bank shows of the same month (all booked yesterday)."""
    return [
        _line(m["wire"], 50 * TL),
        _line("crd_0001", 100 * TL, customer=m["payout"]),
        _line("trf_0001", -30 * TL, customer="cmd:bank", saga=m["saga"]),
        _line("dbt_0001", -5 * TL, customer="INV-2026-7"),
    ]


@pytest.fixture
def nostro_reconciler(pool: asyncpg.Pool, metrics: ReconciliationMetrics) -> Reconciler:
    # waits 0: whatever is missing is missing now (the default gives either side three days)
    return Reconciler(pool, recon_settings(nostro_wait_days=0), metrics)


async def _found(pool: asyncpg.Pool) -> list[tuple[str, str]]:
    page = await list_findings(pool, status="open", limit=200)
    return sorted((f.kind, f.subject) for f in page.findings)


async def test_a_clean_month_reports_nothing(
    ledger: Ledger, pool: asyncpg.Pool, nostro_reconciler: Reconciler
) -> None:
    month = await _month(ledger, pool)
    await _keep(pool, _statement(BEFORE, 0, []), _statement(YESTERDAY, 0, _bank_lines(month)))
    assert await nostro_reconciler.round() == 0
    assert await _found(pool) == []
    assert nostro_reconciler.metrics is not None
    assert (
        nostro_reconciler.metrics.registry.get_sample_value(
            "hiwallet_reconciliation_open_findings", {"kind": BANK_LINE_UNMATCHED}
        )
        == 0
    )


async def test_a_statement_line_the_ledger_lacks(
    ledger: Ledger, pool: asyncpg.Pool, nostro_reconciler: Reconciler
) -> None:
    month = await _month(ledger, pool)
    lines = [*_bank_lines(month), _line("crd_ghost", 7 * TL, customer="po_nobody")]
    await _keep(pool, _statement(BEFORE, 0, []), _statement(YESTERDAY, 0, lines))
    assert await nostro_reconciler.round() == 1
    assert await _found(pool) == [(BANK_LINE_UNMATCHED, f"TRY:{YESTERDAY.isoformat()}:crd_ghost")]
    (finding,) = (await list_findings(pool)).findings
    assert finding.details["amount_minor"] == 7 * TL
    assert finding.details["reference"] == "payout:po_nobody"
    assert nostro_reconciler.metrics is not None  # the open-findings gauge by its kind
    gauge = nostro_reconciler.metrics.registry.get_sample_value
    assert gauge("hiwallet_reconciliation_open_findings", {"kind": BANK_LINE_UNMATCHED}) == 1


async def test_a_nostro_movement_the_bank_never_shows(
    ledger: Ledger, pool: asyncpg.Pool, metrics: ReconciliationMetrics
) -> None:
    month = await _month(ledger, pool)
    lines = [line for line in _bank_lines(month) if line.saga_id is None]  # the transfer is not there
    await _keep(pool, _statement(BEFORE, 0, []), _statement(YESTERDAY, 0, lines))
    # within the wait (the default: three days) it is not missing yet
    assert await Reconciler(pool, recon_settings(), metrics).round() == 0
    later = Reconciler(
        pool, recon_settings(), metrics, clock=lambda: datetime.now(UTC) + timedelta(days=3, minutes=1)
    )
    assert await later.round() == 1
    assert await _found(pool) == [(NOSTRO_NOT_AT_BANK, f"TRY:withdrawal:{month['saga']}")]
    (finding,) = (await list_findings(pool)).findings
    assert (finding.details["type"], finding.details["amount_minor"]) == ("settlement_withdrawal", -30 * TL)


async def test_an_amount_that_differs(
    ledger: Ledger, pool: asyncpg.Pool, nostro_reconciler: Reconciler
) -> None:
    month = await _month(ledger, pool)
    lines = [
        line.model_copy(update={"amount_minor": 99 * TL}) if line.bank_reference == "crd_0001" else line
        for line in _bank_lines(month)
    ]
    await _keep(pool, _statement(BEFORE, 0, []), _statement(YESTERDAY, 0, lines))
    assert await nostro_reconciler.round() == 1
    assert await _found(pool) == [(BANK_AMOUNT_DIFFERS, f"TRY:payout:{month['payout']}")]
    (finding,) = (await list_findings(pool)).findings
    assert (finding.details["bank_amount_minor"], finding.details["nostro_amount_minor"]) == (
        99 * TL,
        100 * TL,
    )


async def test_a_wire_whose_amount_differs(
    ledger: Ledger, pool: asyncpg.Pool, nostro_reconciler: Reconciler
) -> None:
    month = await _month(ledger, pool)
    lines = [
        line.model_copy(update={"amount_minor": 51 * TL}) if line.bank_reference == month["wire"] else line
        for line in _bank_lines(month)
    ]
    await _keep(pool, _statement(BEFORE, 0, []), _statement(YESTERDAY, 0, lines))
    assert await nostro_reconciler.round() == 1
    assert await _found(pool) == [(BANK_AMOUNT_DIFFERS, f"TRY:wire:{month['wire']}")]


async def test_a_broken_opening_balance_and_its_resolution(
    ledger: Ledger, pool: asyncpg.Pool, owner: asyncpg.Connection, nostro_reconciler: Reconciler
) -> None:
    month = await _month(ledger, pool)
    await _keep(pool, _statement(BEFORE, 0, [_line("crd_early", 2 * TL, customer="po_early")]))
    await _keep(pool, _statement(YESTERDAY, 0, _bank_lines(month)))  # should open at 2 TL
    # the day before's credit matches nothing either: two findings, each its own kind
    assert await nostro_reconciler.round() == 2
    assert await _found(pool) == [
        (BANK_LINE_UNMATCHED, f"TRY:{BEFORE.isoformat()}:crd_early"),
        (BANK_OPENING_DIFFERS, f"TRY:{YESTERDAY.isoformat()}"),
    ]
    (opening,) = (await list_findings(pool, kind=BANK_OPENING_DIFFERS)).findings
    assert (opening.details["opening_minor"], opening.details["previous_closing_minor"]) == (0, 2 * TL)
    # the payout posted after all: that finding is gone, closed by the round
    await ledger.settle_topups(new_id(), "stripe", gross=2 * TL, actor="test", ref="payout:po_early")
    # (a top-up for it, so that the card provider owes nothing more than it paid)
    wallet = (await ledger.open_wallet("early")).wallet_id
    await ledger.topup(new_id(), wallet, 2 * TL, provider="stripe", actor="test", ref="card")
    assert await nostro_reconciler.round() == 1
    assert await _found(pool) == [(BANK_OPENING_DIFFERS, f"TRY:{YESTERDAY.isoformat()}")]
    closed = (await list_findings(pool, status="resolved")).findings
    assert [(f.kind, f.resolved_by) for f in closed] == [(BANK_LINE_UNMATCHED, ROUND_ACTOR)]


async def test_a_day_without_its_statement(
    ledger: Ledger, pool: asyncpg.Pool, metrics: ReconciliationMetrics, nostro_reconciler: Reconciler
) -> None:
    """The bank writes a statement every day: a day between two kept ones, with none kept after
    the wait, is the import not running, found; within the wait it is not missing yet."""
    month = await _month(ledger, pool)
    earlier = BEFORE - timedelta(days=1)
    await _keep(pool, _statement(earlier, 0, []), _statement(YESTERDAY, 0, _bank_lines(month)))
    patient = Reconciler(pool, recon_settings(nostro_wait_days=3), metrics)
    assert await patient.round() == 0
    assert await nostro_reconciler.round() == 1
    assert await _found(pool) == [(BANK_STATEMENT_MISSING, f"TRY:{BEFORE.isoformat()}")]
    # the day's statement read at last: the finding closes itself
    await _keep(pool, _statement(BEFORE, 0, []))
    assert await nostro_reconciler.round() == 0
    assert await _found(pool) == []


async def test_no_statement_kept_checks_nothing(
    ledger: Ledger, pool: asyncpg.Pool, nostro_reconciler: Reconciler
) -> None:
    """Before the first statement the ledger's history has none to meet: not a finding. And
    with no statement to look at, an open finding is not "not found again": it stays open."""
    await _month(ledger, pool)
    await record_finding(pool, BANK_LINE_UNMATCHED, "TRY:2026-01-02:crd_old", {})
    assert await nostro_reconciler.round() == 0
    assert await _found(pool) == [(BANK_LINE_UNMATCHED, "TRY:2026-01-02:crd_old")]


async def test_a_statement_is_kept_once(pool: asyncpg.Pool) -> None:
    statement = _statement(YESTERDAY, 0, [_line("wire_x", TL)])
    await _keep(pool, statement)
    await _keep(pool, statement.model_copy(update={"lines": []}))  # the same day again: nothing
    assert await pool.fetchval("SELECT count(*) FROM wallet.bank_statement_lines") == 1
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await pool.execute("DELETE FROM wallet.bank_statement_lines")


async def test_more_lines_than_a_round_reads_checks_only_the_balances(
    ledger: Ledger, pool: asyncpg.Pool, metrics: ReconciliationMetrics
) -> None:
    """Matching a part would report the rest as missing: past nostro_max_lines only the
    opening balances' chain is checked, and nothing is reported missing on either side."""
    await _month(ledger, pool)
    many = [_line(f"crd_{n:04d}", TL, customer=f"po_{n}") for n in range(10)]
    await _keep(pool, _statement(BEFORE, 0, []), _statement(YESTERDAY, 5 * TL, many))
    small = Reconciler(pool, recon_settings(nostro_wait_days=0, nostro_max_lines=10), metrics)
    assert await small.round() == 1
    assert await _found(pool) == [(BANK_OPENING_DIFFERS, f"TRY:{YESTERDAY.isoformat()}")]
    # read whole: the opening, every line unmatched, the month's four movements not at the bank
    whole = Reconciler(pool, recon_settings(nostro_wait_days=0), metrics)
    assert await whole.round() == 1 + 10 + 4
