"""sms-fake over real HTTP: accepted messages kept for tests, numbers checked as E.164."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from hiwallet.fakes.sms import SmsFakeSettings, create_sms_fake_app
from tests.servers import serve, stop

KEY = "sms_test_key"
PHONE = "+905321234567"


def client_for(settings: SmsFakeSettings) -> Iterator[httpx.Client]:
    base, server, thread = serve(create_sms_fake_app(settings), "sms-fake")
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=10) as client:
            yield client
    finally:
        stop(server, thread)


@pytest.fixture
def sms() -> Iterator[httpx.Client]:
    yield from client_for(SmsFakeSettings(api_key=KEY))


def test_a_message_is_accepted_and_listed_for_its_number_newest_first(sms: httpx.Client) -> None:
    first = sms.post("/v1/sms", json={"to": PHONE, "body": "Your code is 111111"})
    assert first.status_code == 202, first.text
    assert first.json()["id"].startswith("sms_")
    assert first.json()["status"] == "queued"
    assert first.json()["from"] == "HIWALLET"
    sms.post("/v1/sms", json={"to": "+905329999999", "body": "someone else"}).raise_for_status()
    sms.post("/v1/sms", json={"to": PHONE, "body": "Your code is 222222"}).raise_for_status()

    listed = sms.get("/v1/sms", params={"to": PHONE}).json()["data"]
    assert [m["body"] for m in listed] == ["Your code is 222222", "Your code is 111111"]
    assert listed[1]["id"] == first.json()["id"]
    assert len(sms.get("/v1/sms").json()["data"]) == 3
    assert [m["body"] for m in sms.get("/v1/sms", params={"limit": 1}).json()["data"]] == [
        "Your code is 222222"
    ]
    assert sms.get(f"/v1/sms/{first.json()['id']}").json()["body"] == "Your code is 111111"


@pytest.mark.parametrize(
    "to", ["05321234567", "905321234567", "+0532123456", "+90 532 123 45 67", "+1234567", ""]
)
def test_a_number_not_in_e164_is_refused_without_echoing_it(sms: httpx.Client, to: str) -> None:
    response = sms.post("/v1/sms", json={"to": to, "body": "x"})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "to"
    assert response.json()["code"] == "invalid_phone_number"
    assert to not in response.text or to == ""
    assert sms.get("/v1/sms").json()["data"] == []


def test_an_empty_or_too_long_body_is_refused() -> None:
    for sms in client_for(SmsFakeSettings(api_key=KEY, max_body_chars=20)):
        empty = sms.post("/v1/sms", json={"to": PHONE, "body": ""})
        assert (empty.status_code, empty.json()["field"]) == (422, "body")
        long = sms.post("/v1/sms", json={"to": PHONE, "body": "x" * 21})
        assert (long.status_code, long.json()["code"]) == (422, "body_too_long")
        assert sms.post("/v1/sms", json={"to": PHONE, "body": "x" * 20}).status_code == 202


def test_the_api_key_is_required(sms: httpx.Client) -> None:
    assert (
        sms.post(
            "/v1/sms", json={"to": PHONE, "body": "x"}, headers={"Authorization": "Bearer no"}
        ).status_code
        == 401
    )
    assert sms.get("/v1/sms", headers={"Authorization": ""}).status_code == 401


def test_an_idempotency_key_sends_once(sms: httpx.Client) -> None:
    headers = {"Idempotency-Key": "otp-1"}
    first = sms.post("/v1/sms", json={"to": PHONE, "body": "code 1"}, headers=headers)
    again = sms.post("/v1/sms", json={"to": PHONE, "body": "code 1"}, headers=headers)
    assert again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    other = sms.post("/v1/sms", json={"to": PHONE, "body": "code 2"}, headers=headers)
    assert (other.status_code, other.json()["code"]) == (422, "idempotency_key_reused")
    assert len(sms.get("/v1/sms").json()["data"]) == 1


def test_memory_is_bounded_and_can_be_cleared() -> None:
    for sms in client_for(SmsFakeSettings(api_key=KEY, max_messages=2)):
        for n in range(3):
            sms.post("/v1/sms", json={"to": PHONE, "body": f"m{n}"}).raise_for_status()
        assert [m["body"] for m in sms.get("/v1/sms").json()["data"]] == ["m2", "m1"]
        assert sms.delete("/v1/sms").status_code == 204
        assert sms.get("/v1/sms").json()["data"] == []
