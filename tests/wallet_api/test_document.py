"""The OpenAPI document says exactly what the service does, route by route: a malformed id in
any path is the 404 of a missing one; a method a path does not have is 405; the currencies are
the service's setting; the Idempotency-Key's pattern is the service's check; a whole number
written 1250.0 is the integer 1250. The routes are found from the app itself, so a new one is
covered without a word here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from hiwallet.core.http.idempotency import check_idempotency_key
from hiwallet.wallet_api.errors import IdempotencyKeyInvalid
from hiwallet.wallet_api.routes import IDEMPOTENCY_KEY_PATTERN
from tests.wallet_api.conftest import TL, WalletApi, assert_problem

UUID = "01234567-89ab-7def-8123-456789abcdef"
# A well-formed id of each kind that names nothing: the answer every malformed one must equal.
MISSING = {
    "account_id": f"0001:a:{UUID}",
    "wallet_id": f"0001:w:{UUID}",
    "transfer_id": "0001:no-such-transfer",
    "programme_id": UUID,
    "endpoint_id": f"0001:we:{UUID}",
    "delivery_id": f"0001:wd:{UUID}",
}
VALID_BODIES: dict[str, Any] = {
    "TierIn": {"tier": "verified"},
    "OpenWalletIn": {"currency": "EUR"},
    "RefundIn": {},
    "EndpointPatch": {},
}
MALFORMED = [
    "not-an-id",
    "personal",  # as an id (``/v1/accounts/personal`` itself is another route's path)
    "xyz",
    "%00",  # NUL
    "%0A",
    "abc%20def",
    "0001:w:not-a-uuid",
    "0001:a:" + UUID.upper(),
    "0001:x:" + UUID,
    "1:w:" + UUID,
    "0000:w:" + UUID,  # bucket 0 does not exist
    "9999:a:" + UUID,  # nor does 9999
    "9" * 200,
    "0001:" + "k" * 96,
    "%E2%98%95",
    "0001:" + UUID + "%0A",
]


def routes_of(app: FastAPI) -> Iterator[tuple[str, str, list[str]]]:
    """(method, path template, path parameters) of every route the app serves."""
    for route in app.routes:
        contexts = route.effective_route_contexts() if hasattr(route, "effective_route_contexts") else [route]
        for context in contexts:
            for method in sorted(getattr(context, "methods", None) or ()):
                if method != "HEAD":
                    yield method, context.path_format, list(context.param_convertors)


def app_of(api: WalletApi) -> FastAPI:
    app: FastAPI = api.server.config.app
    return app


async def test_a_malformed_id_in_any_path_is_the_404_of_a_missing_one(api: WalletApi) -> None:
    alice = await api.customer(funds=10 * TL)
    # The staff paths' ids answer the same after an employee's permission: test_staff.py and
    # test_staff_money.py.
    with_ids = [
        (m, p, params) for m, p, params in routes_of(app_of(api)) if params and not p.startswith("/v1/staff/")
    ]
    literal = {p for _, p, params in routes_of(app_of(api)) if not params}
    # Today: tier, account, limits, wallets, wallet, statement, promos, balances, overview,
    # transfer, refund, programme; a webhook endpoint (get, change, delete, rotate), a delivery
    # (get, replay); a business's daily summary.
    assert len(with_ids) == 19, with_ids
    document = (await api.http.get("/openapi.json")).json()
    before = await api.counts()
    for method, template, params in with_ids:
        [name] = params
        headers = {**(api.onboarding if template.endswith("/tier") else alice.auth), "Idempotency-Key": "k-1"}
        # A valid body, so the missing id's answer is its 404 (a new body model: add one here).
        ref = document["paths"][template][method.lower()].get("requestBody", {})
        model = ref and ref["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        body = VALID_BODIES[model] if model else None

        def call(value: str, method: str = method, template: str = template, name: str = name) -> Any:
            path = template.replace("{" + name + "}", value)
            return api.http.request(method, path, json=body, headers=headers)  # noqa: B023 (awaited here)

        missing = await call(MISSING[name])
        expected = assert_problem(missing, "not-found", 404)
        expected.pop("instance")
        for value in MALFORMED:
            if template.replace("{" + name + "}", value) in literal:
                continue  # another route's own path: its methods, or 405 (the next test)
            r = await call(value)
            assert r.status_code == 404, (method, template, value, r.text)
            got = r.json()
            got.pop("instance")
            assert got == expected, (method, template, value)
            assert "pattern" not in r.text and "[0-9]" not in r.text
    assert await api.counts() == before


async def test_a_malformed_id_without_a_token_is_401(api: WalletApi) -> None:
    for method, template, params in routes_of(app_of(api)):
        if params:
            r = await api.http.request(method, template.replace("{" + params[0] + "}", "xyz"))
            assert r.status_code == 401, (method, template, r.text)


async def test_a_method_a_path_does_not_have_is_405(api: WalletApi) -> None:
    """``GET /v1/accounts/personal`` was taken for an account id."""
    alice = await api.customer()
    document = (await api.http.get("/openapi.json")).json()
    real = {
        "account_id": alice.account_id,
        "wallet_id": alice.wallet_id,
        "transfer_id": MISSING["transfer_id"],
        "programme_id": UUID,
        "campaign_id": UUID,
        "credit_id": UUID,
        "endpoint_id": MISSING["endpoint_id"],
        "delivery_id": MISSING["delivery_id"],
        "finding_id": UUID,
    }
    checked = 0
    for template, item in document["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: real[m[1]], template)
        declared = {m.upper() for m in item}
        for method in {"GET", "POST", "PUT", "PATCH", "DELETE"} - declared:
            r = await api.http.request(method, path, headers=alice.auth)
            assert_problem(r, "method-not-allowed", 405)
            assert set(r.headers["allow"].replace(" ", "").split(",")) >= declared, (method, template)
            checked += 1
    assert checked >= 40
    r = await api.http.get("/v1/accounts/personal", headers=alice.auth)
    assert_problem(r, "method-not-allowed", 405)
    assert r.headers["allow"] == "POST"


# What an HTTP header can carry: no NUL, CR or LF (clients and uvicorn refuse them). The check
# itself (core.http.idempotency.check_idempotency_key, re.match and "$") would take a key ending in "\n".
_HEADER_CHARS = st.characters(min_codepoint=0, max_codepoint=0x80, exclude_characters="\x00\r\n")


@given(st.text(_HEADER_CHARS, max_size=260) | st.from_regex(r'"?[!-~]{250,258}"?', fullmatch=True))
@settings(max_examples=300, derandomize=True, database=None, deadline=None)
def test_the_idempotency_key_pattern_is_the_services_check(key: str) -> None:
    try:
        check_idempotency_key(key)
        accepted = True
    except IdempotencyKeyInvalid:
        accepted = False
    assert bool(re.fullmatch(IDEMPOTENCY_KEY_PATTERN, key)) == accepted, repr(key)


@pytest.mark.parametrize(
    "key", ['""', '"', '"a"', "a", '"' + "a" * 255 + '"', "a" * 255, "a" * 256, '"' * 2 + "a"]
)
def test_the_idempotency_key_pattern_at_its_edges(key: str) -> None:
    test_the_idempotency_key_pattern_is_the_services_check.hypothesis.inner_test(key)  # type: ignore[attr-defined]


@pytest.mark.parametrize("wallet_api_settings", [{"currencies": ["TRY", "GBP"]}])  # the fixture, overridden
async def test_the_documents_currencies_are_the_services_setting(api: WalletApi) -> None:
    document = (await api.http.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    for model in ("TransferIn", "PromoIn", "OpenWalletIn"):
        assert schemas[model]["properties"]["currency"]["enum"] == ["TRY", "GBP"], model
    alice = await api.customer()
    r = await api.post(f"/v1/accounts/{alice.account_id}/wallets", {"currency": "GBP"}, alice.auth, key=None)
    assert r.status_code == 201, r.text
    for currency in ("EUR", "AAA"):
        r = await api.post(
            f"/v1/accounts/{alice.account_id}/wallets", {"currency": currency}, alice.auth, key=None
        )
        assert assert_problem(r, "unsupported-currency", 422)["supported"] == ["TRY", "GBP"]


async def test_a_whole_number_written_with_a_point_is_that_integer(api: WalletApi) -> None:
    alice = await api.customer(funds=1000 * TL)
    bob = await api.customer()
    r = await api.transfer(alice, bob.number, 18259.0, key="float-1")
    assert r.status_code == 201, r.text
    assert r.json()["amount"] == 18259
    # The same request: 1250.0 and 1250 are one body, so the same key replays.
    again = await api.transfer(alice, bob.number, 18259, key="float-1")
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    before = await api.counts()
    for amount in (18259.5, 1e-3, 0.0, -1.0, 1e300, "18259"):
        problem = assert_problem(await api.transfer(alice, bob.number, amount), "validation-error", 422)
        assert [e["loc"] for e in problem["errors"]] == [["body", "amount"]], amount
    assert await api.counts() == before
    await api.verify()
