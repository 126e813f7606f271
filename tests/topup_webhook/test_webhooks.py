"""POST /v1/webhooks/topup/{provider}: verified over the raw bytes, stored once per
notification, one record per payment, one TopupRecorded per payment."""

from __future__ import annotations

import asyncio
import json
import time

import asyncpg
import httpx
import orjson
import pytest
import stripe
from standardwebhooks import Webhook
from structlog.testing import capture_logs

from hiwallet.core.ids import derived_id
from tests.topup_webhook.conftest import (
    BANK_PATH,
    BANK_SECRET,
    BANK_SECRET_NEW,
    STRIPE_PATH,
    STRIPE_SECRET,
    STRIPE_SECRET_NEW,
    bank_notification,
    bank_signed,
    post_bank,
    post_stripe,
    running,
    stored,
    stripe_events,
    stripe_signed,
    topup_settings,
    wallet_id,
    wire,
)

PROBLEM = "https://hiwallet.dev/problems/"


async def test_a_stripe_event_is_verified_stored_and_its_payment_announced_once(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    wallet = wallet_id()
    checkout, _ = stripe_events(wallet=wallet, amount=1500)
    body = orjson.dumps(checkout)
    headers = stripe_signed(body)
    # what we accept, the official package accepts too
    assert (
        stripe.Webhook.construct_event(body, headers["stripe-signature"], STRIPE_SECRET).id == checkout["id"]
    )

    response = await client.post(STRIPE_PATH, content=body, headers=headers)

    assert response.status_code == 202, response.text
    s = await stored(owner)
    pi = checkout["data"]["object"]["payment_intent"]  # type: ignore[index]
    payment_id = derived_id("topup", "stripe", pi)
    assert [
        (r["provider"], r["event_id"], r["event_type"], r["payment_id"], r["route"]) for r in s.inbox
    ] == [("stripe", checkout["id"], "checkout.session.completed", payment_id, "webhook")]
    assert s.inbox[0]["processed_at"] is not None
    assert json.loads(s.inbox[0]["payload"]) == checkout
    [payment] = s.payments
    assert dict(payment) | {"created_at": None} == {
        "id": payment_id,
        "provider": "stripe",
        "provider_payment_id": pi,
        "wallet": wallet,
        "reference": wallet,
        "amount_minor": 1500,
        "currency": "TRY",
        "reported_by": [checkout["id"]],
        "routes": ["webhook"],
        "created_at": None,
    }
    [message] = s.outbox
    assert (message["exchange"], message["routing_key"], message["message_type"]) == (
        "hiwallet.topups",
        wallet,
        "TopupRecorded",
    )
    assert message["sent_at"] is None
    assert json.loads(message["headers"]) == {
        "x-request-id": response.headers["x-request-id"],
        "x-hiwallet-correlation-id": payment_id,  # the relay makes it the correlation id
    }
    announced = json.loads(message["body"])
    assert announced.pop("recorded_at").endswith("Z")
    assert announced == {
        "payment_id": payment_id,
        "provider": "stripe",
        "provider_payment_id": pi,
        "wallet": wallet,
        "reference": wallet,
        "amount_minor": 1500,
        "currency": "TRY",
        "route": "webhook",
    }


async def test_a_bank_wire_signed_by_standard_webhooks_is_stored_with_the_wallet_of_its_reference(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    wallet = wallet_id()
    w = wire(reference=f"HiWallet top-up {wallet.upper()} thanks")
    body = bank_notification(w)
    headers = bank_signed(body)
    assert Webhook(BANK_SECRET).verify(body, headers)["data"]["id"] == w["id"]

    response = await client.post(BANK_PATH, content=body, headers=headers)

    assert response.status_code == 202, response.text
    s = await stored(owner)
    assert [(r["event_id"], r["event_type"]) for r in s.inbox] == [
        (headers["webhook-id"], "incoming_wire.received")
    ]
    [payment] = s.payments
    assert payment["id"] == derived_id("topup", "bank", w["id"])
    assert (payment["wallet"], payment["amount_minor"], payment["currency"]) == (wallet, 25_000, "TRY")
    assert payment["reference"] == w["reference"]
    assert [m["routing_key"] for m in s.outbox] == [wallet]


async def test_the_senders_identity_number_is_not_kept_the_rest_of_the_wire_is(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    """The TCKN a Turkish bank puts in a wire's notification is personal data that topup-webhook
    has no use for: it is dropped before the notification is stored (onboarding asks the bank
    for it, docs/events.md); the signature was checked on the body as sent."""
    w = {**wire(reference=f"HiWallet {wallet_id()}"), "sender_tckn": "10000000146"}
    body = bank_notification(w)

    response = await client.post(BANK_PATH, content=body, headers=bank_signed(body))

    assert response.status_code == 202, response.text
    [row] = (await stored(owner)).inbox
    kept = json.loads(row["payload"])["data"]
    assert kept == {**w, "sender_tckn": None}
    assert "10000000146" not in json.dumps(await owner.fetch("SELECT * FROM topup.inbox"), default=str)


@pytest.mark.parametrize(
    "reference",
    [None, "no wallet here", "0421:w:not-a-uuid", f"two: {wallet_id()} and {wallet_id()}"],
    # ids that do not change between collections (pytest-xdist's workers each collect)
    ids=["none", "no-wallet", "not-a-uuid", "two-wallets"],
)
async def test_a_payment_without_one_wallet_is_recorded_unattributed(
    client: httpx.AsyncClient, owner: asyncpg.Connection, reference: str | None
) -> None:
    assert (await post_bank(client, wire(reference=reference))).status_code == 202
    s = await stored(owner)
    [payment] = s.payments
    assert payment["wallet"] is None
    [message] = s.outbox
    # no wallet: routed by the payment's id, announced with wallet null (wallet-consumer keeps it)
    assert message["routing_key"] == payment["id"]
    assert json.loads(message["body"])["wallet"] is None


async def test_the_same_notification_five_times_and_five_times_at_once_is_one_of_each(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    checkout, _ = stripe_events(wallet=wallet_id())
    for _ in range(5):  # a provider's retry signs again
        assert (await post_stripe(client, checkout)).status_code == 202
    w = wire(reference=wallet_id())
    bank_body = bank_notification(w)
    headers = bank_signed(bank_body)  # Standard Webhooks: the same webhook-id on every retry
    answers = await asyncio.gather(
        *(client.post(BANK_PATH, content=bank_body, headers=headers) for _ in range(5)),
        *(post_stripe(client, checkout) for _ in range(5)),
    )
    assert [a.status_code for a in answers] == [202] * 10
    s = await stored(owner)
    assert len(s.inbox) == 2
    assert len(s.payments) == 2
    assert len(s.outbox) == 2
    assert sorted(len(p["reported_by"]) for p in s.payments) == [1, 1]


@pytest.mark.parametrize("order", ["checkout first", "intent first", "both at once"])
async def test_both_notifications_of_one_payment_are_one_record_with_both_ids(
    client: httpx.AsyncClient, owner: asyncpg.Connection, order: str
) -> None:
    checkout, intent = stripe_events(wallet=wallet_id(), amount=4200)
    if order == "both at once":
        answers = await asyncio.gather(
            *(post_stripe(client, e) for e in (checkout, intent) for _ in range(3))
        )
        assert {a.status_code for a in answers} == {202}
    else:
        first, second = (checkout, intent) if order == "checkout first" else (intent, checkout)
        assert (await post_stripe(client, first)).status_code == 202
        assert (await post_stripe(client, second)).status_code == 202
    s = await stored(owner)
    assert len(s.inbox) == 2
    [payment] = s.payments
    assert sorted(payment["reported_by"]) == sorted([checkout["id"], intent["id"]])
    assert payment["routes"] == ["webhook"]
    assert payment["amount_minor"] == 4200
    [message] = s.outbox
    assert json.loads(message["body"])["payment_id"] == payment["id"]
    assert {r["payment_id"] for r in s.inbox} == {payment["id"]}


def _tampered(body: bytes) -> bytes:
    return body.replace(b'"amount_total":1000', b'"amount_total":900000').replace(
        b'"amount_minor":25000', b'"amount_minor":2500000'
    )


STALE = int(time.time()) - 3600


@pytest.mark.parametrize("provider", ["stripe", "bank"])
@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("forged", "signature-mismatch"),
        ("stale", "stale-timestamp"),
        ("altered", "signature-mismatch"),
        ("unsigned", "unsigned"),
        ("garbled", "malformed-signature"),
    ],
)
async def test_a_request_that_is_not_the_providers_is_refused_and_nothing_is_stored(
    client: httpx.AsyncClient, owner: asyncpg.Connection, provider: str, case: str, reason: str
) -> None:
    if provider == "stripe":
        body, path = orjson.dumps(stripe_events(wallet=wallet_id())[0]), STRIPE_PATH
        sign = stripe_signed
        forged = {"secrets": ["whsec_not_the_providers_secret"]}
        header = "stripe-signature"
    else:
        body, path = bank_notification(wire(reference=wallet_id())), BANK_PATH
        sign = bank_signed  # type: ignore[assignment]
        forged = {"secrets": ["whsec_bm90LXRoZS1iYW5rcy1zZWNyZXQtYXQtYWxsLTAwMA=="]}
        header = "webhook-signature"
    headers = {
        "forged": lambda: sign(body, **forged),  # type: ignore[arg-type]
        "stale": lambda: sign(body, timestamp=STALE),
        "altered": lambda: sign(body),
        "unsigned": lambda: {k: v for k, v in sign(body).items() if k != header},
        "garbled": lambda: {**sign(body), header: "t=1,v1=zz,v1,%%%"},
    }[case]()
    sent = _tampered(body) if case == "altered" else body
    assert case != "altered" or sent != body

    with capture_logs() as logs:
        response = await client.post(path, content=sent, headers=headers)

    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert (problem["type"], problem["reason"]) == (PROBLEM + "webhook-signature-refused", reason)
    s = await stored(owner)
    assert (s.inbox, s.payments, s.outbox) == ([], [], [])
    [line] = [entry for entry in logs if entry["event"] == "webhook refused"]
    assert (line["provider"], line["reason"]) == (provider, reason)
    assert not any(sent.decode()[:40] in str(entry) for entry in logs)  # never the body
    assert not any("TR33" in str(entry) or "amount" in str(entry) for entry in logs)


async def test_a_standard_webhook_from_the_future_is_refused_a_stripe_one_is_not(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    later = int(time.time()) + 3600
    response = await post_bank(client, wire(reference=None), timestamp=later)
    assert (response.status_code, response.json()["reason"]) == (400, "future-timestamp")
    # Stripe's own library accepts a timestamp ahead of the clock; so do we (CONTRACT-10)
    assert (await post_stripe(client, stripe_events()[0], timestamp=later)).status_code == 202
    assert len((await stored(owner)).inbox) == 1


async def test_rotation_both_secrets_during_the_overlap_and_the_old_refused_after(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    overlap = topup_settings(
        topup_db,
        stripe_secrets=[STRIPE_SECRET, STRIPE_SECRET_NEW],
        bank_secrets=[BANK_SECRET, BANK_SECRET_NEW],
    )
    async with running(overlap) as client:
        # signed with the old only, the new only, and both (as the providers do while rotating)
        for secrets in ([STRIPE_SECRET], [STRIPE_SECRET_NEW], [STRIPE_SECRET, STRIPE_SECRET_NEW]):
            assert (await post_stripe(client, stripe_events()[0], secrets=secrets)).status_code == 202
        for secrets in ([BANK_SECRET], [BANK_SECRET_NEW], [BANK_SECRET_NEW, BANK_SECRET]):
            assert (await post_bank(client, wire(reference=None), secrets=secrets)).status_code == 202
    after = topup_settings(topup_db, stripe_secrets=[STRIPE_SECRET_NEW], bank_secrets=[BANK_SECRET_NEW])
    async with running(after) as client:
        refused = await post_stripe(client, stripe_events()[0], secrets=[STRIPE_SECRET])
        assert (refused.status_code, refused.json()["reason"]) == (400, "signature-mismatch")
        refused = await post_bank(client, wire(reference=None), secrets=[BANK_SECRET])
        assert (refused.status_code, refused.json()["reason"]) == (400, "signature-mismatch")
        assert (await post_stripe(client, stripe_events()[0], secrets=[STRIPE_SECRET_NEW])).status_code == 202
    assert len((await stored(owner)).inbox) == 7


async def test_an_oversized_body_is_refused_before_it_is_read(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    async with running(topup_settings(topup_db, max_body_bytes=2_048)) as client:
        event = stripe_events()[0]
        event["padding"] = "x" * 4_096
        response = await post_stripe(client, event)
        assert response.status_code == 413
        assert response.json()["type"] == PROBLEM + "payload-too-large"
    assert (await stored(owner)).inbox == []


async def test_a_type_we_do_nothing_with_is_stored_and_accepted(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    event = {**stripe_events()[0], "type": "customer.created", "data": {"object": {"id": "cus_1"}}}
    assert (await post_stripe(client, event)).status_code == 202
    assert (await post_stripe(client, event)).status_code == 202
    body = orjson.dumps({"type": "incoming_wire.returned", "data": {"id": "wire_x"}})
    assert (await client.post(BANK_PATH, content=body, headers=bank_signed(body))).status_code == 202
    s = await stored(owner)
    assert [(r["event_type"], r["payment_id"]) for r in s.inbox] == [
        ("customer.created", None),
        ("incoming_wire.returned", None),
    ]
    assert (s.payments, s.outbox) == ([], [])


@pytest.mark.parametrize(
    "change",
    [
        {"payment_status": "unpaid"},
        {"amount_total": 0},
        {"amount_total": "1000"},
        {"amount_total": 10**15 + 1},  # more than the ledger posts
        {"payment_intent": None},
        {"payment_intent": "pi_\u0007bell"},
        {"payment_intent": "pi_" + "x" * 200},
        {"currency": "lira"},
    ],
)
async def test_a_notification_whose_payment_cannot_be_read_is_stored_and_credits_nothing(
    client: httpx.AsyncClient, owner: asyncpg.Connection, change: dict[str, object]
) -> None:
    checkout, _ = stripe_events(wallet=wallet_id())
    checkout["data"]["object"].update(change)  # type: ignore[attr-defined]
    with capture_logs() as logs:
        assert (await post_stripe(client, checkout)).status_code == 202
    s = await stored(owner)
    assert [(r["event_id"], r["payment_id"]) for r in s.inbox] == [(checkout["id"], None)]
    assert (s.payments, s.outbox) == ([], [])
    assert any(entry["event"] == "notification names no readable payment" for entry in logs)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"id": "evt_1"}',
        b'{"type": "x", "id": ""}',
        b'{"type": 7, "id": "e"}',
        # JSON, but not a text jsonb holds: refused by the database, not a 500
        b'{"type": "x", "id": "evt_2", "data": {"object": {"note": "\\u0000"}}}',
    ],
)
async def test_a_verified_body_that_is_not_a_notification_is_422_and_not_stored(
    client: httpx.AsyncClient, owner: asyncpg.Connection, body: bytes
) -> None:
    response = await client.post(STRIPE_PATH, content=body, headers=stripe_signed(body))
    assert response.status_code == 422
    assert response.json()["type"] == PROBLEM + "webhook-unreadable"
    assert (await stored(owner)).inbox == []


async def test_metrics_count_webhooks_by_provider_and_outcome(client: httpx.AsyncClient) -> None:
    checkout, intent = stripe_events(wallet=wallet_id())
    for event in (checkout, checkout, intent):
        await post_stripe(client, event)
    await post_stripe(client, checkout, secrets=["whsec_wrong"])
    text = (await client.get("/metrics")).text
    for outcome, count in (("recorded", 1), ("duplicate", 1), ("reported", 1), ("refused", 1)):
        assert f'hiwallet_topup_webhooks_total{{outcome="{outcome}",provider="stripe"}} {count}.0' in text


async def test_a_long_reference_is_kept_to_what_can_be_credited(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    wallet = wallet_id()
    assert (await post_bank(client, wire(reference=f"{wallet} " + "x" * 1_000))).status_code == 202
    [payment] = (await stored(owner)).payments
    assert payment["wallet"] == wallet
    assert len(payment["reference"]) == 500
