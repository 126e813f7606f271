"""topup-webhook served on a free port, fed by the real stripe-fake and bank-fake (their
signatures, their retries and faults, their listings): what they send is accepted once per
payment, and the reconciliation finds what they dropped."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from hiwallet.core.ids import derived_id
from hiwallet.topup_webhook.app import create_topup_webhook_app
from hiwallet.topup_webhook.cli import reconcile_once
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from tests.servers import serve, stop
from tests.topup_webhook.conftest import served_fakes, stored, topup_settings, wallet_id
from tests.waiting import until_sync

STRIPE_KEY = "sk_test_topup_suite"
BANK_KEY = "bank_topup_suite"


@dataclass
class Deployment:
    settings: TopupWebhookSettings
    stripe: httpx.Client
    bank: httpx.Client


@pytest.fixture
def deployment(topup_db: str) -> Iterator[Deployment]:
    placeholder = topup_settings(topup_db)
    # the fakes need the webhook's address, the webhook the fakes': topup-webhook first (its
    # reconciliation settings are only used by reconcile_once below, built again then)
    webhook_url, webhook_server, webhook_thread = serve(
        create_topup_webhook_app(placeholder, background=False), "topup-webhook"
    )
    with served_fakes(webhook_url, stripe_key=STRIPE_KEY, bank_key=BANK_KEY) as (stripe_url, bank_url):
        settings = topup_settings(
            topup_db,
            stripe_url=stripe_url,
            bank_url=bank_url,
            stripe_api_key=STRIPE_KEY,
            bank_api_key=BANK_KEY,
        )
        stripe_auth = {"authorization": f"Bearer {STRIPE_KEY}"}
        bank_auth = {"authorization": f"Bearer {BANK_KEY}"}
        with (
            httpx.Client(base_url=stripe_url, headers=stripe_auth, timeout=10) as stripe,
            httpx.Client(base_url=bank_url, headers=bank_auth, timeout=10) as bank,
        ):
            yield Deployment(settings, stripe, bank)
    stop(webhook_server, webhook_thread)


def deliveries(client: httpx.Client) -> list[dict[str, Any]]:
    return list(client.get("/_control/deliveries").json()["data"])


def _dropped(client: httpx.Client) -> int:
    return sum(1 for d in deliveries(client) if d.get("outcome") == "dropped")


def wait_delivered(client: httpx.Client, count: int, timeout_s: float = 15.0) -> list[dict[str, Any]]:
    def delivered() -> list[dict[str, Any]] | None:
        done = [d for d in deliveries(client) if d.get("status") == 202]
        return done if len(done) >= count else None

    return until_sync(delivered, timeout_s, f"{count} delivered", interval_s=0.05)


async def test_a_card_payment_reported_twice_and_duplicated_is_one_record(
    deployment: Deployment, owner: asyncpg.Connection
) -> None:
    wallet = wallet_id()
    deployment.stripe.post("/_control/faults", json={"duplicate": 3}).raise_for_status()
    intent = deployment.stripe.post("/v1/topups", data={"wallet": wallet, "amount": 2500, "currency": "try"})
    assert intent.status_code == 200, intent.text
    done = wait_delivered(deployment.stripe, 6)  # two events, three copies each
    assert {d["status"] for d in deliveries(deployment.stripe)} == {202}  # nothing refused
    s = await stored(owner)
    assert len(s.inbox) == 2
    [payment] = s.payments
    assert payment["id"] == derived_id("topup", "stripe", intent.json()["id"])
    assert (payment["wallet"], payment["amount_minor"], payment["currency"]) == (wallet, 2500, "TRY")
    assert sorted(payment["reported_by"]) == sorted({d["event_id"] for d in done})
    assert len(s.outbox) == 1


async def test_a_wire_names_its_wallet_in_the_reference(
    deployment: Deployment, owner: asyncpg.Connection
) -> None:
    wallet = wallet_id()
    wire = deployment.bank.post(
        "/v1/topups",
        json={
            "sender_name": "Ayşe Yılmaz",
            "sender_iban": "TR330006100519786457841326",
            "reference": f"HiWallet {wallet}",
            "amount_minor": 150_000,
            "currency": "TRY",
        },
    )
    assert wire.status_code in (200, 201), wire.text
    wait_delivered(deployment.bank, 1)
    s = await stored(owner)
    [payment] = s.payments
    assert (payment["provider_payment_id"], payment["wallet"]) == (wire.json()["id"], wallet)
    assert len(s.outbox) == 1


async def test_what_the_fakes_dropped_the_reconciliation_records_once(
    deployment: Deployment, owner: asyncpg.Connection
) -> None:
    deployment.stripe.post("/_control/faults", json={"drop": True}).raise_for_status()
    deployment.bank.post("/_control/faults", json={"drop": True}).raise_for_status()
    intent = deployment.stripe.post(
        "/v1/topups", data={"wallet": wallet_id(), "amount": 800, "currency": "try"}
    )
    wire = deployment.bank.post(
        "/v1/topups",
        json={
            "sender_name": "Mehmet Demir",
            "sender_iban": "TR330006100519786457841326",
            "reference": "no wallet named",
            "amount_minor": 9_900,
            "currency": "TRY",
        },
    )
    assert intent.status_code == 200 and wire.status_code in (200, 201)
    # Both fakes dropped their notifications: nothing arrives.
    until_sync(lambda: _dropped(deployment.stripe) == 2, 10, "the card's notifications dropped")
    until_sync(lambda: _dropped(deployment.bank) == 1, 10, "the wire's notification dropped")
    assert (await stored(owner)).payments == []

    assert await reconcile_once(deployment.settings) == 2
    assert await reconcile_once(deployment.settings) == 0
    s = await stored(owner)
    assert {(p["provider"], p["provider_payment_id"]) for p in s.payments} == {
        ("stripe", intent.json()["id"]),
        ("bank", wire.json()["id"]),
    }
    assert {p["routes"][0] for p in s.payments} == {"reconciliation"}
    assert len(s.outbox) == 2
    # the provider's redelivery afterwards changes nothing
    for event_id in {d["event_id"] for d in deliveries(deployment.stripe)}:
        deployment.stripe.post(f"/_control/redeliver/{event_id}").raise_for_status()
    wait_delivered(deployment.stripe, 2)
    after = await stored(owner)
    assert (len(after.payments), len(after.outbox)) == (2, 2)
