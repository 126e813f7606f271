"""stripe-fake's payouts: what the official client lists is what Stripe's payout reconciliation
reads (a payout, its balance transactions with gross, fee and net, each charge's payment)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import mt940
import pytest
import stripe

from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.fakes.stripe import StripeFakeSettings, create_stripe_fake_app
from tests.fakes.conftest import BANK_KEY, BANK_SECRET, STRIPE_KEY, Fake, Receiver, served_fake
from tests.fakes.test_stripe_fake import pay
from tests.waiting import until_sync


def client_of(fake: Fake) -> stripe.StripeClient:
    return stripe.StripeClient(STRIPE_KEY, base_addresses={"api": fake.base_url}, max_network_retries=0)


def pay_out(fake: Fake, currency: str | None = None) -> list[dict[str, Any]]:
    params = {"currency": currency} if currency else {}
    response = httpx.post(f"{fake.base_url}/_control/payouts", params=params, timeout=10)
    response.raise_for_status()
    return list(response.json()["data"])


@pytest.mark.parametrize(
    ("stripe_overrides", "fees"),
    [
        (
            {"settlement_model": "net", "fee_bps": 290, "fee_fixed_minor": 30, "payout_deposit_url": None},
            [30 + 29, 30 + 73, 30 + 290],
        ),
        ({"settlement_model": "gross", "payout_deposit_url": None}, [0, 0, 0]),
    ],
    ids=["net", "gross"],
)
def test_a_payout_pays_out_the_charges_and_the_client_lists_it(
    stripe_fake: Fake, receiver: Receiver, fees: list[int]
) -> None:
    amounts = [1_000, 2_500, 10_000]
    intents = [pay(stripe_fake, amount) for amount in amounts]
    receiver.wait_for(6)
    (made,) = pay_out(stripe_fake)
    assert pay_out(stripe_fake) == []  # nothing left to pay out

    client = client_of(stripe_fake)
    payouts = client.v1.payouts.list({"limit": 10})
    assert [p.id for p in payouts.data] == [made["id"]]
    payout = client.v1.payouts.retrieve(made["id"])
    assert (payout.object, payout.status, payout.automatic, payout.currency) == (
        "payout",
        "paid",
        True,
        "try",
    )
    assert payout.amount == sum(amounts) - sum(fees)

    listed = client.v1.balance_transactions.list(
        {"payout": payout.id, "type": "charge", "limit": 2, "expand": ["data.source"]}
    )
    lines = list(listed.auto_paging_iter())
    assert len(lines) == 3
    by_intent = {line.source.payment_intent: line for line in lines}
    assert set(by_intent) == {i["id"] for i in intents}
    for intent, amount, fee in zip(intents, amounts, fees, strict=True):
        line = by_intent[intent["id"]]
        assert (line.amount, line.fee, line.net, line.type) == (amount, fee, amount - fee, "charge")
        assert line.source.object == "charge"
        assert line.source.id == intent["latest_charge"]
        assert client.v1.charges.retrieve(line.source.id).balance_transaction == line.id
    # the payout's own transaction is listed with it, as Stripe's: −the payout's amount
    everything = client.v1.balance_transactions.list({"payout": payout.id, "limit": 100})
    (own,) = [t for t in everything.data if t.type == "payout"]
    assert (own.amount, own.source, own.id) == (-payout.amount, payout.id, payout.balance_transaction)
    assert sum(t.net for t in everything.data) == 0


@pytest.mark.parametrize("stripe_overrides", [{"payout_deposit_url": None}])
def test_payouts_per_currency_and_unknown_ones(stripe_fake: Fake, receiver: Receiver) -> None:
    pay(stripe_fake, 500)
    with stripe_fake.client() as http:
        http.post("/v1/topups", data={"amount": 700, "currency": "usd", "wallet": "w"}).raise_for_status()
    receiver.wait_for(4)
    (usd,) = pay_out(stripe_fake, "usd")
    assert usd["currency"] == "usd"
    (try_,) = pay_out(stripe_fake)
    assert try_["currency"] == "try"
    client = client_of(stripe_fake)
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payouts.retrieve("po_nothing")
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.balance_transactions.list({"payout": "po_nothing"})
    assert httpx.get(f"{stripe_fake.base_url}/v1/payouts").status_code == 401


@pytest.mark.parametrize("stripe_overrides", [{"payout_interval_s": 0.2, "payout_deposit_url": None}])
def test_payouts_are_made_on_a_schedule(stripe_fake: Fake, receiver: Receiver) -> None:
    pay(stripe_fake, 900)
    client = client_of(stripe_fake)
    until_sync(lambda: len(client.v1.payouts.list().data) == 1, 10.0, "a scheduled payout")


def test_a_payouts_money_arrives_at_the_bank(stripe_settings: dict[str, Any]) -> None:
    """With bank-fake's address, each payout is credited to our account: the day's MT940
    statement shows it, referenced by the payout's id."""
    bank_settings = BankFakeSettings(
        webhook_url="http://127.0.0.1:9/nowhere", signing_secrets=[BANK_SECRET], api_key=BANK_KEY
    )
    with served_fake(create_bank_fake_app(bank_settings), "bank-fake", BANK_KEY) as bank:
        settings = StripeFakeSettings(
            **{**stripe_settings, "payout_deposit_url": f"{bank.base_url}/_control/credits"}
        )
        with served_fake(create_stripe_fake_app(settings), "stripe-fake", STRIPE_KEY) as stripe_fake:
            pay(stripe_fake, 2_000)
            (made,) = pay_out(stripe_fake)
        with bank.client() as client:
            text = client.get(f"/v1/statements/{datetime.now(UTC).date().isoformat()}").text
    parsed = mt940.models.Transactions()
    parsed.parse(text)
    (credit,) = [t.data for t in parsed]
    assert credit["customer_reference"] == made["id"][:16]
    assert int(credit["amount"].amount * 100) == made["amount"]
