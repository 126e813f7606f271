"""The bank's daily statement, settled: bank-fake books wires to our account and writes the day's
MT940 statement; bank-adapter's statement importer (its code, run here by hand as its job and the
operator run it) parses it with ``mt-940`` and announces the day once; wallet-consumer moves the
wires it names from the bank's clearing to nostro, exactly once. A credited wire is settled; one
that was never credited (no wallet in its reference) is a finding. The ledger verifies, and the
reconciliation round finds the uncredited wire on the statement with no nostro movement."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest

from hiwallet.bank.adapter import create_bank_adapter_app, statement_client, statement_job
from hiwallet.bank.cli import statements_once
from hiwallet.bank.pool import database_spec
from hiwallet.bank.statements import StatementImporter
from hiwallet.core.broker import Broker
from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.ledger import Fees, Ledger, LedgerStore, Role
from hiwallet.reconciliation import BANK_LINE_UNMATCHED, Reconciler, ReconciliationSettings, list_findings
from hiwallet.topup_webhook.app import create_topup_webhook_app
from hiwallet.wallet_consumer.app import create_wallet_consumer_app, topology_of
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests import pgtemplate, topups
from tests.bank.conftest import Names, bank_settings
from tests.fakes.conftest import FAST
from tests.servers import serve, stop
from tests.topup_webhook.conftest import BANK_PATH, BANK_SECRET, topup_settings
from tests.waiting import stays

BANK_KEY = "bank_statements_key"
DAY_S = 86_400


@pytest.fixture
async def wallet_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    async with topups.wallet_pool(wallet_db, max_size=4) as pool:
        yield pool


@pytest.fixture
async def consumer_settings(broker: Broker) -> AsyncIterator[WalletConsumerSettings]:
    settings = topups.consumer_settings()
    yield settings
    await broker.delete(topology_of(settings))


async def books(ledger: Ledger) -> tuple[int, int]:
    return (
        await ledger.store.system_balance(Role.CLEARING, "TRY", "bank"),
        await ledger.store.system_balance(Role.NOSTRO, "TRY"),
    )


async def test_a_days_statement_settles_its_wires_once(
    bank_db: str,
    topup_db: str,
    wallet_db: str,
    wallet_pool: asyncpg.Pool,
    consumer_settings: WalletConsumerSettings,
    names: Names,
) -> None:
    ledger = Ledger(LedgerStore(wallet_pool), Fees.from_settings())
    wallet = (await ledger.open_wallet("statement", bucket=421)).wallet_id
    webhook_app = create_topup_webhook_app(
        topup_settings(topup_db, exchange=consumer_settings.exchange, relay_poll_s=0.5),
        topology=topology_of(consumer_settings),
    )
    webhook_url, webhook_server, webhook_thread = serve(webhook_app, "topup-webhook")
    bank_app = create_bank_fake_app(
        BankFakeSettings(
            webhook_url=f"{webhook_url}{BANK_PATH}", signing_secrets=[BANK_SECRET], api_key=BANK_KEY, **FAST
        )
    )
    bank_url, bank_server, bank_thread = serve(bank_app, "bank-fake")
    # bank-adapter itself (its relay publishes bank.outbox); its rounds are run here by hand
    settings = bank_settings(
        bank_db,
        names,
        bank_url=bank_url,
        bank_api_key=BANK_KEY,
        events_exchange=consumer_settings.events_exchange,
    )
    adapter = create_bank_adapter_app(
        settings, topology=names.topology() + topology_of(consumer_settings), reconcile=False
    )
    client = statement_client(settings)
    consumer = create_wallet_consumer_app(consumer_settings, database=wallet_db)
    try:
        async with (
            consumer.router.lifespan_context(consumer),
            adapter.router.lifespan_context(adapter),
            httpx.AsyncClient(base_url=bank_url, timeout=10) as http,
            pgtemplate.owner_connection(bank_db) as owner,
        ):
            sender = {
                "sender_name": "Ayşe Yılmaz",
                "sender_iban": "TR330006100519786457841326",
                "currency": "TRY",
            }
            auth = {"authorization": f"Bearer {BANK_KEY}"}
            credited = await http.post(
                "/v1/topups",
                headers=auth,
                json={**sender, "reference": f"top-up {wallet}", "amount_minor": 10_000},
            )
            assert credited.status_code in (200, 201), credited.text
            lost = await http.post(
                "/v1/topups", headers=auth, json={**sender, "reference": "no wallet", "amount_minor": 700}
            )
            assert lost.status_code in (200, 201), lost.text

            async def topped_up() -> bool:
                return (await ledger.wallet_balance(wallet)).cash == 10_000

            await topups.until(topped_up, timeout_s=30.0)
            before = await books(ledger)

            # today is not read while it lasts; tomorrow, today is a complete day
            store = adapter.state.store
            today = StatementImporter(store, client, lookback_days=2, exchange=settings.events_exchange)
            assert await today.run() == 2  # yesterday and the day before: empty days, announced
            # the operator's round over the same two days: nothing new
            assert await statements_once(settings.model_copy(update={"statement_lookback_days": 2})) == 0
            tomorrow = StatementImporter(
                store,
                client,
                lookback_days=2,
                exchange=settings.events_exchange,
                clock=lambda: time.time() + DAY_S,
            )
            connect = database_spec(settings).dedicated()
            jobs = [statement_job(tomorrow.run, settings, connect) for _ in range(2)]
            await asyncio.gather(jobs[0].run_once(), jobs[1].run_once(), tomorrow.run())
            assert await tomorrow.run() == 0
            rows = await owner.fetch("SELECT day, amount_minor, lines FROM bank.statements ORDER BY day")
            assert [(r["amount_minor"], r["lines"]) for r in rows][-1] == (10_700, 2)
            # no statement is announced twice (a few empty days, the wires' day once)
            assert await owner.fetchval(
                "SELECT count(*) FROM bank.outbox WHERE message_type = 'SettlementReported'"
            ) == len(rows)

            async def settled() -> bool:
                return await books(ledger) == (before[0] + 10_000, before[1] - 10_000)

            await topups.until(settled, timeout_s=30.0)
            await stays(settled, 1.0, "the wire settled once")
            async with topups.wallet_pool(wallet_db, max_size=1, service="wallet_consumer") as consumer_pool:
                findings = await consumer_pool.fetch(
                    "SELECT kind, details FROM wallet.reconciliation_findings"
                )
            assert [f["kind"] for f in findings] == ["payout_unmatched"], findings
            assert findings[0]["details"]["line"]["provider_payment_id"] == lost.json()["id"]
            report = await ledger.store.verify()
            assert report.ok, report.problems

            # The day's whole statement kept for reconciliation, once; the round on it (the next
            # day, no wait): the wire credited to no wallet is money at the bank the nostro does
            # not show, and nothing else is out of line.
            async with topups.wallet_pool(wallet_db, max_size=2, service="wallet_consumer") as consumer_pool:
                kept = await consumer_pool.fetch(
                    "SELECT bank_reference, amount_minor FROM wallet.bank_statement_lines"
                    " ORDER BY day, position"
                )
                assert [(r["bank_reference"], r["amount_minor"]) for r in kept] == [
                    (credited.json()["id"], 10_000),
                    (lost.json()["id"], 700),
                ]
                recon = Reconciler(
                    consumer_pool,
                    ReconciliationSettings(nostro_wait_days=0),
                    clock=lambda: datetime.now(UTC) + timedelta(days=1),
                )
                assert await recon.round() == 1
                page = await list_findings(consumer_pool, kind=BANK_LINE_UNMATCHED)
                assert [f.subject for f in page.findings] == [
                    f"TRY:{datetime.now(UTC).date().isoformat()}:{lost.json()['id']}"
                ]
    finally:
        await client.aclose()
        stop(bank_server, bank_thread)
        stop(webhook_server, webhook_thread)
