"""The nostro against the bank's statement from one end to the other but the broker: bank-fake
(served) books a month of our account (a wire, a card provider's payout, a transfer out, an
invoice's direct debit, and one stray credit); bank-adapter's importer (its code, on its
database) reads the day the next day; wallet-consumer's settlement handler (its code, its role)
handles the message the importer put in bank.outbox, as the relay would deliver it; the ledger
holds the same month as its writers post it. The round matches every movement and finds the
stray credit, and nothing else. (The same path through RabbitMQ and the processes:
tests/bank/test_statements.py.)"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import orjson
import pytest

from hiwallet.bank.statements import StatementImporter
from hiwallet.bank.store import BankStore
from hiwallet.core import db
from hiwallet.core.consumer import IncomingMessage
from hiwallet.core.ids import derived_id, new_id
from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.ledger import Ledger, LedgerStore
from hiwallet.reconciliation import BANK_LINE_UNMATCHED, Reconciler, ReconciliationMetrics, list_findings
from hiwallet.wallet_consumer.settlements import SettlementHandler, SettlementMetrics
from tests import pgtemplate
from tests.fakes.conftest import FAST
from tests.reconciliation.conftest import FEES, TL, recon_settings
from tests.servers import serve, stop

KEY = "bank_nostro_key"
IBAN = "TR330006100519786457841326"
DAY_S = 86_400


@pytest.fixture
async def bank_pool(bank_db: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(bank_db, role=db.app_role("bank"), max_size=2)
    yield pool
    await pool.close()


async def test_a_month_at_the_bank_meets_the_nostro(
    bank_db: str, bank_pool: asyncpg.Pool, pool: asyncpg.Pool, ledger: Ledger
) -> None:
    app = create_bank_fake_app(
        BankFakeSettings(
            api_key=KEY,
            transfer_decide_after_s=0.05,
            webhook_url="http://127.0.0.1:9/none",
            transfer_callback_url="http://127.0.0.1:9/none",
            **FAST,
        )
    )
    url, server, thread = serve(app, "bank-fake")
    payout = f"po_{uuid.uuid4().hex[:20]}"
    saga = new_id()
    command_id = f"{saga}:bank"
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={"authorization": f"Bearer {KEY}"}, timeout=10
        ) as bank:
            # -- at the bank ---------------------------------------------------------------------
            sender = {"sender_name": "Ayşe Yılmaz", "sender_iban": IBAN, "currency": "TRY", "reference": "t"}
            wire = (await bank.post("/v1/topups", json={**sender, "amount_minor": 50 * TL})).json()["id"]
            deposit = {"currency": "TRY", "counterparty": "STRIPE"}
            credited = await bank.post(
                "/_control/credits", json={**deposit, "amount_minor": 97 * TL, "reference": payout}
            )
            assert credited.status_code == 201, credited.text
            stray = await bank.post(
                "/_control/credits", json={**deposit, "amount_minor": 3 * TL, "reference": "po_stray"}
            )
            assert stray.status_code == 201, stray.text
            sent = await bank.post(
                "/v1/transfers",
                headers={"idempotency-key": command_id},
                json={"amount_minor": 30 * TL, "currency": "TRY", "destination_iban": IBAN},
            )
            reference = sent.json()["reference"]
            for _ in range(200):
                if (await bank.get(f"/v1/transfers/{reference}")).json()["status"] == "succeeded":
                    break
                await asyncio.sleep(0.02)
            debit = {**deposit, "amount_minor": 5 * TL, "reference": "INV-2026-11"}
            assert (await bank.post("/_control/debits", json=debit)).status_code == 201
            async with pgtemplate.owner_connection(bank_db) as owner:  # bank-adapter's record of it
                await owner.execute(
                    "INSERT INTO bank.transfers (command_id, saga_id, amount_minor, currency,"
                    " destination_iban, state, bank_reference) VALUES ($1, $2, $3, 'TRY', $4, 'pending', $5)",
                    command_id,
                    saga,
                    30 * TL,
                    IBAN,
                    reference,
                )

            # -- in the ledger, as its writers post the same month -----------------------------------
            wallet = (await ledger.open_wallet("nostro-month")).wallet_id
            await ledger.topup(
                derived_id("topup", "bank", wire), wallet, 50 * TL, provider="bank", actor="t", ref="w"
            )
            await ledger.topup(new_id(), wallet, 100 * TL, provider="stripe", actor="t", ref="card")
            await ledger.settle_topups(
                new_id(), "stripe", gross=100 * TL, fee=3 * TL, model="net", actor="t", ref=f"payout:{payout}"
            )
            await ledger.settle_withdrawals(
                new_id(), "bank", owed=30 * TL, actor="t", ref=f"withdrawal:{saga}"
            )
            await ledger.provider_invoice(
                new_id(), "stripe", amount=5 * TL, actor="t", ref="invoice stripe INV-2026-11"
            )

            # -- the next day: the statement read, announced, handled ------------------------------
            importer = StatementImporter(
                BankStore(bank_pool, "unused"),
                bank,
                lookback_days=1,
                exchange="hiwallet.events",
                clock=lambda: time.time() + DAY_S,
            )
            assert await importer.run() == 1
        async with pgtemplate.owner_connection(bank_db) as owner:
            row = await owner.fetchrow(
                "SELECT message_id, message_type, routing_key, body::text AS body FROM bank.outbox"
            )
        message = IncomingMessage(
            message_id=row["message_id"],
            type=row["message_type"],
            routing_key=row["routing_key"],
            body=orjson.loads(row["body"]),
            headers={},
            redelivered=False,
            delivery_count=0,
        )
        handler = SettlementHandler(Ledger(LedgerStore(pool), FEES), SettlementMetrics())
        async with pool.acquire() as conn, conn.transaction():
            assert (await handler(conn, message))["result"] == "settled"  # the wire

        # -- the round, the next day, no wait ------------------------------------------------------
        recon = Reconciler(
            pool,
            recon_settings(nostro_wait_days=0),
            ReconciliationMetrics(),
            clock=lambda: datetime.now(UTC) + timedelta(days=1),
        )
        assert await recon.round() == 1
        (found,) = (await list_findings(pool, status="open")).findings
        today = datetime.now(UTC).date().isoformat()
        assert (found.kind, found.subject) == (BANK_LINE_UNMATCHED, f"TRY:{today}:{stray.json()['id']}")
        assert found.details["amount_minor"] == 3 * TL
    finally:
        stop(server, thread)
