"""The whole statement as bank-adapter reads it for reconciliation: bank-fake (served) books a
wire, a card provider's payout, a transfer out and a provider's direct debit; bank-adapter's
importer (its code, on its database) reads the day with ``mt-940`` and announces it with every
line signed, each reference whole, the transfer named with its saga (from bank.transfers), and
the day's balances. A statement whose movements do not add up is refused."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest

from hiwallet.bank.statements import StatementImporter, StatementUnreadable, statement_of
from hiwallet.bank.store import BankStore
from hiwallet.core import db
from hiwallet.core.ids import new_id
from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from tests import pgtemplate
from tests.bank.conftest import IBAN
from tests.fakes.conftest import FAST
from tests.servers import serve, stop

KEY = "bank_lines_key"
DAY_S = 86_400
PAYOUT = "po_1AbCdEfGhIjKlMnOpQrStU"  # longer than :61:'s 16 characters
INVOICE = "INV-2026-11"


async def test_every_movement_is_read_signed_with_its_references_and_saga(bank_db: str) -> None:
    app = create_bank_fake_app(
        BankFakeSettings(
            api_key=KEY,
            opening_balance_minor=1_000_00,
            transfer_decide_after_s=0.05,
            webhook_url="http://127.0.0.1:9/none",
            transfer_callback_url="http://127.0.0.1:9/none",
            **FAST,
        )
    )
    url, server, thread = serve(app, "bank-fake")
    pool = await db.create_pool(bank_db, role=db.app_role("bank"), max_size=2)
    auth = {"authorization": f"Bearer {KEY}"}
    try:
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=10) as bank:
            wire = await bank.post(
                "/v1/topups",
                json={
                    "sender_name": "Ayşe Yılmaz",
                    "sender_iban": IBAN,
                    "currency": "TRY",
                    "amount_minor": 500_00,
                    "reference": "top-up",
                },
            )
            assert wire.status_code in (200, 201), wire.text
            payout = {
                "amount_minor": 987_65,
                "currency": "TRY",
                "counterparty": "STRIPE",
                "reference": PAYOUT,
            }
            assert (await bank.post("/_control/credits", json=payout)).status_code == 201
            command_id = f"{new_id()}:bank"
            sent = await bank.post(
                "/v1/transfers",
                headers={"idempotency-key": command_id},
                json={"amount_minor": 250_00, "currency": "TRY", "destination_iban": IBAN},
            )
            assert sent.status_code == 202, sent.text
            reference = sent.json()["reference"]
            for _ in range(200):
                if (await bank.get(f"/v1/transfers/{reference}")).json()["status"] != "pending":
                    break
                await asyncio.sleep(0.02)
            invoice = {
                "amount_minor": 12_34,
                "currency": "TRY",
                "counterparty": "STRIPE",
                "reference": INVOICE,
            }
            assert (await bank.post("/_control/debits", json=invoice)).status_code == 201

            # our record of the transfer (as bank-adapter's handler keeps it)
            saga = new_id()
            async with pgtemplate.owner_connection(bank_db) as owner:
                await owner.execute(
                    "INSERT INTO bank.transfers (command_id, saga_id, amount_minor, currency,"
                    " destination_iban, state, bank_reference)"
                    " VALUES ($1, $2, 25000, 'TRY', $3, 'pending', $4)",
                    command_id,
                    saga,
                    IBAN,
                    reference,
                )
            today = datetime.now(UTC).date()
            text = (await bank.get(f"/v1/statements/{today.isoformat()}")).text

            read = statement_of(text, today)
            assert (read.currency, read.opening_minor, read.closing_minor) == (
                "TRY",
                1_000_00,
                1_000_00 + 500_00 + 987_65 - 250_00 - 12_34,
            )
            assert [
                (line.bank_reference[:4], line.customer_reference, line.amount_minor) for line in read.lines
            ] == [
                ("wire", None, 500_00),
                ("crd_", PAYOUT, 987_65),
                ("trf_", command_id, -250_00),
                ("dbt_", INVOICE, -12_34),
            ]
            assert read.lines[2].bank_reference == reference
            assert all(line.booked_on == today for line in read.lines)

            # a statement that does not add up is not one to reconcile against
            broken = text.replace(":62F:C", ":62F:D", 1)
            with pytest.raises(StatementUnreadable):
                statement_of(broken, today)
            with pytest.raises(StatementUnreadable):  # the bank answered another day's
                statement_of(text, today - timedelta(days=1))

            # the importer, tomorrow: the day announced with the whole statement, the saga named
            importer = StatementImporter(
                BankStore(pool, "unused"),
                bank,
                lookback_days=1,
                exchange="hiwallet.events",
                clock=lambda: time.time() + DAY_S,
            )
            assert await importer.run() == 1
            async with pgtemplate.owner_connection(bank_db) as owner:
                body = orjson.loads(
                    await owner.fetchval(
                        "SELECT body::text FROM bank.outbox WHERE message_type = 'SettlementReported'"
                    )
                )
            statement = body["statement"]
            assert statement["day"] == today.isoformat()
            assert [line["saga_id"] for line in statement["lines"]] == [None, None, saga, None]
            assert [line["amount_minor"] for line in statement["lines"]] == [500_00, 987_65, -250_00, -12_34]
            assert [line["line_id"] for line in body["lines"]] == [wire.json()["id"]]  # the wire settles
    finally:
        await pool.close()
        stop(server, thread)
