"""Reconciliation's round against a real ledger: each planted discrepancy is found, once, and
nothing on a clean ledger; verify as a job; the round under two instances runs once."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from hiwallet.core import db
from hiwallet.core.ids import new_id
from hiwallet.ledger import Ledger, cash_account
from hiwallet.reconciliation import (
    BALANCE_MISMATCH,
    INVOICE_LATE,
    PAYOUT_UNMATCHED,
    RECONCILE_LOCK_KEY,
    ROUND_ACTOR,
    TOPUP_UNSETTLED,
    FindingAlreadyResolved,
    FindingNotFound,
    Reconciler,
    ReconciliationBusy,
    ReconciliationMetrics,
    list_findings,
    reconciliation_job,
    record_finding,
    resolve_finding,
    run_now,
    verify_job,
)
from tests.reconciliation.conftest import TL, recon_settings
from tests.topups import wallet_pool


def _connect(database: str, service: str | None = "wallet_consumer"):  # type: ignore[no-untyped-def]
    async def connect() -> asyncpg.Connection:
        return await asyncpg.connect(db.service_dsn(database, db.app_role("wallet", service)))

    return connect


async def _wallet(ledger: Ledger, amount: int, *, provider: str = "stripe") -> str:
    wallet = (await ledger.open_wallet(f"owner-{uuid.uuid4().hex[:8]}")).wallet_id
    if amount:
        await ledger.topup(new_id(), wallet, amount, provider=provider, actor="test", ref="fund")
    return wallet


def _open_gauge(reconciler: Reconciler, kind: str) -> float | None:
    assert reconciler.metrics is not None
    return reconciler.metrics.registry.get_sample_value(
        "hiwallet_reconciliation_open_findings", {"kind": kind}
    )


async def _open(pool: asyncpg.Pool, kind: str | None = None) -> list[tuple[str, str]]:
    page = await list_findings(pool, status="open", kind=kind, limit=200)
    return sorted((f.kind, f.subject) for f in page.findings)


async def _settle_everything(ledger: Ledger, pool: asyncpg.Pool, provider: str = "stripe") -> None:
    """Pay out every top-up of ``provider`` (TRY): what the provider owes, as one payout."""
    total = await pool.fetchval(
        "SELECT coalesce(-sum(amount), 0) FROM ledger_api.accounts a"
        " JOIN ledger.lines l ON l.bucket = a.bucket AND l.account_id = a.id"
        " WHERE l.type = 'topup' AND a.id LIKE '%:sys:clearing:' || $1 || ':TRY'",
        provider,
    )
    await ledger.settle_topups(new_id(), provider, gross=int(total), actor="test", ref="payout")


async def test_a_clean_ledger_reports_nothing(
    ledger: Ledger, pool: asyncpg.Pool, reconciler: Reconciler
) -> None:
    a = await _wallet(ledger, 100 * TL)
    b = await _wallet(ledger, 0)
    await ledger.transfer(new_id(), a, b, 10 * TL, actor="test", ref="p2p")
    await _settle_everything(ledger, pool)
    assert await reconciler.round() == 0
    assert await _open(pool) == []
    assert reconciler.metrics is not None
    assert _open_gauge(reconciler, BALANCE_MISMATCH) == 0


async def test_a_tampered_balance_is_found_once_and_resolved_when_put_right(
    ledger: Ledger, pool: asyncpg.Pool, owner: asyncpg.Connection, reconciler: Reconciler
) -> None:
    a = await _wallet(ledger, 100 * TL)
    await _settle_everything(ledger, pool)
    account = cash_account(a)
    await owner.execute("UPDATE ledger.accounts SET balance = balance + 1 WHERE id = $1", account)

    assert await reconciler.round() == 1
    assert await _open(pool) == [(BALANCE_MISMATCH, account)]
    page = await list_findings(pool, status="open")
    assert page.findings[0].details == {
        "role": "user_wallet",
        "currency": "TRY",
        "balance": 100 * TL + 1,
        "lines_total": 100 * TL,
    }
    first = page.findings[0]
    # found again: the same open finding (seen again, not a second one)
    assert await reconciler.round() == 1
    again = (await list_findings(pool, status="open")).findings
    assert [f.id for f in again] == [first.id]
    assert again[0].found_at == first.found_at and again[0].last_seen_at > first.last_seen_at
    assert reconciler.last is not None and reconciler.last.new == 0
    assert reconciler.metrics is not None
    assert _open_gauge(reconciler, BALANCE_MISMATCH) == 1

    # put right: the round closes it itself, and says so
    await owner.execute("UPDATE ledger.accounts SET balance = balance - 1 WHERE id = $1", account)
    assert await reconciler.round() == 0
    assert await _open(pool) == []
    closed = (await list_findings(pool, status="resolved")).findings
    assert [(f.id, f.resolved_by) for f in closed] == [(first.id, ROUND_ACTOR)]


async def test_a_top_up_not_paid_out_after_its_window_is_found(
    ledger: Ledger, pool: asyncpg.Pool, metrics: ReconciliationMetrics
) -> None:
    old = await _wallet(ledger, 30 * TL)  # the first top-up: paid out below
    await ledger.settle_topups(new_id(), "stripe", gross=30 * TL, actor="test", ref="payout 1")
    await _wallet(ledger, 50 * TL)  # not paid out: a finding once its window has passed
    wire = await _wallet(ledger, 20 * TL, provider="bank")
    late = Reconciler(pool, recon_settings(settlement_windows_s={"bank": 10 * 24 * 3600.0}), metrics)
    assert await late.round() == 1  # stripe's window is 0 here; the bank's ten days
    [(kind, subject)] = await _open(pool)
    assert kind == TOPUP_UNSETTLED
    (finding,) = (await list_findings(pool)).findings
    assert finding.details["provider"] == "stripe"
    assert finding.details["unsettled_minor"] == finding.details["amount_minor"] == 50 * TL
    assert subject != old and wire  # the paid one and the bank's are not findings
    # a payout of part of it: still unsettled, by what is left
    await ledger.settle_topups(new_id(), "stripe", gross=20 * TL, actor="test", ref="payout 2")
    assert await late.round() == 1
    (finding,) = (await list_findings(pool)).findings
    assert finding.details["unsettled_minor"] == 30 * TL
    # paid out in full: gone, closed by the round
    await ledger.settle_topups(new_id(), "stripe", gross=30 * TL, actor="test", ref="payout 3")
    assert await late.round() == 0
    assert await _open(pool) == []


async def test_a_refunded_top_up_is_owed_to_nobody(
    ledger: Ledger, pool: asyncpg.Pool, reconciler: Reconciler
) -> None:
    wallet = (await ledger.open_wallet("refunded")).wallet_id
    topup = await ledger.topup(new_id(), wallet, 15 * TL, provider="stripe", actor="test", ref="card")
    assert await reconciler.round() == 1  # window 0: unsettled at once
    await ledger.refund(topup.id, actor="test")  # the card payment given back
    assert await reconciler.round() == 0
    assert await _open(pool) == []


async def test_findings_are_resolved_once_by_someone_with_a_note(pool: asyncpg.Pool, wallet_db: str) -> None:
    recorded = await record_finding(pool, PAYOUT_UNMATCHED, "po_123", {"amount_minor": 5})
    assert recorded.created
    assert (await record_finding(pool, PAYOUT_UNMATCHED, "po_123", {"amount_minor": 6})) == type(recorded)(
        recorded.id, False
    )
    async with wallet_pool(wallet_db, max_size=1) as api:  # wallet-api's role resolves
        done = await resolve_finding(api, recorded.id, by="staff:alice", note="  bank fee, booked by hand ")
        assert (done.status, done.resolved_by, done.resolution_note) == (
            "resolved",
            "staff:alice",
            "bank fee, booked by hand",
        )
        assert done.details == {"amount_minor": 6}
        with pytest.raises(FindingAlreadyResolved):
            await resolve_finding(api, recorded.id, by="staff:bob", note="again")
        with pytest.raises(FindingNotFound):
            await resolve_finding(api, new_id(), by="staff:bob", note="none")
    # found again after its resolution: a new finding, the old one's history kept
    again = await record_finding(pool, PAYOUT_UNMATCHED, "po_123", {"amount_minor": 6})
    assert again.created and again.id != recorded.id


async def test_the_database_refuses_a_second_open_finding_and_a_rewritten_resolution(
    pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    recorded = await record_finding(pool, PAYOUT_UNMATCHED, "po_9", {})
    with pytest.raises(asyncpg.UniqueViolationError) as twice:
        await owner.execute(
            "INSERT INTO wallet.reconciliation_findings (id, kind, subject, found_at, last_seen_at)"
            " VALUES ($1, 'payout_unmatched', 'po_9', now(), now())",
            new_id(),
        )
    assert twice.value.constraint_name == "reconciliation_findings_one_open"
    await resolve_finding(pool, recorded.id, by="staff:a", note="ok")
    with pytest.raises(asyncpg.PostgresError) as rewritten:
        await pool.execute(
            "UPDATE wallet.reconciliation_findings SET resolution_note = 'other' WHERE id = $1", recorded.id
        )
    assert rewritten.value.sqlstate == "HW030"
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await pool.execute("DELETE FROM wallet.reconciliation_findings")


async def test_paging_through_findings(pool: asyncpg.Pool) -> None:
    ids = [(await record_finding(pool, PAYOUT_UNMATCHED, f"po_{n}", {})).id for n in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        page = await list_findings(pool, status="open", cursor=cursor, limit=3)
        seen += [f.id for f in page.findings]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(ids) and len(seen) == 7


async def test_verify_as_a_job_counts_the_discrepancies(
    ledger: Ledger,
    pool: asyncpg.Pool,
    owner: asyncpg.Connection,
    wallet_db: str,
    metrics: ReconciliationMetrics,
) -> None:
    a = await _wallet(ledger, 10 * TL)
    job = verify_job(pool, recon_settings(), metrics, _connect(wallet_db))
    assert await job.run_once()
    assert metrics.registry.get_sample_value("hiwallet_ledger_verify_problems") == 0
    assert metrics.registry.get_sample_value("hiwallet_ledger_verify_last_run_timestamp_seconds") > 0
    await owner.execute("UPDATE ledger.accounts SET balance = balance + 7 WHERE id = $1", cash_account(a))
    assert await job.run_once()
    # the account's balance against its last line, and TRY's accounts no longer summing to 0
    assert metrics.registry.get_sample_value("hiwallet_ledger_verify_problems") == 2


async def test_two_instances_run_one_round(
    ledger: Ledger,
    pool: asyncpg.Pool,
    owner: asyncpg.Connection,
    wallet_db: str,
    metrics: ReconciliationMetrics,
) -> None:
    """Two instances' jobs start a round at the same moment: one runs it, the other skips. The
    first is held inside its round (the findings' table locked by the owner) until the second
    has tried, so the two truly overlap."""
    a = await _wallet(ledger, 10 * TL)
    await _settle_everything(ledger, pool)
    await owner.execute("UPDATE ledger.accounts SET balance = balance + 1 WHERE id = $1", cash_account(a))
    first = reconciliation_job(Reconciler(pool, recon_settings(), metrics), _connect(wallet_db))
    second = reconciliation_job(Reconciler(pool, recon_settings(), metrics), _connect(wallet_db))
    async with owner.transaction():
        await owner.execute("LOCK TABLE wallet.reconciliation_findings IN EXCLUSIVE MODE")
        one = asyncio.create_task(first.run_once())
        # the first holds the jobs' lock (its round waits on the table)
        for _ in range(500):
            held = await owner.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                RECONCILE_LOCK_KEY & 0xFFFFFFFF,
            )
            if held:
                break
            await asyncio.sleep(0.02)
        assert held == 1
        assert await second.run_once() is False  # the lock is busy: skipped, not queued
        with pytest.raises(ReconciliationBusy):
            await run_now(Reconciler(pool, recon_settings()), _connect(wallet_db, None))
    assert await one is True
    assert (first.rounds, second.rounds, second.skipped) == (1, 0, 1)
    assert await _open(pool) == [(BALANCE_MISMATCH, cash_account(a))]


async def test_a_month_of_gross_payouts_without_its_invoice_is_late(
    ledger: Ledger, pool: asyncpg.Pool, metrics: ReconciliationMetrics
) -> None:
    """Gross-model payouts this month: once the month is over and the provider's due days have
    passed (the round's clock: 40 days on), a finding until an invoice for that month is entered;
    an invoice for another month does not count; net-model payouts bill nothing."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    period = f"{now.year:04d}-{now.month:02d}"
    await _wallet(ledger, 30 * TL)
    await _wallet(ledger, 20 * TL, provider="bank")
    await ledger.settle_topups(new_id(), "stripe", gross=30 * TL, actor="test", ref="payout gross")
    await ledger.settle_topups(
        new_id(), "bank", gross=20 * TL, fee=TL, model="net", actor="test", ref="payout net"
    )
    settings = recon_settings(invoice_due_days={"stripe": 5}, default_invoice_due_days=0)
    today = Reconciler(pool, settings, metrics)
    assert await today.round() == 0  # the month is not over
    later = Reconciler(pool, settings, metrics, clock=lambda: datetime.now(UTC) + timedelta(days=40))
    assert await later.round() == 1
    (finding,) = (await list_findings(pool, status="open")).findings
    assert (finding.kind, finding.subject) == (INVOICE_LATE, f"stripe:TRY:{period}")
    assert finding.details["gross_minor"] == 30 * TL and finding.details["payouts"] == 1
    # an invoice for last month is not this month's
    previous = (now.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    await ledger.provider_invoice(
        new_id(), "stripe", amount=TL, actor="test", ref="invoice old", period=previous
    )
    assert await later.round() == 1
    await ledger.provider_invoice(new_id(), "stripe", amount=TL, actor="test", ref="invoice", period=period)
    assert await later.round() == 0
    assert await _open(pool) == []
    (closed,) = (await list_findings(pool, status="resolved")).findings
    assert closed.resolved_by == ROUND_ACTOR
