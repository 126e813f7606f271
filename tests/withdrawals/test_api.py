"""POST /v1/withdrawals, GET by id and the wallet's list: validation, idempotency, what is
written (the saga, its history, its first command in the outbox), visibility."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import asyncpg
import httpx
import orjson

from hiwallet.contracts.withdrawals import DebitForWithdrawal, command_id
from tests.withdrawals.conftest import (
    BAD_IBAN,
    IBAN,
    PROBLEM,
    STAFF_ISSUER,
    WalletApiStub,
    customer,
    key_header,
    token,
    withdrawal,
)


async def test_a_request_is_kept_with_its_first_command_and_answered_202(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    c = customer()
    response = await client.post(
        "/v1/withdrawals",
        json=withdrawal(c, amount=12_345, iban="TR33 0006 1005 1978 6457 8413 26"),
        headers={**c.auth, **key_header()},
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/withdrawals/{body['id']}"
    assert body["state"] == "initiated"
    assert body["wallet"] == c.wallet
    assert body["amount_minor"] == 12_345
    assert body["currency"] == "TRY"
    # masked: the country and the last four characters, nothing else of the number
    assert body["destination_iban"] == "TR** **** **** 1326"
    assert IBAN not in response.text
    saga = await owner.fetchrow("SELECT * FROM withdrawal.sagas WHERE id = $1", body["id"])
    assert saga["destination_iban"] == IBAN  # kept in its electronic form
    assert saga["requested_by_subject"] == c.subject
    history = await owner.fetch("SELECT from_state, to_state, actor FROM withdrawal.transitions")
    assert [tuple(r) for r in history] == [(None, "initiated", f"customer:{c.subject}")]
    rows = await owner.fetch("SELECT * FROM withdrawal.outbox")
    assert len(rows) == 1
    row = rows[0]
    assert (row["exchange"], row["routing_key"], row["message_type"]) == (
        "hiwallet.withdrawals",
        "DebitForWithdrawal",
        "DebitForWithdrawal",
    )
    debit = DebitForWithdrawal.model_validate(orjson.loads(row["body"]))
    assert debit.command_id == command_id(body["id"], "debit")
    assert debit.saga_id == body["id"]
    assert (debit.wallet, debit.amount_minor, debit.currency) == (c.wallet, 12_345, "TRY")
    assert debit.requested_by.subject == c.subject
    assert debit.requested_by.issuer.endswith("/realms/hiwallet")
    assert orjson.loads(row["headers"])["x-hiwallet-correlation-id"] == body["id"]


async def test_the_same_key_answers_the_first_answer_and_another_body_is_422(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    c = customer()
    headers = {**c.auth, **key_header()}
    first = await client.post("/v1/withdrawals", json=withdrawal(c), headers=headers)
    again = await client.post("/v1/withdrawals", json=withdrawal(c), headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    other = await client.post("/v1/withdrawals", json=withdrawal(c, amount=999), headers=headers)
    assert other.status_code == 422
    assert other.json()["type"] == f"{PROBLEM}idempotency-key-reused"
    # the key is the caller's: another customer's same key is another request
    d = customer()
    theirs = await client.post(
        "/v1/withdrawals",
        json=withdrawal(d),
        headers={**d.auth, "Idempotency-Key": headers["Idempotency-Key"]},
    )
    assert theirs.status_code == 202
    assert theirs.json()["id"] != first.json()["id"]
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.sagas") == 2
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.outbox") == 2


async def test_the_same_key_at_once_makes_one_saga(
    client: httpx.AsyncClient, owner: asyncpg.Connection
) -> None:
    c = customer()
    headers = {**c.auth, **key_header()}
    responses = await asyncio.gather(
        *(client.post("/v1/withdrawals", json=withdrawal(c), headers=headers) for _ in range(8))
    )
    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) <= {202, 409}, statuses
    ids = {r.json()["id"] for r in responses if r.status_code == 202}
    assert len(ids) == 1
    for r in responses:
        if r.status_code == 409:
            assert r.json()["type"] == f"{PROBLEM}idempotency-in-progress"
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.sagas") == 1
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.outbox") == 1


async def test_what_is_refused_writes_nothing(client: httpx.AsyncClient, owner: asyncpg.Connection) -> None:
    c = customer()
    cases = [
        ({}, withdrawal(c), 400, "idempotency-key-missing"),
        ({"Idempotency-Key": "has space"}, withdrawal(c), 400, "idempotency-key-invalid"),
        (key_header(), withdrawal(c, iban=BAD_IBAN), 422, "invalid-iban"),
        (
            key_header(),
            withdrawal(c, iban="TR3300061005197864578413"),
            422,
            "invalid-iban",
        ),  # too short for TR
        (key_header(), withdrawal(c, iban="XX330006100519786457841326"), 422, "invalid-iban"),
        (key_header(), withdrawal(c, amount=0), 422, "validation-error"),
        (key_header(), withdrawal(c, amount=-5), 422, "validation-error"),
        (key_header(), {**withdrawal(c), "amount_minor": "100"}, 422, "validation-error"),
        (key_header(), withdrawal(c, currency="try"), 422, "validation-error"),
        (key_header(), withdrawal(c, currency="GBP"), 422, "unsupported-currency"),
        (key_header(), {**withdrawal(c), "extra": 1}, 422, "validation-error"),
        (key_header(), {**withdrawal(c), "wallet": "../x y"}, 422, "validation-error"),
    ]
    for extra, body, status, slug in cases:
        response = await client.post("/v1/withdrawals", json=body, headers={**c.auth, **extra})
        assert response.status_code == status, (body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"] == f"{PROBLEM}{slug}", response.text
    bad_iban = await client.post(
        "/v1/withdrawals", json=withdrawal(c, iban=BAD_IBAN), headers={**c.auth, **key_header()}
    )
    assert bad_iban.json()["field"] == "destination_iban"
    assert BAD_IBAN not in bad_iban.text
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.sagas") == 0
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.idempotency_keys") == 0
    assert await owner.fetchval("SELECT count(*) FROM withdrawal.outbox") == 0


async def test_tokens_are_required_and_staff_tokens_refused(client: httpx.AsyncClient) -> None:
    c = customer()
    none = await client.post("/v1/withdrawals", json=withdrawal(c), headers=key_header())
    assert none.status_code == 401
    wrong_audience = await client.post(
        "/v1/withdrawals",
        json=withdrawal(c),
        headers={"Authorization": f"Bearer {token(c.subject, audience='other')}", **key_header()},
    )
    assert wrong_audience.status_code == 401
    expired = await client.post(
        "/v1/withdrawals",
        json=withdrawal(c),
        headers={"Authorization": f"Bearer {token(c.subject, expires_in_s=-600)}", **key_header()},
    )
    assert expired.status_code == 401
    staff = {"Authorization": f"Bearer {token('staff-1', issuer=STAFF_ISSUER)}"}
    response = await client.post("/v1/withdrawals", json=withdrawal(c), headers={**staff, **key_header()})
    assert response.status_code == 403
    assert response.json()["type"] == f"{PROBLEM}caller-not-allowed"
    got = await client.get(f"/v1/withdrawals/{uuid.uuid4()}")
    assert got.status_code == 401


async def test_the_requester_sees_their_withdrawal_without_asking_wallet_api(
    client: httpx.AsyncClient, stub: WalletApiStub
) -> None:
    c = customer()
    created = (
        await client.post("/v1/withdrawals", json=withdrawal(c), headers={**c.auth, **key_header()})
    ).json()
    got = await client.get(f"/v1/withdrawals/{created['id']}", headers=c.auth)
    assert got.status_code == 200
    assert got.json() == created
    assert stub.asked == []


async def test_another_member_sees_it_and_anyone_else_gets_404(
    client: httpx.AsyncClient, stub: WalletApiStub
) -> None:
    c = customer()
    created = (
        await client.post("/v1/withdrawals", json=withdrawal(c), headers={**c.auth, **key_header()})
    ).json()
    partner, stranger = customer(), customer()
    stub.members.add((partner.subject, c.wallet))
    seen = await client.get(f"/v1/withdrawals/{created['id']}", headers=partner.auth)
    assert seen.status_code == 200
    assert seen.json()["id"] == created["id"]
    hidden = await client.get(f"/v1/withdrawals/{created['id']}", headers=stranger.auth)
    missing = await client.get(f"/v1/withdrawals/{uuid.uuid4()}", headers=stranger.auth)
    malformed = await client.get("/v1/withdrawals/not-an-id", headers=stranger.auth)
    for response in (hidden, missing, malformed):
        assert response.status_code == 404
        assert response.json()["type"] == f"{PROBLEM}not-found"
    # the same answer whether it exists or not: nothing tells them apart
    assert hidden.json()["title"] == missing.json()["title"]
    assert (stranger.subject, c.wallet) in stub.asked
    stub.status = 403
    assert (await client.get(f"/v1/withdrawals/{created['id']}", headers=partner.auth)).status_code == 404
    stub.status = 401  # wallet-api no longer takes the token: neither do we
    assert (await client.get(f"/v1/withdrawals/{created['id']}", headers=partner.auth)).status_code == 401


async def test_the_document_describes_the_routes(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    post = document["paths"]["/v1/withdrawals"]["post"]
    assert any(p["name"] == "Idempotency-Key" and p["required"] for p in post["parameters"])
    assert "202" in post["responses"]
    assert "/v1/withdrawals/{withdrawal_id}" in document["paths"]


async def test_wallet_api_unreachable_is_503_not_a_guess(
    client: httpx.AsyncClient, stub: WalletApiStub
) -> None:
    c = customer()
    created = (
        await client.post("/v1/withdrawals", json=withdrawal(c), headers={**c.auth, **key_header()})
    ).json()
    partner = customer()
    stub.members.add((partner.subject, c.wallet))
    for down, status in ((True, None), (False, 500), (False, 502)):
        stub.down, stub.status = down, status
        response = await client.get(f"/v1/withdrawals/{created['id']}", headers=partner.auth)
        assert response.status_code == 503, response.text
        assert response.json()["type"] == f"{PROBLEM}dependency-unavailable"
        listing = await client.get("/v1/withdrawals", params={"wallet": c.wallet}, headers=partner.auth)
        assert listing.status_code == 503
    # the requester still sees their own
    assert (await client.get(f"/v1/withdrawals/{created['id']}", headers=c.auth)).status_code == 200


async def test_a_wallets_withdrawals_page_newest_first_for_its_members(
    client: httpx.AsyncClient, stub: WalletApiStub
) -> None:
    c = customer()
    stub.members.add((c.subject, c.wallet))
    ids = []
    for amount in range(1, 6):
        response = await client.post(
            "/v1/withdrawals", json=withdrawal(c, amount=amount * 100), headers={**c.auth, **key_header()}
        )
        ids.append(response.json()["id"])
    other = customer()  # another wallet's withdrawal is not listed
    await client.post("/v1/withdrawals", json=withdrawal(other), headers={**other.auth, **key_header()})
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"wallet": c.wallet, "limit": "2", **({"cursor": cursor} if cursor else {})}
        page = await client.get("/v1/withdrawals", params=params, headers=c.auth)
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["wallet"] == c.wallet
        assert len(body["withdrawals"]) <= 2
        seen += [w["id"] for w in body["withdrawals"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3
    stranger = customer()
    denied = await client.get("/v1/withdrawals", params={"wallet": c.wallet}, headers=stranger.auth)
    assert denied.status_code == 404
    bad = await client.get("/v1/withdrawals", params={"wallet": c.wallet, "limit": "0"}, headers=c.auth)
    assert bad.status_code == 422
    missing = await client.get("/v1/withdrawals", headers=c.auth)
    assert missing.status_code == 422


async def test_the_logs_show_the_iban_masked_only(client: httpx.AsyncClient) -> None:
    c = customer()
    response = await client.post("/v1/withdrawals", json=withdrawal(c), headers={**c.auth, **key_header()})
    assert response.status_code == 202
    text = await asyncio.to_thread(Path(os.environ["HIWALLET_LOG_FILE"]).read_text)
    assert f'"saga_id":"{response.json()["id"]}"' in text  # this run's lines are in the file
    assert "TR** **** **** 1326" in text
    assert IBAN not in text
    assert c.subject not in text
