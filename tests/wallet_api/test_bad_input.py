"""Bad input of every field: wrong types, negative and huge amounts, unknown currencies,
malformed ids and numbers, unknown fields, oversized bodies. Each is a clear 4xx problem,
nothing is written, and the ledger verifies clean afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from hiwallet.ledger.rules import MAX_AMOUNT_MINOR
from tests.wallet_api.conftest import ANY_PROGRAMME, TL, WalletApi, assert_problem

GOOD_ID = "0001:w:01234567-89ab-7def-8123-456789abcdef"

BAD_TRANSFERS: list[tuple[str, dict[str, Any]]] = [
    ("amount as string", {"amount": "100"}),
    ("amount as float", {"amount": 1.5}),
    ("amount as bool", {"amount": True}),
    ("amount null", {"amount": None}),
    ("amount zero", {"amount": 0}),
    ("amount negative", {"amount": -100}),
    ("amount huge", {"amount": MAX_AMOUNT_MINOR + 1}),
    ("amount beyond bigint", {"amount": 2**70}),
    ("currency lower case", {"currency": "try"}),
    ("currency too long", {"currency": "TRYY"}),
    ("currency number", {"currency": 949}),
    ("from_wallet malformed", {"from_wallet": "alice"}),
    ("from_wallet injection", {"from_wallet": "0001:w:'; DROP TABLE wallet.accounts; --"}),
    ("from_wallet as list", {"from_wallet": [GOOD_ID]}),
    ("number too short", {"to_wallet_number": "123"}),
    ("number with letters", {"to_wallet_number": "12345678901234ab"}),
    ("number as int", {"to_wallet_number": 1234567890123456}),
    ("reference too long", {"reference": "x" * 141}),
    ("reference empty", {"reference": ""}),
    ("unknown field", {"amount_usd": 5}),
]


@pytest.mark.parametrize("change", [c for _, c in BAD_TRANSFERS], ids=[n for n, _ in BAD_TRANSFERS])
async def test_bad_transfer_fields(api: WalletApi, change: dict[str, Any]) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    before = await api.counts()
    body = {"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": TL, **change}
    response = await api.post("/v1/transfers", body, alice.auth)
    problem = assert_problem(response, "validation-error", 422)
    assert problem["errors"] and all("loc" in e for e in problem["errors"])
    assert await api.counts() == before
    await api.verify()


async def test_malformed_bodies_and_ids(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    before = await api.counts()
    headers = {**alice.auth, "Idempotency-Key": "k", "Content-Type": "application/json"}
    for raw in (b"{", b"[]", b"null", b'"text"', b"\xff\xfe"):
        r = await api.http.post("/v1/transfers", content=raw, headers=headers)
        assert_problem(r, "validation-error", 422)
    r = await api.http.post(
        "/v1/transfers", content=b"amount=1", headers={**headers, "Content-Type": "text/plain"}
    )
    assert r.status_code == 422
    # Oversized bodies: refused before they are read (declared) or while read (chunked).
    big = b'{"reference": "' + b"x" * 20_000 + b'"}'
    assert_problem(
        await api.http.post("/v1/transfers", content=big, headers=headers), "payload-too-large", 413
    )

    async def chunks() -> Any:
        for _ in range(40):
            yield b"x" * 1000

    r = await api.http.post("/v1/transfers", content=chunks(), headers=headers)
    # core.http stops reading at the limit, and the answer is 413 too (not FastAPI's 400 for a
    # body it could not read).
    assert_problem(r, "payload-too-large", 413)
    for path in (
        "/v1/wallets/0001:w:not-a-uuid",
        "/v1/accounts/0001:x:01234567-89ab-7def-8123-456789abcdef",
        "/v1/transfers/" + "9" * 200,
    ):
        assert_problem(await api.http.get(path, headers=alice.auth), "not-found", 404)
    r = await api.http.get(
        f"/v1/wallets/{alice.wallet_id}/statement", params={"cursor": "-1"}, headers=alice.auth
    )
    assert_problem(r, "validation-error", 422)
    r = await api.http.get(
        f"/v1/wallets/{alice.wallet_id}/statement", params={"purse": "gold"}, headers=alice.auth
    )
    assert_problem(r, "validation-error", 422)
    r = await api.http.get(
        f"/v1/wallets/{alice.wallet_id}/statement", params={"limit": 10_000}, headers=alice.auth
    )
    assert_problem(r, "validation-error", 422)
    for bad in (
        {"subject": ""},
        {"subject": "a b"},
        {"subject": 5},
        {},
        {"subject": "x", "tier": "verified"},
    ):
        r = await api.http.post("/v1/accounts/personal", json=bad, headers=api.onboarding)
        assert_problem(r, "validation-error", 422)
    r = await api.http.post(
        f"/v1/accounts/{alice.account_id}/wallets", json={"currency": "eur"}, headers=alice.auth
    )
    assert_problem(r, "validation-error", 422)
    shop = await api.business(funds=TL)
    after_shop = await api.counts()
    cases = [
        ("tomorrow", "validation-error"),
        ("2030-01-01T00:00:00", "validation-error"),  # no time zone
        (5, "invalid-request"),  # 1970
        ("2999-01-01T00:00:00Z", "invalid-request"),
    ]
    for expires, slug in cases:
        promo = {
            "from_wallet": shop.wallet_id,
            "to_wallet_number": alice.number,
            "amount": TL,
            "programme": ANY_PROGRAMME,
            "expires_at": expires,
        }
        assert_problem(await api.post("/v1/promos", promo, shop.auth), slug, 422)
    assert await api.counts() == after_shop
    assert before["transactions"] + 1 == after_shop["transactions"]  # the shop's funding only
    await api.verify()
