"""bank-fake: Standard Webhooks notifications the standardwebhooks package verifies; IBANs and
TCKNs checked by the libraries made for them."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.fakes.conftest import (
    BANK_SECRET,
    BANK_SECRET_NEW,
    FAILED_TWICE_THEN_DELIVERED,
    Fake,
    Received,
    Receiver,
)
from tests.waiting import until_sync

SENDER_IBAN = "DE89 3704 0044 0532 0130 00"
TCKN = "10000000146"
WALLET = "0421:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000"


def wire(fake: Fake, amount_minor: int = 50_000, **fields: Any) -> httpx.Response:
    body = {
        "sender_name": "Ayşe Yılmaz",
        "sender_iban": SENDER_IBAN,
        "reference": f"HiWallet top-up {WALLET}",
        "amount_minor": amount_minor,
        "currency": "TRY",
        **fields,
    }
    with fake.client() as client:
        return client.post("/v1/topups", json=body)


def received_wire(fake: Fake, amount_minor: int = 50_000, **fields: Any) -> dict[str, Any]:
    response = wire(fake, amount_minor, **fields)
    assert response.status_code == 200, response.text
    return dict(response.json())


def verify(received: Received, secret: str = BANK_SECRET) -> Any:
    return Webhook(secret).verify(received.body, received.headers)


def test_a_wire_is_reported_and_the_standardwebhooks_package_accepts_it(
    bank_fake: Fake, receiver: Receiver
) -> None:
    booked = received_wire(bank_fake, sender_tckn=TCKN)
    assert booked["id"].startswith("wire_")
    assert booked["status"] == "received"
    assert booked["sender_iban"] == "DE89370400440532013000"  # electronic form
    assert booked["receiver_iban"] == "TR420006100000000012345678"  # our account (settings)
    assert booked["sender_tckn"] == TCKN
    (received,) = receiver.wait_for(1)
    payload = verify(received)
    assert received.headers["webhook-id"].startswith("msg_")
    assert received.headers["webhook-signature"].startswith("v1,")
    assert payload["type"] == "incoming_wire.received"
    assert datetime.fromisoformat(payload["timestamp"]).tzinfo is not None
    assert payload["data"] == booked
    assert set(payload["data"]) == {
        "id", "status", "amount_minor", "currency", "sender_name", "sender_iban", "sender_tckn", "reference",
        "receiver_iban", "received_at",
    }  # fmt: skip
    assert [(a["event_id"], a["status"]) for a in bank_fake.deliveries()] == [
        (received.headers["webhook-id"], 202)
    ]


@pytest.mark.parametrize("bank_overrides", [{"signing_secrets": [BANK_SECRET, BANK_SECRET_NEW]}])
def test_rotation_signs_with_every_secret(bank_fake: Fake, receiver: Receiver) -> None:
    received_wire(bank_fake)
    (received,) = receiver.wait_for(1)
    assert len(received.headers["webhook-signature"].split(" ")) == 2
    assert verify(received, BANK_SECRET)["type"] == verify(received, BANK_SECRET_NEW)["type"]
    with pytest.raises(WebhookVerificationError):
        verify(received, "whsec_c29tZS1vdGhlci1zZWNyZXQtYWx0b2dldGhlcg==")


def test_a_changed_body_is_refused_by_the_standardwebhooks_package(
    bank_fake: Fake, receiver: Receiver
) -> None:
    received_wire(bank_fake, 50_000)
    (received,) = receiver.wait_for(1)
    tampered = received.body.replace(b'"amount_minor": 50000', b'"amount_minor": 5000000')
    assert tampered != received.body
    with pytest.raises(WebhookVerificationError):
        Webhook(BANK_SECRET).verify(tampered, received.headers)
    with pytest.raises(WebhookVerificationError):  # the id is signed too
        Webhook(BANK_SECRET).verify(received.body, {**received.headers, "webhook-id": "msg_other"})


@pytest.mark.parametrize("bank_overrides", [{"retry_initial_s": 0.6, "retry_max_delay_s": 5.0}])
def test_retries_keep_the_id_and_sign_afresh(bank_fake: Fake, receiver: Receiver) -> None:
    receiver.respond = lambda _r, seen: 500 if len(seen) <= 2 else 202
    received_wire(bank_fake)
    attempts = receiver.exactly(3, quiet_s=0.3, timeout_s=15)
    assert len({r.headers["webhook-id"] for r in attempts}) == 1  # the same message id
    assert len({r.body for r in attempts}) == 1
    for received in attempts:
        verify(received)
    stamps = [int(r.headers["webhook-timestamp"]) for r in attempts]
    assert stamps == sorted(stamps) and stamps[2] > stamps[0]
    assert bank_fake.attempts() == FAILED_TWICE_THEN_DELIVERED


@pytest.mark.parametrize("bank_overrides", [{"retry_attempts": 4}])
def test_retries_are_bounded(bank_fake: Fake, receiver: Receiver) -> None:
    receiver.respond = lambda _r, _all: 503
    received_wire(bank_fake)
    receiver.exactly(4, quiet_s=0.8)
    assert [a["outcome"] for a in bank_fake.deliveries()] == ["retry", "retry", "retry", "gave_up"]


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ({"sender_iban": "TR33 0006 1005 1978 6457 8413 27"}, "invalid_iban", "sender_iban"),  # checksum
        ({"sender_iban": "XX00 1234"}, "invalid_iban", "sender_iban"),
        ({"receiver_iban": "DE00370400440532013000"}, "invalid_iban", "receiver_iban"),
        ({"sender_tckn": "12345678901"}, "invalid_tckn", "sender_tckn"),
        ({"sender_tckn": "1234"}, "invalid_tckn", "sender_tckn"),
    ],
)
def test_an_invalid_iban_or_tckn_is_refused(
    bank_fake: Fake, receiver: Receiver, fields: dict[str, str], code: str, field: str
) -> None:
    response = wire(bank_fake, **fields)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert (problem["status"], problem["code"], problem["field"]) == (400, code, field)
    assert fields[field] not in response.text  # the refused value is not echoed
    receiver.none_within(0.2)
    assert bank_fake.app.state.fake.wires == {}


def test_the_api_wants_its_key_and_valid_fields(bank_fake: Fake) -> None:
    assert httpx.post(f"{bank_fake.base_url}/v1/topups", json={}).status_code == 401
    with bank_fake.client() as client:
        refused = client.post("/v1/topups", json={"sender_name": "A", "amount_minor": 0, "currency": "TRY"})
        assert refused.status_code == 400
        problem = refused.json()
        assert problem["code"] == "invalid_request"
        assert {e["field"] for e in problem["errors"]} == {"sender_iban", "amount_minor"}
        assert (
            client.post("/v1/topups", content=b"{", headers={"content-type": "application/json"}).status_code
            == 400
        )
    # the same Idempotency-Key: the same wire, reported once
    headers = {"Idempotency-Key": "wire-1"}
    body = {
        "sender_name": "A",
        "sender_iban": SENDER_IBAN,
        "reference": "r",
        "amount_minor": 5,
        "currency": "try",
    }
    with bank_fake.client() as client:
        first = client.post("/v1/topups", json=body, headers=headers).json()
        assert client.post("/v1/topups", json=body, headers=headers).json() == first
        assert client.post("/v1/topups", json={**body, "amount_minor": 6}, headers=headers).status_code == 409
    assert first["currency"] == "TRY"
    assert len(bank_fake.app.state.fake.wires) == 1


def test_the_listing_finds_the_wires(bank_fake: Fake, receiver: Receiver) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    wires = [received_wire(bank_fake, 100 + i) for i in range(5)]
    receiver.wait_for(5)
    with bank_fake.client() as client:
        everything = client.get("/v1/incoming-wires", params={"since": before.isoformat()}).json()
        assert [w["id"] for w in everything["data"]] == [w["id"] for w in wires]  # oldest first
        assert everything["next_cursor"] is None
        paged: list[str] = []
        params: dict[str, Any] = {"since": before.isoformat(), "limit": 2}
        while True:
            page = client.get("/v1/incoming-wires", params=params).json()
            paged.extend(w["id"] for w in page["data"])
            if page["next_cursor"] is None:
                break
            params["cursor"] = page["next_cursor"]
        assert paged == [w["id"] for w in wires]
        later = datetime.fromisoformat(wires[3]["received_at"])
        assert [
            w["id"]
            for w in client.get("/v1/incoming-wires", params={"since": later.isoformat()}).json()["data"]
        ] == [w["id"] for w in wires[3:]]
        assert client.get(f"/v1/incoming-wires/{wires[0]['id']}").json() == wires[0]
        assert client.get("/v1/incoming-wires", params={"cursor": "nonsense!"}).status_code == 400
        assert client.get("/v1/incoming-wires", params={"since": "yesterday"}).status_code == 400
        assert client.get("/v1/incoming-wires", params={"limit": 501}).status_code == 400
    assert httpx.get(f"{bank_fake.base_url}/v1/incoming-wires").status_code == 401


def test_one_wire_carries_its_senders_identity_number(bank_fake: Fake, receiver: Receiver) -> None:
    # what onboarding reads for the first wire -> verified: the sender's TCKN, as Turkish banks'
    # notifications give it (checked), or null when the sender's bank sent none
    sent = received_wire(bank_fake, sender_tckn=TCKN)
    without = received_wire(bank_fake)
    receiver.wait_for(2)
    with bank_fake.client() as client:
        one = client.get(f"/v1/incoming-wires/{sent['id']}").json()
        assert (one["sender_tckn"], one["sender_name"], one["sender_iban"]) == (
            TCKN,
            "Ayşe Yılmaz",
            "DE89370400440532013000",
        )
        assert client.get(f"/v1/incoming-wires/{without['id']}").json()["sender_tckn"] is None
        missing = client.get("/v1/incoming-wires/wire_nothere")
        assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    assert httpx.get(f"{bank_fake.base_url}/v1/incoming-wires/{sent['id']}").status_code == 401


def test_duplicate_delay_drop_and_redeliver(bank_fake: Fake, receiver: Receiver) -> None:
    bank_fake.faults(duplicate=5)
    received_wire(bank_fake)
    copies = receiver.wait_for(5)
    assert len({r.headers["webhook-id"] for r in copies}) == 1
    for received in copies:
        verify(received)
    receiver.requests.clear()

    bank_fake.faults(delay_s=0.8)
    started = time.monotonic()
    received_wire(bank_fake)
    (delayed,) = receiver.wait_for(1)
    assert delayed.at - started >= 0.8
    receiver.requests.clear()

    bank_fake.faults(drop=True)
    booked = received_wire(bank_fake)
    (dropped,) = until_sync(bank_fake.dropped, 10, "the notification dropped")
    assert receiver.requests == []
    assert httpx.post(f"{bank_fake.base_url}/_control/redeliver/{dropped['event_id']}").status_code == 202
    (redelivered,) = receiver.wait_for(1)
    assert redelivered.headers["webhook-id"] == dropped["event_id"]
    assert verify(redelivered)["data"]["id"] == booked["id"]


def test_reorder_holds_a_wire_back_until_the_next(bank_fake: Fake, receiver: Receiver) -> None:
    bank_fake.faults(reorder=True)
    first = received_wire(bank_fake, 1)
    receiver.none_within(0.3)  # held back
    second = received_wire(bank_fake, 2)
    assert [json.loads(r.body)["data"]["id"] for r in receiver.wait_for(2)] == [second["id"], first["id"]]


@pytest.mark.parametrize("bank_overrides", [{"reorder_hold_s": 0.3}])
def test_a_held_wire_goes_out_after_a_while_alone(bank_fake: Fake, receiver: Receiver) -> None:
    bank_fake.faults(reorder=True)
    started = time.monotonic()
    received_wire(bank_fake)
    (received,) = receiver.wait_for(1)
    assert received.at - started >= 0.3


def test_health(bank_fake: Fake) -> None:
    assert httpx.get(f"{bank_fake.base_url}/health").json() == {"status": "ok"}
