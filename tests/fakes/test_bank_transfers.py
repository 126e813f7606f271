"""bank-fake's outgoing transfers: 202 pending with the bank's reference, the Idempotency-Key
honoured, the outcome decided later and reported by a callback the official standardwebhooks
package verifies, retried until a 2xx; the rules that bend one test's transfers and no other's."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from schwifty import IBAN
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.fakes.conftest import (
    BANK_KEY,
    BANK_SECRET,
    FAILED_TWICE_THEN_DELIVERED,
    Fake,
    Received,
    Receiver,
    fake_settings,
)
from tests.waiting import stays_sync, until_sync

TRANSFER_FIELDS = {
    "reference", "client_reference", "status", "amount_minor", "currency", "destination_iban", "description",
    "failure_reason", "created_at", "decided_at",
}  # fmt: skip
_accounts = itertools.count(1)


def new_iban() -> str:
    """A valid Turkish IBAN no other test uses (rules are matched on it)."""
    return str(IBAN.generate("TR", bank_code="00061", account_code=f"{next(_accounts) + 7_000:016d}"))


@pytest.fixture
def bank_settings(receiver: Receiver, bank_overrides: dict[str, Any]) -> dict[str, Any]:
    """Transfers' callbacks to the receiver too (its URL with a mark, to tell them from the wires'
    notifications), decided quickly."""
    return {
        **fake_settings(receiver, BANK_SECRET, BANK_KEY, {}),
        "transfer_callback_url": f"{receiver.url}?to=bank-webhook",
        "transfer_decide_after_s": 0.05,
        **bank_overrides,
    }


@pytest.fixture
def client(bank_fake: Fake) -> Iterator[httpx.Client]:
    with bank_fake.client() as c:
        yield c


def transfer(
    client: httpx.Client,
    iban: str,
    amount_minor: int = 25_000,
    key: str | None = None,
    **fields: Any,
) -> httpx.Response:
    body = {"amount_minor": amount_minor, "currency": "TRY", "destination_iban": iban, **fields}
    headers = {"Idempotency-Key": key or f"withdrawal:{time.monotonic_ns()}:bank"}
    return client.post("/v1/transfers", json=body, headers=headers)


def started(client: httpx.Client, iban: str, amount_minor: int = 25_000, **fields: Any) -> dict[str, Any]:
    response = transfer(client, iban, amount_minor, **fields)
    assert response.status_code == 202, response.text
    return dict(response.json())


def rule(fake: Fake, **fields: Any) -> dict[str, Any]:
    response = httpx.post(f"{fake.base_url}/_control/transfers", json=fields, timeout=10)
    assert response.status_code == 201, response.text
    return dict(response.json())


def status(client: httpx.Client, reference: str) -> dict[str, Any]:
    response = client.get(f"/v1/transfers/{reference}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def verify(received: Received) -> Any:
    """The callback as the official package reads it (it raises on any bad signature)."""
    return Webhook(BANK_SECRET).verify(received.body, received.headers)


def wait_status(client: httpx.Client, reference: str, timeout_s: float = 5.0) -> dict[str, Any]:
    def decided() -> dict[str, Any] | None:
        current = status(client, reference)
        return None if current["status"] == "pending" else current

    return until_sync(decided, timeout_s, f"{reference} decided")


def test_a_transfer_is_pending_then_succeeds_and_the_callback_verifies(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, delay_s=0.6)
    key = "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0001:bank"
    response = transfer(client, iban, 25_000, key=key, description="HiWallet withdrawal")
    assert response.status_code == 202
    accepted = response.json()
    assert set(accepted) == TRANSFER_FIELDS
    assert accepted["reference"].startswith("trf_")
    assert response.headers["location"] == f"/v1/transfers/{accepted['reference']}"
    assert "idempotent-replayed" not in response.headers
    assert (
        accepted["status"],
        accepted["client_reference"],
        accepted["amount_minor"],
        accepted["currency"],
    ) == (
        "pending",
        key,
        25_000,
        "TRY",
    )
    assert accepted["destination_iban"] == iban
    assert (accepted["failure_reason"], accepted["decided_at"]) == (None, None)

    assert status(client, accepted["reference"]) == accepted  # before the outcome: pending
    assert receiver.requests == []

    (received,) = receiver.wait_for(1)
    payload = verify(received)
    assert received.headers["webhook-id"].startswith("msg_")
    assert payload["type"] == "transfer.succeeded"
    data = payload["data"]
    assert set(data) == TRANSFER_FIELDS
    assert (data["reference"], data["client_reference"], data["status"], data["failure_reason"]) == (
        accepted["reference"],
        key,
        "succeeded",
        None,
    )
    assert (data["amount_minor"], data["currency"]) == (25_000, "TRY")
    assert data["decided_at"] is not None
    assert status(client, accepted["reference"]) == data  # after the outcome: as the callback said
    (attempt,) = bank_fake.deliveries(received.headers["webhook-id"])
    assert (attempt["type"], attempt["url"], attempt["outcome"]) == (
        "transfer.succeeded",
        f"{receiver.url}?to=bank-webhook",  # transfer_callback_url, not the wires' webhook_url
        "delivered",
    )
    # the signature covers the body and the id
    with pytest.raises(WebhookVerificationError):
        Webhook(BANK_SECRET).verify(received.body.replace(b"succeeded", b"failed"), received.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(BANK_SECRET).verify(received.body, {**received.headers, "webhook-id": "msg_other"})


def test_the_callback_url_default_is_bank_webhook() -> None:
    from hiwallet.fakes.bank import BankFakeSettings

    assert BankFakeSettings().transfer_callback_url == "http://127.0.0.1:8021/v1/webhooks/bank"


def test_the_same_key_and_body_get_the_same_answer_and_another_body_a_422(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, outcome="hold")
    first = transfer(client, iban, 10_000, key="k-1")
    assert first.status_code == 202
    # the same request (the IBAN in print form is the same IBAN): the same answer, replayed
    again = transfer(client, IBAN(iban).formatted, 10_000, key="k-1")
    assert (again.status_code, again.json()) == (202, first.json())
    assert again.headers["idempotent-replayed"] == "true"
    for other in ({"amount_minor": 10_001}, {"currency": "EUR"}, {"description": "else"}):
        body = {"amount_minor": 10_000, "currency": "TRY", "destination_iban": iban, **other}
        refused = client.post("/v1/transfers", json=body, headers={"Idempotency-Key": "k-1"})
        assert refused.status_code == 422, other
        assert refused.headers["content-type"] == "application/problem+json"
        assert (refused.json()["code"], refused.json()["field"]) == (
            "idempotency_conflict",
            "Idempotency-Key",
        )
    assert transfer(client, new_iban(), 10_000, key="k-1").status_code == 422
    assert list(bank_fake.app.state.fake.transfers) == [first.json()["reference"]]

    # decided: the replay is still the first answer (the status is GET's business), one callback
    reference = first.json()["reference"]
    decide = httpx.post(
        f"{bank_fake.base_url}/_control/transfers/{reference}/decide", json={"outcome": "accept"}
    )
    assert decide.status_code == 200
    assert transfer(client, iban, 10_000, key="k-1").json() == first.json()
    receiver.exactly(1, quiet_s=0.3)


def test_concurrent_requests_with_one_key_make_one_transfer(bank_fake: Fake, receiver: Receiver) -> None:
    iban = new_iban()
    answers: list[dict[str, Any]] = []

    def post() -> None:
        with bank_fake.client() as c:
            response = transfer(c, iban, 777, key="same-key-concurrently")
            assert response.status_code == 202
            answers.append(response.json())

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8 and len({a["reference"] for a in answers}) == 1
    assert len(bank_fake.app.state.fake.transfers) == 1
    receiver.exactly(1, quiet_s=0.3)


def test_the_request_is_checked(bank_fake: Fake, client: httpx.Client, receiver: Receiver) -> None:
    iban = new_iban()
    body = {"amount_minor": 100, "currency": "TRY", "destination_iban": iban}
    assert (
        httpx.post(
            f"{bank_fake.base_url}/v1/transfers", json=body, headers={"Idempotency-Key": "a"}
        ).status_code
        == 401
    )
    missing = client.post("/v1/transfers", json=body)
    assert (missing.status_code, missing.json()["code"], missing.json()["field"]) == (
        400,
        "idempotency_key_missing",
        "Idempotency-Key",
    )
    bad_key = client.post("/v1/transfers", json=body, headers={"Idempotency-Key": "x" * 256})
    assert (bad_key.status_code, bad_key.json()["code"]) == (400, "invalid_parameter")
    for bad_iban in ("TR33 0006 1005 1978 6457 8413 27", "XX00 1234", "DE00370400440532013000"):
        refused = transfer(client, bad_iban, 100)
        assert refused.status_code == 422
        assert refused.headers["content-type"] == "application/problem+json"
        assert (refused.json()["code"], refused.json()["field"]) == ("invalid_iban", "destination_iban")
        assert bad_iban not in refused.text and bad_iban.replace(" ", "") not in refused.text
    invalid = client.post(
        "/v1/transfers", json={"amount_minor": 0, "currency": "TL1"}, headers={"Idempotency-Key": "b"}
    )
    assert invalid.status_code == 422
    assert {e["field"] for e in invalid.json()["errors"]} == {"amount_minor", "currency", "destination_iban"}
    not_json = client.post(
        "/v1/transfers", content=b"{", headers={"Idempotency-Key": "c", "content-type": "application/json"}
    )
    assert (not_json.status_code, not_json.json()["code"]) == (400, "invalid_json")
    assert client.get("/v1/transfers/trf_nope").status_code == 404
    assert httpx.get(f"{bank_fake.base_url}/v1/transfers/trf_nope").status_code == 401
    receiver.none_within(0.2)
    assert bank_fake.app.state.fake.transfers == {}


def test_a_rejected_transfer_fails_with_its_reason(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, outcome="reject", failure_reason="AC04 account closed")
    accepted = started(client, iban)
    assert accepted["status"] == "pending"  # a rejection comes later, as at a bank
    (received,) = receiver.wait_for(1)
    payload = verify(received)
    assert payload["type"] == "transfer.failed"
    assert (payload["data"]["status"], payload["data"]["failure_reason"]) == ("failed", "AC04 account closed")
    assert status(client, accepted["reference"]) == payload["data"]


def test_a_delayed_transfer_stays_pending_until_its_time(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, delay_s=1.0)
    begun = time.monotonic()
    accepted = started(client, iban)
    stays_sync(
        lambda: status(client, accepted["reference"])["status"] == "pending" and not receiver.requests,
        0.5,
        "pending, nothing reported",
        interval_s=0.05,
    )
    (received,) = receiver.wait_for(1)
    assert received.at - begun >= 1.0
    assert verify(received)["data"]["status"] == "succeeded"


def test_a_late_callback_comes_after_the_status_is_final(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, callback_delay_s=1.0)
    accepted = started(client, iban)
    decided = wait_status(client, accepted["reference"])
    assert decided["status"] == "succeeded"
    assert receiver.requests == []  # what reconciliation would find before the callback
    (received,) = receiver.wait_for(1)
    assert verify(received)["data"] == decided
    # by the fake's own clock: the first attempt answered at least the delay after the decision
    (attempt,) = bank_fake.deliveries(received.headers["webhook-id"])
    waited = datetime.fromisoformat(attempt["at"]) - datetime.fromisoformat(decided["decided_at"])
    assert waited >= timedelta(seconds=1.0)


def test_a_lost_callback_still_decides_and_can_be_redelivered(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, outcome="reject", failure_reason="AM04", lose_callback=True)
    accepted = started(client, iban)
    decided = wait_status(client, accepted["reference"])
    assert (decided["status"], decided["failure_reason"]) == ("failed", "AM04")
    (dropped,) = until_sync(bank_fake.dropped, 10, "the callback dropped")
    assert receiver.requests == []
    assert dropped["type"] == "transfer.failed"
    assert httpx.post(f"{bank_fake.base_url}/_control/redeliver/{dropped['event_id']}").status_code == 202
    (redelivered,) = receiver.wait_for(1)
    assert redelivered.headers["webhook-id"] == dropped["event_id"]
    assert verify(redelivered)["data"] == decided


def test_a_duplicated_callback_keeps_its_id(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, duplicate_callback=3)
    started(client, iban)
    copies = receiver.exactly(3, quiet_s=0.3)
    assert len({r.headers["webhook-id"] for r in copies}) == 1
    assert len({r.body for r in copies}) == 1
    for received in copies:
        verify(received)


def test_a_duplicated_callback_after_a_gap(bank_fake: Fake, client: httpx.Client, receiver: Receiver) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, duplicate_callback=2, duplicate_gap_s=2.0)
    started(client, iban)
    first, second = receiver.exactly(2, quiet_s=0.3)
    # Not at once. Both copies are planned from one start, 2 s apart; a loaded machine may deliver
    # the first late, shortening the gap seen (0.50 s seen in CI with a 0.8 s plan).
    assert second.at - first.at >= 0.5
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert verify(first) == verify(second)


def test_a_duplicated_callback_with_distinct_ids(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(
        bank_fake, destination_iban=iban, outcome="reject", duplicate_callback=2, duplicate_distinct_ids=True
    )
    accepted = started(client, iban)
    copies = receiver.exactly(2, quiet_s=0.3)
    assert len({r.headers["webhook-id"] for r in copies}) == 2
    payloads = [verify(r) for r in copies]
    assert {p["data"]["reference"] for p in payloads} == {accepted["reference"]}
    assert {p["type"] for p in payloads} == {"transfer.failed"}


def test_the_callback_is_retried_until_a_2xx(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    receiver.respond = lambda _r, seen: 500 if len(seen) <= 2 else 202
    accepted = started(client, new_iban())
    attempts = receiver.exactly(3, quiet_s=0.4)
    assert len({r.headers["webhook-id"] for r in attempts}) == 1
    for received in attempts:
        assert verify(received)["data"]["reference"] == accepted["reference"]
    assert bank_fake.attempts(attempts[0].headers["webhook-id"]) == FAILED_TWICE_THEN_DELIVERED


def test_a_held_transfer_waits_for_its_decision(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    iban = new_iban()
    rule(bank_fake, destination_iban=iban, outcome="hold")
    accepted = started(client, iban)
    stays_sync(
        lambda: status(client, accepted["reference"])["status"] == "pending" and not receiver.requests,
        0.3,
        "pending, nothing reported",
        interval_s=0.05,
    )
    url = f"{bank_fake.base_url}/_control/transfers/{accepted['reference']}/decide"
    decided = httpx.post(url, json={"outcome": "reject", "failure_reason": "RR04"})
    assert decided.status_code == 200
    assert (decided.json()["status"], decided.json()["failure_reason"]) == ("failed", "RR04")
    (received,) = receiver.wait_for(1)
    assert verify(received)["data"] == decided.json() == status(client, accepted["reference"])
    again = httpx.post(url, json={"outcome": "accept"})
    assert (again.status_code, again.json()["code"]) == (409, "already_decided")
    assert (
        httpx.post(
            f"{bank_fake.base_url}/_control/transfers/trf_nope/decide", json={"outcome": "accept"}
        ).status_code
        == 404
    )
    assert httpx.post(url, json={"outcome": "maybe"}).status_code == 422


def test_rules_touch_only_their_transfers(bank_fake: Fake, client: httpx.Client, receiver: Receiver) -> None:
    mine, other = new_iban(), new_iban()
    # the more specific rule first: it must win by being specific, not by being the newest
    exact = rule(
        bank_fake, destination_iban=mine, amount_minor=4_242, outcome="reject", failure_reason="exact"
    )
    catch_all = rule(bank_fake, outcome="reject", failure_reason="everything", amount_minor=4_242)
    once = rule(bank_fake, destination_iban=mine, outcome="reject", failure_reason="once", times=1)
    assert once["matched"] == 0 and once["destination_iban"] == mine

    untouched = started(client, other, 100)  # no rule matches: accepted
    first = started(client, mine, 100)  # the IBAN rule, once
    second = started(client, mine, 100)  # no rule left for it: accepted
    by_amount = started(client, other, 4_242)  # the amount rule
    most_specific = started(client, mine, 4_242)  # IBAN and amount beat amount alone
    receiver.wait_for(5)
    outcomes = {
        name: (t["status"], t["failure_reason"])
        for name, t in {
            "untouched": wait_status(client, untouched["reference"]),
            "first": wait_status(client, first["reference"]),
            "second": wait_status(client, second["reference"]),
            "by_amount": wait_status(client, by_amount["reference"]),
            "most_specific": wait_status(client, most_specific["reference"]),
        }.items()
    }
    assert outcomes == {
        "untouched": ("succeeded", None),
        "first": ("failed", "once"),
        "second": ("succeeded", None),
        "by_amount": ("failed", "everything"),
        "most_specific": ("failed", "exact"),
    }
    rules = httpx.get(f"{bank_fake.base_url}/_control/transfers").json()["data"]
    assert [(r["id"], r["matched"]) for r in rules] == [
        (exact["id"], 1),
        (catch_all["id"], 1),
    ]  # once: used up
    assert httpx.delete(f"{bank_fake.base_url}/_control/transfers/{exact['id']}").status_code == 204
    assert httpx.delete(f"{bank_fake.base_url}/_control/transfers/{exact['id']}").status_code == 404
    assert httpx.delete(f"{bank_fake.base_url}/_control/transfers").status_code == 204
    assert httpx.get(f"{bank_fake.base_url}/_control/transfers").json() == {"data": []}
    # a rule's IBAN is checked, its fields are known ones
    bad = httpx.post(f"{bank_fake.base_url}/_control/transfers", json={"destination_iban": "TR00 1"})
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_iban")
    assert (
        httpx.post(f"{bank_fake.base_url}/_control/transfers", json={"outcom": "reject"}).status_code == 422
    )


def test_the_wires_faults_do_not_bend_transfer_callbacks(
    bank_fake: Fake, client: httpx.Client, receiver: Receiver
) -> None:
    bank_fake.faults(drop=True, once=False)
    accepted = started(client, new_iban())
    (received,) = receiver.wait_for(1)
    assert verify(received)["data"]["reference"] == accepted["reference"]
    assert [a["outcome"] for a in bank_fake.deliveries()] == ["delivered"]


def test_the_listing_finds_transfers(bank_fake: Fake, client: httpx.Client, receiver: Receiver) -> None:
    held, iban = new_iban(), new_iban()
    rule(bank_fake, destination_iban=held, outcome="hold")
    transfers = [started(client, iban, 100 + i) for i in range(4)]
    pending = started(client, held, 999)
    receiver.wait_for(4)
    for t in transfers:
        wait_status(client, t["reference"])
    everything = client.get("/v1/transfers").json()
    assert [t["reference"] for t in everything["data"]] == [t["reference"] for t in [*transfers, pending]]
    assert everything["next_cursor"] is None
    paged: list[str] = []
    params: dict[str, Any] = {"limit": 2, "status": "succeeded"}
    while True:
        page = client.get("/v1/transfers", params=params).json()
        paged.extend(t["reference"] for t in page["data"])
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert paged == [t["reference"] for t in transfers]
    only_pending = client.get("/v1/transfers", params={"status": "pending"}).json()["data"]
    assert [t["reference"] for t in only_pending] == [pending["reference"]]
    by_key = client.get("/v1/transfers", params={"client_reference": transfers[2]["client_reference"]}).json()
    assert [t["reference"] for t in by_key["data"]] == [transfers[2]["reference"]]
    later = client.get("/v1/transfers", params={"since": transfers[3]["created_at"]}).json()["data"]
    assert [t["reference"] for t in later] == [transfers[3]["reference"], pending["reference"]]
    assert client.get("/v1/transfers", params={"status": "lost"}).status_code == 400
    assert client.get("/v1/transfers", params={"cursor": "nonsense!"}).status_code == 400
    wire_cursor = "dzox"  # a wire listing's cursor ("w:1") is not a transfer listing's
    assert client.get("/v1/transfers", params={"cursor": wire_cursor}).status_code == 400
    assert httpx.get(f"{bank_fake.base_url}/v1/transfers").status_code == 401
