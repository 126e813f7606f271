"""stripe-fake: what it sends is what Stripe sends, as the official client verifies it."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import stripe

from tests.fakes.conftest import (
    FAILED_TWICE_THEN_DELIVERED,
    STRIPE_SECRET,
    STRIPE_SECRET_NEW,
    Fake,
    Received,
    Receiver,
)
from tests.waiting import until_sync

WALLET = "0421:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000"
CHECKOUT = "checkout.session.completed"
SUCCEEDED = "payment_intent.succeeded"


def pay(fake: Fake, amount: int = 1250, wallet: str | None = WALLET, *, form: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {"amount": amount, "currency": "try"}
    if wallet is not None:
        data["wallet"] = wallet
    with fake.client() as client:
        response = client.post("/v1/topups", data=data) if form else client.post("/v1/topups", json=data)
    assert response.status_code == 200, response.text
    return dict(response.json())


def verified(received: Received, secret: str = STRIPE_SECRET) -> stripe.Event:
    return stripe.Webhook.construct_event(received.body, received.headers["stripe-signature"], secret)


def signature_time(received: Received) -> int:
    parts = dict(
        p.split("=", 1) for p in received.headers["stripe-signature"].split(",") if p.startswith("t=")
    )
    return int(parts["t"])


def test_one_payment_is_reported_twice_and_the_stripe_client_accepts_both(
    stripe_fake: Fake, receiver: Receiver
) -> None:
    intent = pay(stripe_fake)
    assert intent["id"].startswith("pi_")
    assert intent["object"] == "payment_intent"
    assert intent["status"] == "succeeded"
    assert (intent["amount"], intent["currency"], intent["metadata"]) == (1250, "try", {"wallet": WALLET})

    first, second = receiver.wait_for(2)
    events = [verified(first), verified(second)]
    assert [e.type for e in events] == [CHECKOUT, SUCCEEDED]  # the checkout first, then the intent
    session, succeeded = (json.loads(r.body)["data"]["object"] for r in (first, second))
    assert session["id"].startswith("cs_")
    assert session["object"] == "checkout.session"
    assert session["payment_intent"] == succeeded["id"] == intent["id"]  # one payment: one pi_
    assert (session["amount_total"], session["payment_status"], session["metadata"]) == (
        1250,
        "paid",
        {"wallet": WALLET},
    )
    assert (succeeded["amount_received"], succeeded["status"]) == (1250, "succeeded")
    for received in (first, second):
        event = json.loads(received.body)
        assert event["id"].startswith("evt_")
        assert event["object"] == "event"
        assert event["livemode"] is False
        assert isinstance(event["created"], int)
        assert event["api_version"] and event["pending_webhooks"] == 1
        assert event["request"]["id"].startswith("req_")
        assert received.headers["content-type"].startswith("application/json")
    assert events[0].id != events[1].id
    # the fake's own log of attempts
    attempts = stripe_fake.deliveries()
    assert [(a["type"], a["attempt"], a["status"], a["outcome"]) for a in attempts] == [
        (CHECKOUT, 1, 202, "delivered"),
        (SUCCEEDED, 1, 202, "delivered"),
    ]
    # the payment intent, as GET /v1/payment_intents/{id}
    with stripe_fake.client() as client:
        assert client.get(f"/v1/payment_intents/{intent['id']}").json() == intent
        assert client.get("/v1/payment_intents/pi_nothing").status_code == 404


def test_json_topup_without_a_wallet_is_an_unattributable_payment(
    stripe_fake: Fake, receiver: Receiver
) -> None:
    intent = pay(stripe_fake, 999, wallet=None, form=False)
    assert intent["metadata"] == {}
    for received in receiver.wait_for(2):
        assert verified(received).data.object.metadata.to_dict() == {}


@pytest.mark.parametrize("stripe_overrides", [{"signing_secrets": [STRIPE_SECRET, STRIPE_SECRET_NEW]}])
def test_rotation_signs_with_every_secret(stripe_fake: Fake, receiver: Receiver) -> None:
    pay(stripe_fake)
    for received in receiver.wait_for(2):
        header = received.headers["stripe-signature"]
        assert header.count("v1=") == 2
        assert verified(received, STRIPE_SECRET).type in (CHECKOUT, SUCCEEDED)
        assert verified(received, STRIPE_SECRET_NEW).type in (CHECKOUT, SUCCEEDED)
        with pytest.raises(stripe.SignatureVerificationError):
            verified(received, "whsec_some_other_secret")


def test_a_changed_body_is_refused_by_the_stripe_client(stripe_fake: Fake, receiver: Receiver) -> None:
    pay(stripe_fake, 1000)
    received = receiver.wait_for(1)[0]
    tampered = received.body.replace(b'"amount_total": 1000', b'"amount_total": 100000')
    assert tampered != received.body
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(tampered, received.headers["stripe-signature"], STRIPE_SECRET)


def test_the_api_wants_its_key_and_valid_parameters(stripe_fake: Fake) -> None:
    body = {"amount": "100", "currency": "try", "wallet": WALLET}
    assert httpx.post(f"{stripe_fake.base_url}/v1/topups", data=body).status_code == 401
    wrong = {"Authorization": "Bearer sk_test_wrong"}
    assert httpx.post(f"{stripe_fake.base_url}/v1/topups", data=body, headers=wrong).status_code == 401
    with stripe_fake.client() as client:
        refused = client.post("/v1/topups", data={**body, "amount": "-5"})
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert refused.json()["error"]["param"] == "amount"
        assert (
            client.post("/v1/topups", data={"currency": "try"}).json()["error"]["code"] == "parameter_missing"
        )
        # an idempotent retry of the request is the same payment, reported once
        first = client.post("/v1/topups", data=body, headers={"Idempotency-Key": "k1"}).json()
        again = client.post("/v1/topups", data=body, headers={"Idempotency-Key": "k1"}).json()
        assert first["id"] == again["id"]
        assert len(stripe_fake.app.state.fake.events) == 2


def _fail_checkout_twice(received: Received, seen: list[Received]) -> int:
    if received.json["type"] != CHECKOUT:
        return 202
    earlier = [r for r in seen if r.json["type"] == CHECKOUT]
    return 500 if len(earlier) <= 2 else 202


@pytest.mark.parametrize("stripe_overrides", [{"retry_initial_s": 0.6, "retry_max_delay_s": 5.0}])
def test_retries_until_a_2xx_each_attempt_signed_afresh(stripe_fake: Fake, receiver: Receiver) -> None:
    receiver.respond = _fail_checkout_twice
    pay(stripe_fake)
    receiver.exactly(4, quiet_s=0.3)
    checkouts = [r for r in receiver.requests if r.json["type"] == CHECKOUT]
    assert len(checkouts) == 3
    assert len({r.body for r in checkouts}) == 1  # the same event each time
    for received in checkouts:
        assert verified(received).type == CHECKOUT  # each attempt's signature is valid
    times = [signature_time(r) for r in checkouts]
    assert times == sorted(times) and times[2] > times[0]  # a new timestamp per attempt (1.8 s apart)
    assert checkouts[1].at - checkouts[0].at >= 0.5
    assert checkouts[2].at - checkouts[1].at >= 1.1  # backoff doubles
    event_id = checkouts[0].json["id"]
    assert stripe_fake.attempts(event_id) == FAILED_TWICE_THEN_DELIVERED


@pytest.mark.parametrize("stripe_overrides", [{"retry_attempts": 3}])
def test_retries_are_bounded(stripe_fake: Fake, receiver: Receiver) -> None:
    receiver.respond = lambda _r, _all: 500
    pay(stripe_fake)
    # three attempts each, no more, well past the last retry's wait (0.05, 0.1)
    receiver.exactly(6, quiet_s=0.8)
    outcomes = [(a["attempt"], a["outcome"]) for a in stripe_fake.deliveries() if a["type"] == CHECKOUT]
    assert outcomes == [(1, "retry"), (2, "retry"), (3, "gave_up")]


def test_retries_when_the_receiver_is_unreachable(
    stripe_settings: dict[str, Any], receiver: Receiver
) -> None:
    from hiwallet.fakes.stripe import StripeFakeSettings, create_stripe_fake_app
    from tests.servers import free_port, serve, stop

    dead = f"http://127.0.0.1:{free_port()}/hook"
    app = create_stripe_fake_app(
        StripeFakeSettings(**{**stripe_settings, "webhook_url": dead, "retry_attempts": 2})
    )
    base, server, thread = serve(app, "stripe-fake")
    try:
        fake = Fake(base, {"Authorization": "Bearer sk_test_fakes_suite"}, app)
        pay(fake)
        until_sync(lambda: len(fake.deliveries()) >= 4, 10, "four attempts", interval_s=0.05)
        attempts = fake.deliveries()
        assert {(a["status"], a["error"]) for a in attempts} == {(None, "ConnectError")}
        assert sorted(a["outcome"] for a in attempts) == ["gave_up", "gave_up", "retry", "retry"]
    finally:
        stop(server, thread)


def test_duplicate_sends_copies_at_once(stripe_fake: Fake, receiver: Receiver) -> None:
    stripe_fake.faults(duplicate=3)
    pay(stripe_fake)
    received = receiver.exactly(6, quiet_s=0.2)
    ids = [r.json["id"] for r in received]
    assert len(set(ids)) == 2 and all(ids.count(i) == 3 for i in ids)
    assert [r.json["type"] for r in received[:3]] == [CHECKOUT] * 3  # the copies of one, then the next
    for r in received:
        verified(r)
    # once (the default): the next payment is reported normally
    pay(stripe_fake)
    receiver.exactly(8, quiet_s=0.2)


def test_delay_holds_a_notification_back(stripe_fake: Fake, receiver: Receiver) -> None:
    stripe_fake.faults(delay_s=1.0, types=[CHECKOUT])
    started = time.monotonic()
    pay(stripe_fake)
    first, second = receiver.wait_for(2)
    assert first.json["type"] == SUCCEEDED and first.at - started < 0.8  # not delayed
    assert second.json["type"] == CHECKOUT and second.at - started >= 1.0


def test_drop_then_redeliver(stripe_fake: Fake, receiver: Receiver) -> None:
    stripe_fake.faults(drop=True)
    intent = pay(stripe_fake)
    until_sync(lambda: len(stripe_fake.dropped()) == 2, 10, "both notifications dropped")
    assert receiver.requests == []
    dropped = stripe_fake.deliveries()
    assert [(a["type"], a["outcome"]) for a in dropped] == [(CHECKOUT, "dropped"), (SUCCEEDED, "dropped")]
    # the provider still lists it (what reconciliation finds)
    with stripe_fake.client() as client:
        listed = client.get("/v1/events", params={"created[gte]": intent["created"]}).json()
    assert {e["id"] for e in listed["data"]} == {a["event_id"] for a in dropped}
    # sent again on demand, signed afresh
    event_id = dropped[1]["event_id"]
    response = httpx.post(f"{stripe_fake.base_url}/_control/redeliver/{event_id}")
    assert response.status_code == 202
    (received,) = receiver.wait_for(1)
    assert verified(received).id == event_id
    assert httpx.post(f"{stripe_fake.base_url}/_control/redeliver/evt_unknown").status_code == 404


def test_reorder_sends_the_intent_before_the_checkout(stripe_fake: Fake, receiver: Receiver) -> None:
    stripe_fake.faults(reorder=True)
    pay(stripe_fake)
    assert [r.json["type"] for r in receiver.wait_for(2)] == [SUCCEEDED, CHECKOUT]
    pay(stripe_fake)  # once: the next in the usual order
    assert [r.json["type"] for r in receiver.wait_for(4)[2:]] == [CHECKOUT, SUCCEEDED]


def test_faults_that_stay_until_cleared(stripe_fake: Fake, receiver: Receiver) -> None:
    stripe_fake.faults(drop=True, once=False)
    pay(stripe_fake)
    pay(stripe_fake)
    until_sync(lambda: len(stripe_fake.dropped()) == 4, 10, "the four notifications dropped")
    assert receiver.requests == []
    assert httpx.delete(f"{stripe_fake.base_url}/_control/faults").status_code == 200
    pay(stripe_fake)
    receiver.wait_for(2)
    assert httpx.post(f"{stripe_fake.base_url}/_control/faults", json={"drop": "maybe"}).status_code == 422


def paged_ids(client: httpx.Client, params: dict[str, Any]) -> list[str]:
    """The ids of every event GET /v1/events lists, page after page (``starting_after``)."""
    ids: list[str] = []
    while True:
        page = client.get("/v1/events", params=params).json()
        ids.extend(e["id"] for e in page["data"])
        if not page["has_more"]:
            return ids
        params = {**params, "starting_after": page["data"][-1]["id"]}


def test_the_events_listing_finds_the_payments(stripe_fake: Fake, receiver: Receiver) -> None:
    since = int(time.time())
    intents = [pay(stripe_fake, 100 + i) for i in range(3)]
    receiver.wait_for(6)
    with stripe_fake.client() as client:
        listed = client.get("/v1/events", params={"created[gte]": since, "limit": 100}).json()
        assert (listed["object"], listed["url"], listed["has_more"]) == ("list", "/v1/events", False)
        assert len(listed["data"]) == 6
        # newest first
        expected = [(i["id"], t) for i in reversed(intents) for t in (SUCCEEDED, CHECKOUT)]
        found = [
            (e["data"]["object"].get("payment_intent") or e["data"]["object"]["id"], e["type"])
            for e in listed["data"]
        ]
        assert found == expected
        # the client's pages: limit and starting_after
        assert len(paged_ids(client, {"created[gte]": since, "limit": 4, "type": SUCCEEDED})) == 3
        assert paged_ids(client, {"created[gte]": since, "limit": 4}) == [e["id"] for e in listed["data"]]
        assert client.get("/v1/events", params={"created[gte]": since + 3600}).json()["data"] == []
        assert (
            client.get("/v1/events", params={"type": "payment_intent.*", "limit": 100}).json()["data"][0][
                "type"
            ]
            == SUCCEEDED
        )
        assert client.get(f"/v1/events/{listed['data'][0]['id']}").json() == listed["data"][0]
        assert client.get("/v1/events", params={"limit": 0}).status_code == 400
        assert client.get("/v1/events", params={"starting_after": "evt_nothing"}).status_code == 404
    assert httpx.get(f"{stripe_fake.base_url}/v1/events").status_code == 401


def test_health(stripe_fake: Fake) -> None:
    assert httpx.get(f"{stripe_fake.base_url}/health").json() == {"status": "ok"}
