"""bank-fake's daily account statement of our account, in MT940, read with the ``mt-940``
package as an importer reads a bank's: every movement the bank knows of (wires received,
transfers that succeeded, a card provider's payout credited), the balances adding up."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import mt940
import pytest

from tests.fakes.conftest import Fake, Receiver
from tests.fakes.test_bank_fake import received_wire
from tests.fakes.test_bank_transfers import new_iban, started, wait_status


def statement(fake: Fake, day: date) -> mt940.models.Transactions:
    with fake.client() as client:
        response = client.get(f"/v1/statements/{day.isoformat()}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    parsed = mt940.models.Transactions()
    parsed.parse(response.text)
    return parsed


def credit(fake: Fake, amount_minor: int, reference: str) -> dict[str, Any]:
    body = {"amount_minor": amount_minor, "currency": "TRY", "counterparty": "STRIPE", "reference": reference}
    response = httpx.post(f"{fake.base_url}/_control/credits", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return dict(response.json())


@pytest.mark.parametrize(
    "bank_overrides", [{"opening_balance_minor": 1_000_00, "transfer_decide_after_s": 0.05}]
)
def test_the_days_statement_holds_every_movement_and_adds_up(bank_fake: Fake, receiver: Receiver) -> None:
    today = datetime.now(UTC).date()
    wires = [received_wire(bank_fake, amount) for amount in (500_00, 12_34)]
    payout = credit(bank_fake, 987_65, "po_1AbCdEf")
    with bank_fake.client() as client:
        sent = started(client, new_iban(), 250_00, description="withdrawal w-1")
        assert wait_status(client, sent["reference"])["status"] == "succeeded"
        refused = client.get(f"/v1/statements/{today.isoformat()}", headers={"authorization": "Bearer nope"})
        assert refused.status_code == 401

    parsed = statement(bank_fake, today)
    head = parsed.data
    assert head["account_identification"] == "TR420006100000000012345678"
    assert head["final_opening_balance"].amount.amount == Decimal("1000.00")
    lines = [t.data for t in parsed]
    amounts = [line["amount"].amount for line in lines]
    assert amounts == [Decimal("500.00"), Decimal("12.34"), Decimal("987.65"), Decimal("-250.00")]
    assert [line["bank_reference"] for line in lines] == [
        wires[0]["id"][:16],
        wires[1]["id"][:16],
        payout["id"][:16],
        sent["reference"][:16],
    ]
    assert lines[2]["customer_reference"] == "po_1AbCdEf"
    # the :86: details start with the bank's whole reference
    assert [line["transaction_details"].split()[0] for line in lines] == [
        wires[0]["id"],
        wires[1]["id"],
        payout["id"],
        sent["reference"],
    ]
    assert lines[0]["extra_details"] == "Ayse Yilmaz"  # transliterated into SWIFT's characters
    assert all(line["currency"] == "TRY" and line["date"] == today for line in lines)
    closing = head["final_closing_balance"].amount.amount
    assert closing == Decimal("1000.00") + sum(amounts)

    # the next day: nothing moved, opening = closing; the day before: nothing yet
    tomorrow = statement(bank_fake, today + timedelta(days=1))
    assert list(tomorrow) == []
    assert tomorrow.data["final_opening_balance"].amount.amount == closing
    yesterday = statement(bank_fake, today - timedelta(days=1))
    assert yesterday.data["final_closing_balance"].amount.amount == Decimal("1000.00")


def test_a_credit_in_another_currency_is_refused(bank_fake: Fake) -> None:
    body = {"amount_minor": 1, "currency": "USD", "counterparty": "X", "reference": "r"}
    assert httpx.post(f"{bank_fake.base_url}/_control/credits", json=body, timeout=10).status_code == 400
    with bank_fake.client() as client:
        assert client.get("/v1/statements/not-a-date").status_code == 422
