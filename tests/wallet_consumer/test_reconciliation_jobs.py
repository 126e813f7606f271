"""The books' jobs in wallet-consumer itself (hiwallet.reconciliation): two instances of the
service on one database, their jobs' intervals short. A planted discrepancy becomes one open
finding (however many rounds of either instance find it), each instance's gauge of open findings
says so (read from the table), verify's gauge counts it in whichever instance ran, and the
daily summary's rows appear. Which instance runs a round is the lock's business
(tests/reconciliation/test_findings.py holds one round of two at once)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import asyncpg
import httpx
from fastapi import FastAPI

from hiwallet.core.ids import new_id
from hiwallet.ledger import Ledger, cash_account
from hiwallet.reconciliation import ReconciliationSettings
from hiwallet.wallet_consumer.app import create_wallet_consumer_app
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.wallet_consumer.conftest import TL, consuming, until

FAST = ReconciliationSettings(
    interval_s=0.2,
    verify_interval_s=0.2,
    summary_interval_s=0.2,
    metrics_refresh_s=0.1,
    settlement_windows_s={},
    default_settlement_window_s=3600.0,  # the top-up below is not overdue
)


@asynccontextmanager
async def instance(
    settings: WalletConsumerSettings, database: str
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app: FastAPI = create_wallet_consumer_app(settings, database=database, reconciliation=FAST)
    async with app.router.lifespan_context(app):
        await consuming(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://wallet-consumer") as client:
            yield app, client


def _gauge(metrics: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", metrics, re.M)
    return float(m.group(1)) if m else None


async def test_two_instances_keep_one_finding_and_the_summary(
    settings: WalletConsumerSettings,
    wallet_db: str,
    ledger: Ledger,
    owner: asyncpg.Connection,
    pool: asyncpg.Pool,
) -> None:
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    await ledger.topup(new_id(), wallet, 40 * TL, provider="stripe", actor="test", ref="fund")
    await owner.execute(
        "UPDATE ledger.accounts SET balance = balance + 9 WHERE id = $1", cash_account(wallet)
    )
    async with AsyncExitStack() as stack:
        apps = [await stack.enter_async_context(instance(settings, wallet_db)) for _ in range(2)]

        async def both_gauges_say_one() -> bool:
            texts = [(await client.get("/metrics")).text for _, client in apps]
            return all(
                _gauge(t, 'hiwallet_reconciliation_open_findings{kind="balance_mismatch"}') == 1.0
                for t in texts
            )

        await until(both_gauges_say_one, 20, "each instance's gauge of open findings")

        async def verified() -> bool:
            texts = [(await client.get("/metrics")).text for _, client in apps]
            ran = [
                t for t in texts if (_gauge(t, "hiwallet_ledger_verify_last_run_timestamp_seconds") or 0) > 0
            ]
            return bool(ran) and all(_gauge(t, "hiwallet_ledger_verify_problems") == 2.0 for t in ran)

        await until(verified, 20, "verify's gauge in the instances that ran it")
        await until(
            lambda: pool.fetchval("SELECT count(*) FROM wallet.daily_summary WHERE account_id = ''"),
            20,
            "the summary's totals",
        )
        rounds = [app.state.reconciliation_job.rounds for app, _ in apps]
        await until(lambda: sum(a.state.reconciliation_job.rounds for a, _ in apps) >= sum(rounds) + 3, 20)
    # however many rounds found it, one finding
    rows = await pool.fetch("SELECT kind, subject, status FROM wallet.reconciliation_findings")
    assert [tuple(r) for r in rows] == [("balance_mismatch", cash_account(wallet), "open")]
    total = await pool.fetchrow("SELECT * FROM wallet.daily_summary WHERE account_id = ''")
    assert (total["transactions"], total["volume_in_minor"]) == (1, 40 * TL)
