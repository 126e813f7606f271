"""Verify the whole ledger from its lines: every balance, version, hash chain, transaction sum,
hold and promo batch, and that all accounts together sum to zero per currency.

Checks run per bucket (each one shard's snapshot on Citus) plus global sums; a difference is
reported by name, never fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from hiwallet.core.queries import load_queries
from hiwallet.core.uow import snapshot

V = load_queries(Path(__file__).parent / "sql" / "verify.sql")
# One query reads one bucket (or, for the global sums, everything): a batch job's bound, not a
# request's. Both the server's statement timeout and the client's are set to it.
QUERY_TIMEOUT_S = 900


@dataclass
class VerifyReport:
    buckets: int = 0
    accounts: int = 0
    lines: int = 0
    transactions: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


async def verify(
    conn: asyncpg.Connection,
    *,
    progress: Callable[[int, int], None] | None = None,
    max_problems: int = 1_000,
) -> VerifyReport:
    report = VerifyReport()

    def add(problem: str) -> None:
        if len(report.problems) < max_problems:
            report.problems.append(problem)

    # One snapshot for the whole run, so a posting committed halfway through is seen entirely
    # or not at all (on one node; on Citus the per-bucket checks keep this property).
    # A whole-ledger check is a batch job, not a request: the pool's statement timeout (sized
    # for postings) does not apply to it; each bucket's queries are bounded by QUERY_TIMEOUT_S.
    async with snapshot(conn, statement_timeout_s=QUERY_TIMEOUT_S):
        buckets = [r["bucket"] for r in await conn.fetch(V["buckets"], timeout=QUERY_TIMEOUT_S)]
        report.buckets = len(buckets)
        for i, bucket in enumerate(buckets, 1):
            for r in await conn.fetch(V["line_problems"], bucket, timeout=QUERY_TIMEOUT_S):
                add(f"line {r['account_id']} v{r['version']}: {r['problem']}")
            for r in await conn.fetch(V["orphan_problems"], bucket, timeout=QUERY_TIMEOUT_S):
                add(f"line {r['account_id']} v{r['version']}: {r['problem']}")
            for r in await conn.fetch(V["account_problems"], bucket, timeout=QUERY_TIMEOUT_S):
                add(f"account {r['id']}: {r['problem']}")
            for r in await conn.fetch(V["hold_problems"], bucket, timeout=QUERY_TIMEOUT_S):
                add(f"account {r['id']}: held {r['held']} but pending holds sum to {r['pending']}")
            for r in await conn.fetch(V["promo_problems"], bucket, timeout=QUERY_TIMEOUT_S):
                add(f"account {r['id']}: promo balance {r['balance']} but batches hold {r['remaining']}")
            for r in await conn.fetch(V["part_problems"], bucket, timeout=QUERY_TIMEOUT_S):
                add(f"transaction {r['transaction_id']} part {bucket}: {r['currency']} sums to {r['total']}")
            counts = await conn.fetchrow(V["bucket_counts"], bucket, timeout=QUERY_TIMEOUT_S)
            report.accounts += counts["accounts"]
            report.lines += counts["lines"]
            report.transactions += counts["transactions"]
            if progress:
                progress(i, len(buckets))
        for r in await conn.fetch(V["unbalanced_transactions"], timeout=QUERY_TIMEOUT_S):
            add(f"transaction {r['transaction_id']}: {r['currency']} sums to {r['total']}")
        for r in await conn.fetch(V["currency_totals"], timeout=QUERY_TIMEOUT_S):
            add(f"all accounts in {r['currency']} sum to {r['total']}, not 0")
    return report
