"""Text that PostgreSQL cannot store (NUL) or that no one should store (the other control
characters, U+0000–U+001F and U+007F–U+009F) is refused at the edge: 422 ``validation-error``
naming the field, and nothing written. Before, a NUL in a reference reached the database and
came back as 503 "retry", forever.

Every free-text field of every request model is found from the OpenAPI document (a new one is
covered without a word here), and each is sent over HTTP to the running service."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from hiwallet.ledger.errors import InvalidPosting
from tests.wallet_api.conftest import ANY_PROGRAMME, TL, WalletApi, assert_problem

CONTROL = ["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f", "\x80", "\x85", "\x9f"]


def _free_text(document: dict[str, Any]) -> dict[str, list[str]]:
    """Request body schema → its string properties that take free text (no enum, no format)."""
    schemas = document["components"]["schemas"]
    bodies = {
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        for item in document["paths"].values()
        for op in item.values()
        if "requestBody" in op
    }
    found: dict[str, list[str]] = {}
    for name in sorted(bodies):
        for field, prop in schemas[name]["properties"].items():
            options = prop.get("anyOf", [prop])
            if any(o.get("type") == "string" and "enum" not in o and "format" not in o for o in options):
                found.setdefault(name, []).append(field)
    return found


async def test_every_text_field_of_the_document_refuses_control_characters(api: WalletApi) -> None:
    """The document says it too: each free-text field's pattern admits no control character
    (and the next tests show the service does what the pattern says)."""
    document = (await api.http.get("/openapi.json")).json()
    fields = _free_text(document)
    # What this found today: if a model gains a free-text field, it is checked here.
    assert fields["TransferIn"] == ["from_wallet", "to_wallet_number", "reference"]
    assert set(fields) == {
        "OpenPersonalIn",
        "PromoIn",
        "RefundIn",
        "TransferIn",
        # issue 13: promo programmes and the staff money endpoints
        "ProgrammeIn",
        "StaffPromoIn",
        "CampaignIn",
        "CampaignGrantIn",
        "DecisionIn",
        "GoodwillIn",
        # issue 13: business accounts opened and linked by staff
        "BusinessIn",
        "MemberIn",
        # issue 22: the merchants' webhook endpoints
        "EndpointIn",
        "EndpointPatch",
        # issue 24: the Contracted tier's evidence, the providers' invoices, findings resolved
        "ContractIn",
        "InvoiceIn",
        "ResolveIn",  # a finding's resolution note
    }  # OpenWalletIn: an enum
    schemas = document["components"]["schemas"]
    for name, names in fields.items():
        for field in names:
            prop = schemas[name]["properties"][field]
            [text] = [o for o in prop.get("anyOf", [prop]) if o.get("type") == "string"]
            assert "pattern" in text, (name, field)
            for char in CONTROL:
                assert not re.search(text["pattern"], f"ok{char}ok"), (name, field, repr(char))


async def test_a_control_character_in_a_transfer_reference_is_422(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    for char in CONTROL:
        before = await api.counts()
        r = await api.transfer(alice, bob.number, TL, key=f"key-{ord(char)}", reference=f"nul{char}byte")
        problem = assert_problem(r, "validation-error", 422)
        assert [e["loc"] for e in problem["errors"]] == [["body", "reference"]], repr(char)
        assert await api.counts() == before
        # The same key, the text fixed, goes through: nothing of the refused request was kept.
        ok = await api.transfer(alice, bob.number, TL, key=f"key-{ord(char)}", reference="nul byte")
        assert ok.status_code == 201, ok.text
    await api.verify()


async def test_control_characters_in_every_request_text_are_422(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    shop = await api.business(funds=100 * TL)
    payment = await api.transfer(alice, shop.number, TL)
    assert payment.status_code == 201, payment.text
    before = await api.counts()
    expires = (datetime.now(UTC) + timedelta(days=7)).isoformat()
    for char in CONTROL:
        bad = f"x{char}y"
        cases: list[tuple[str, dict[str, Any], dict[str, str], list[str]]] = [
            (
                "/v1/transfers",
                {
                    "from_wallet": alice.wallet_id,
                    "to_wallet_number": shop.number,
                    "amount": TL,
                    "reference": bad,
                },
                alice.auth,
                ["body", "reference"],
            ),
            (
                "/v1/promos",
                {
                    "from_wallet": shop.wallet_id,
                    "to_wallet_number": alice.number,
                    "amount": TL,
                    "programme": ANY_PROGRAMME,
                    "expires_at": expires,
                    "reference": bad,
                },
                shop.auth,
                ["body", "reference"],
            ),
            (
                f"/v1/transfers/{payment.json()['id']}/refund",
                {"reference": bad},
                shop.auth,
                ["body", "reference"],
            ),
            ("/v1/accounts/personal", {"subject": f"someone{char}"}, api.onboarding, ["body", "subject"]),
            (
                f"/v1/accounts/{alice.account_id}/wallets",
                {"currency": f"EU{char}"},
                alice.auth,
                ["body", "currency"],
            ),
            (
                "/v1/transfers",
                {"from_wallet": alice.wallet_id + char, "to_wallet_number": shop.number, "amount": TL},
                alice.auth,
                ["body", "from_wallet"],
            ),
        ]
        for path, body, auth, loc in cases:
            problem = assert_problem(await api.post(path, body, auth), "validation-error", 422)
            assert [e["loc"] for e in problem["errors"]] == [loc], (path, repr(char))
        for params in ({"cursor": f"1{char}"}, {"purse": f"cash{char}"}, {"limit": f"5{char}"}):
            r = await api.http.get(
                f"/v1/wallets/{alice.wallet_id}/statement", params=params, headers=alice.auth
            )
            problem = assert_problem(r, "validation-error", 422)
            assert [e["loc"] for e in problem["errors"]] == [["query", *params]], repr(char)
    assert await api.counts() == before
    await api.verify()


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x85"], ids=["U+0000", "U+001B", "U+0085"])
async def test_a_business_name_with_a_control_character_is_refused(api: WalletApi, char: str) -> None:
    """Business names come from the operator's command line, not HTTP: the ledger's own check
    refuses them (InvalidPosting, the same as `hiwallet business open` raises)."""
    before = await api.counts()
    with pytest.raises(InvalidPosting) as err:
        await api.service.open_business(f"Kahve{char}Dükkanı", operator="operator:test")
    assert err.value.fields["field"] == "name"
    assert await api.counts() == before


async def test_an_idempotency_key_with_a_control_character_is_refused(api: WalletApi) -> None:
    """A header cannot carry NUL, CR or LF (the client refuses to send them) and uvicorn's
    parser refuses DEL; the rest is not visible ASCII, so not a key."""
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    before = await api.counts()
    for key in ("tab\tkey", "k\x7f", "k\x85"):
        headers = [*alice.auth.items(), ("Idempotency-Key", key.encode("latin-1"))]
        body = {"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": TL}
        try:
            r = await api.http.post("/v1/transfers", json=body, headers=headers)
        except httpx.LocalProtocolError:
            continue  # the client refused to send it
        if r.headers["content-type"].startswith("text/plain"):
            assert r.status_code == 400, r.text  # uvicorn's HTTP parser refused the header
        else:
            assert_problem(r, "idempotency-key-invalid", 400)
    assert await api.counts() == before
