"""The ledger's reads for reconciliation and the daily operations summary: what its lines say
against its stored balances, the top-ups its clearing accounts still wait to be paid for, and
one day's figures. The ledger reports; hiwallet.reconciliation keeps findings and the summary.

Each read is a batch job's, not a request's: in one read-only snapshot (core.uow.snapshot: the
pool's statement timeout is sized for postings), bounded by ``QUERY_TIMEOUT_S`` on the server
and the client (as verify)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import asyncpg

from hiwallet.core.queries import load_queries
from hiwallet.core.uow import snapshot
from hiwallet.ledger.accounts import (
    CENTRAL_BUCKET,
    Role,
    bucket_of,
    cash_account,
    promo_account,
    system_account,
)
from hiwallet.ledger.verify import QUERY_TIMEOUT_S, V

__all__ = [
    "BalanceMismatch",
    "DayFigures",
    "LateInvoice",
    "NostroMovement",
    "UnsettledTopup",
    "balance_mismatches",
    "day_figures",
    "late_invoices",
    "nostro_movements",
    "unsettled_topups",
]

R = load_queries(Path(__file__).parent / "sql" / "reconcile.sql")


@dataclass(frozen=True, slots=True)
class BalanceMismatch:
    account: str
    role: str
    currency: str
    balance: int
    lines_total: int


@dataclass(frozen=True, slots=True)
class UnsettledTopup:
    transaction_id: str
    provider: str
    currency: str
    amount: int
    unsettled: int  # the part of it no payout covers (payouts taken oldest top-up first)
    posted_at: datetime


@dataclass(frozen=True, slots=True)
class LateInvoice:
    """A month of gross-model payouts whose invoice is overdue."""

    provider: str
    currency: str
    period: str  # YYYY-MM
    payouts: int
    gross: int
    due_at: datetime


@dataclass(frozen=True, slots=True)
class NostroMovement:
    """One line of the nostro (our account at the bank): signed as the ledger books it (an asset:
    − money came in, + money went out; the bank's statement shows the opposite sign)."""

    transaction_id: str
    type: str  # the transaction's type (settlement_topup, settlement_withdrawal, provider_invoice …)
    ref: str
    amount: int
    posted_at: datetime


@dataclass(frozen=True, slots=True)
class DayFigures:
    """One day's movements through some wallets (an owner's, or every wallet: owner ``""``)."""

    owner: str
    currency: str
    transactions: int
    volume_in_minor: int
    volume_out_minor: int
    fees_minor: int


async def balance_mismatches(conn: asyncpg.Connection, *, limit: int = 1_000) -> list[BalanceMismatch]:
    """Every account whose stored balance is not the sum of its lines (at most ``limit``), one
    bucket at a time in one snapshot."""
    found: list[BalanceMismatch] = []
    async with snapshot(conn, statement_timeout_s=QUERY_TIMEOUT_S):
        for r in await conn.fetch(V["buckets"], timeout=QUERY_TIMEOUT_S):
            rows = await conn.fetch(
                R["balance_mismatches"], r["bucket"], limit - len(found), timeout=QUERY_TIMEOUT_S
            )
            found += [
                BalanceMismatch(m["id"], m["role"], m["currency"], m["balance"], m["lines_total"])
                for m in rows
            ]
            if len(found) >= limit:
                break
    return found


async def unsettled_topups(
    conn: asyncpg.Connection,
    *,
    windows_s: Mapping[str, float],
    default_window_s: float,
    now: datetime,
    limit: int = 1_000,
) -> list[UnsettledTopup]:
    """Top-ups posted longer ago than their provider's window (``windows_s``, else
    ``default_window_s``) that the provider's payouts so far do not cover, oldest first."""
    providers = sorted(windows_s)
    async with snapshot(conn, statement_timeout_s=QUERY_TIMEOUT_S):
        rows = await conn.fetch(
            R["unsettled_topups"],
            providers,
            [float(windows_s[p]) for p in providers],
            float(default_window_s),
            now,
            limit,
            timeout=QUERY_TIMEOUT_S,
        )
    return [
        UnsettledTopup(
            r["transaction_id"], r["provider"], r["currency"], r["amount"], r["unsettled"], r["posted_at"]
        )
        for r in rows
    ]


async def late_invoices(
    conn: asyncpg.Connection,
    *,
    due_days: Mapping[str, int],
    default_due_days: int,
    now: datetime,
    limit: int = 1_000,
) -> list[LateInvoice]:
    """Months of gross-model payouts (the provider bills its fee afterwards) with no invoice
    entered for them ``due_days`` (per provider, else ``default_due_days``) after the month's
    end, oldest first."""
    providers = sorted(due_days)
    async with snapshot(conn, statement_timeout_s=QUERY_TIMEOUT_S):
        rows = await conn.fetch(
            R["late_invoices"],
            providers,
            [int(due_days[p]) for p in providers],
            int(default_due_days),
            now,
            CENTRAL_BUCKET,
            limit,
            timeout=QUERY_TIMEOUT_S,
        )
    return [
        LateInvoice(r["provider"], r["currency"], r["period"], r["payouts"], r["gross"], r["due_at"])
        for r in rows
    ]


async def nostro_movements(
    conn: asyncpg.Connection, currency: str, *, since: datetime, limit: int = 10_000
) -> list[NostroMovement]:
    """The nostro's lines of ``currency`` posted at or after ``since``, in posting order (at
    most ``limit``): what reconciliation matches against the bank's statement."""
    async with snapshot(conn, statement_timeout_s=QUERY_TIMEOUT_S):
        rows = await conn.fetch(
            R["nostro_movements"],
            CENTRAL_BUCKET,
            system_account(Role.NOSTRO, currency),
            since,
            limit,
            timeout=QUERY_TIMEOUT_S,
        )
    return [
        NostroMovement(r["transaction_id"], r["type"], r["ref"], r["amount"], r["posted_at"]) for r in rows
    ]


def _day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


async def day_figures(
    conn: asyncpg.Connection, day: date, wallets: Mapping[str, Sequence[str]]
) -> list[DayFigures]:
    """The UTC ``day``'s figures per owner of ``wallets`` (owner -> its wallet ids: their cash
    and promo accounts count) and, as owner ``""``, over every wallet."""
    start, end = _day_bounds(day)
    buckets: list[int] = []
    accounts: list[str] = []
    owners: list[str] = []
    for owner, ids in wallets.items():
        for wallet in ids:
            for account in (cash_account(wallet), promo_account(wallet)):
                buckets.append(bucket_of(wallet))
                accounts.append(account)
                owners.append(owner)
    async with snapshot(conn, statement_timeout_s=QUERY_TIMEOUT_S):
        rows = list(await conn.fetch(R["day_totals"], start, end, timeout=QUERY_TIMEOUT_S))
        named = (
            await conn.fetch(
                R["day_of_wallets"], buckets, accounts, owners, start, end, timeout=QUERY_TIMEOUT_S
            )
            if accounts
            else []
        )
    figures = [
        DayFigures("", r["currency"], r["transactions"], r["volume_in"], r["volume_out"], r["fees"])
        for r in rows
    ]
    figures += [
        DayFigures(r["owner"], r["currency"], r["transactions"], r["volume_in"], r["volume_out"], r["fees"])
        for r in named
    ]
    return figures
