"""wallet-api's side of the merchants' webhooks (docs/webhooks.md): endpoints registered,
listed, changed, disabled, deleted and rotated by a member of the business, with real
client-credentials tokens; 404 for what the caller may not see; URLs refused by the SSRF rule;
and the events written in the very transaction of the movement they announce."""

from __future__ import annotations

import base64
from typing import Any

import asyncpg
import pytest

from hiwallet.contracts import merchant_events as me
from hiwallet.core.sealing import KeyRing
from tests.wallet_api.conftest import TL, Business, WalletApi, assert_problem

PUBLIC_URL = "https://93.184.216.34/hooks"  # a literal public address: no DNS needed


async def register(api: WalletApi, shop: Business, **body: Any) -> dict[str, Any]:
    r = await api.http.post(
        "/v1/webhook-endpoints",
        json={"account_id": shop.account_id, "url": PUBLIC_URL, "event_types": ["payment.received"], **body},
        headers=shop.auth,
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def events(api: WalletApi) -> list[asyncpg.Record]:
    async with api.owner_connection() as conn:
        return list(await conn.fetch("SELECT * FROM wallet.webhook_events ORDER BY seq"))


async def test_a_member_registers_lists_changes_disables_and_deletes_an_endpoint(api: WalletApi) -> None:
    shop = await api.business()
    endpoint = await register(
        api, shop, event_types=["payment.received", "payment.refunded"], description="orders"
    )
    secret = endpoint.pop("secret")
    # whsec_ + base64 of 32 random bytes, shown once, kept sealed
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert endpoint["enabled"] is True and endpoint["account_id"] == shop.account_id
    assert endpoint["event_types"] == ["payment.received", "payment.refunded"]
    path = f"/v1/webhook-endpoints/{endpoint['id']}"
    read = (await api.http.get(path, headers=shop.auth)).json()
    assert "secret" not in read and read == endpoint
    listed = (await api.http.get("/v1/webhook-endpoints", headers=shop.auth)).json()["endpoints"]
    assert listed == [endpoint]
    async with api.owner_connection() as conn:
        sealed = await conn.fetchval(
            "SELECT secret_sealed FROM wallet.webhook_endpoints WHERE id = $1", endpoint["id"]
        )
    assert secret.encode() not in sealed
    ring = KeyRing.parse(me.DEV_SECRET_KEYS)
    assert ring.open(sealed, me.secret_place(endpoint["id"])).decode() == secret

    changed = await api.http.patch(
        path, json={"url": "https://93.184.216.35/v2", "event_types": ["promo.granted"]}, headers=shop.auth
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["url"] == "https://93.184.216.35/v2"
    assert changed.json()["event_types"] == ["promo.granted"]
    assert changed.json()["description"] == "orders"

    disabled = (await api.http.patch(path, json={"enabled": False}, headers=shop.auth)).json()
    assert disabled["enabled"] is False and disabled["disabled_reason"] == "member"
    enabled = (await api.http.patch(path, json={"enabled": True}, headers=shop.auth)).json()
    assert enabled["enabled"] is True and enabled["disabled_reason"] is None

    rotated = await api.http.post(f"{path}/rotate-secret", headers=shop.auth)
    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["secret"] != secret and rotated.json()["previous_secret_until"] is not None

    assert (await api.http.delete(path, headers=shop.auth)).status_code == 204
    assert_problem(await api.http.get(path, headers=shop.auth), "not-found", 404)
    assert (await api.http.get("/v1/webhook-endpoints", headers=shop.auth)).json()["endpoints"] == []


async def test_what_the_caller_may_not_see_is_not_found(api: WalletApi) -> None:
    shop = await api.business()
    other = await api.business("Başka", client="merchant-two")
    customer = await api.customer()
    endpoint = await register(api, shop)
    path = f"/v1/webhook-endpoints/{endpoint['id']}"
    for who in (other, customer):
        assert_problem(await api.http.get(path, headers=who.auth), "not-found", 404)
        assert_problem(
            await api.http.patch(path, json={"enabled": False}, headers=who.auth), "not-found", 404
        )
        assert_problem(await api.http.delete(path, headers=who.auth), "not-found", 404)
        assert_problem(await api.http.post(f"{path}/rotate-secret", headers=who.auth), "not-found", 404)
        assert (await api.http.get("/v1/webhook-endpoints", headers=who.auth)).json()["endpoints"] == []
    # registering for another's account: as if it did not exist
    r = await api.http.post(
        "/v1/webhook-endpoints",
        json={"account_id": shop.account_id, "url": PUBLIC_URL, "event_types": ["payment.received"]},
        headers=other.auth,
    )
    assert_problem(r, "not-found", 404)
    # a personal account has no webhooks
    r = await api.http.post(
        "/v1/webhook-endpoints",
        json={"account_id": customer.account_id, "url": PUBLIC_URL, "event_types": ["payment.received"]},
        headers=customer.auth,
    )
    assert_problem(r, "not-a-business", 403)
    assert_problem(
        await api.http.get("/v1/webhook-endpoints/0001:we:nonsense", headers=shop.auth), "not-found", 404
    )
    assert_problem(
        await api.http.post(
            "/v1/webhook-deliveries/0001:wd:00000000-0000-0000-0000-000000000000/replay", headers=shop.auth
        ),
        "not-found",
        404,
    )
    # still there for its own
    assert (await api.http.get(path, headers=shop.auth)).status_code == 200


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/hook", "private-address"),
        ("http://10.1.2.3/hook", "private-address"),
        ("http://192.168.1.1/hook", "private-address"),
        ("http://172.16.0.1/hook", "private-address"),
        ("http://169.254.169.254/latest/meta-data", "private-address"),  # link-local: cloud metadata
        ("http://100.64.0.1/hook", "private-address"),  # shared (CGNAT)
        ("http://0.0.0.0/hook", "private-address"),
        ("http://224.0.0.1/hook", "private-address"),
        ("http://240.0.0.1/hook", "private-address"),  # reserved
        ("http://[::1]/hook", "private-address"),
        ("http://[fe80::1]/hook", "private-address"),
        ("http://[fc00::1]/hook", "private-address"),
        ("http://[::ffff:127.0.0.1]/hook", "private-address"),  # IPv4 inside IPv6
        ("http://localhost/hook", "private-address"),  # a name that resolves to loopback
        ("ftp://93.184.216.34/hook", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("gopher://93.184.216.34/", "scheme"),
        ("https://user:pw@93.184.216.34/hook", "userinfo"),
        ("https://user@93.184.216.34/hook", "userinfo"),
        ("https:///hook", "malformed"),
        ("https://no-such-host.invalid/hook", "unresolvable"),
    ],
)
async def test_endpoint_urls_that_may_not_be_called_are_refused(
    api: WalletApi, url: str, reason: str
) -> None:
    shop = await api.business()
    r = await api.http.post(
        "/v1/webhook-endpoints",
        json={"account_id": shop.account_id, "url": url, "event_types": ["payment.received"]},
        headers=shop.auth,
    )
    body = assert_problem(r, "webhook-url-forbidden", 422)
    assert body["reason"] == reason
    endpoint = await register(api, shop)
    r = await api.http.patch(f"/v1/webhook-endpoints/{endpoint['id']}", json={"url": url}, headers=shop.auth)
    assert assert_problem(r, "webhook-url-forbidden", 422)["reason"] == reason
    assert (await api.http.get(f"/v1/webhook-endpoints/{endpoint['id']}", headers=shop.auth)).json()[
        "url"
    ] == PUBLIC_URL


@pytest.mark.parametrize("wallet_api_settings", [{"webhook_allow_private_targets": True}])
async def test_development_allows_private_addresses_but_not_other_schemes(api: WalletApi) -> None:
    shop = await api.business()
    assert (await register(api, shop, url="http://127.0.0.1:9/hook"))["url"] == "http://127.0.0.1:9/hook"
    r = await api.http.post(
        "/v1/webhook-endpoints",
        json={"account_id": shop.account_id, "url": "ftp://127.0.0.1/", "event_types": ["payment.received"]},
        headers=shop.auth,
    )
    assert assert_problem(r, "webhook-url-forbidden", 422)["reason"] == "scheme"


async def test_a_payment_to_a_business_writes_its_event_in_the_same_transaction(api: WalletApi) -> None:
    payer = await api.customer(funds=100 * TL)
    friend = await api.customer()
    shop = await api.business()
    assert (await api.transfer(payer, friend.number, 5 * TL)).status_code == 201  # p2p: no event
    r = await api.transfer(payer, shop.number, 20 * TL, reference="order 42")
    assert r.status_code == 201, r.text
    payment = r.json()
    [event] = await events(api)
    assert event["type"] == "payment.received" and event["resource_id"] == payment["id"]
    assert event["id"] == me.event_id("payment.received", payment["id"])
    assert event["account_id"] == shop.account_id
    import orjson

    payload = orjson.loads(event["payload"]) if isinstance(event["payload"], str) else event["payload"]
    assert payload == {
        "account_id": shop.account_id,
        "wallet_id": shop.wallet_id,
        "transfer_id": payment["id"],
        "transfer_type": "payment",
        "amount_minor": 20 * TL,
        "currency": "TRY",
        "reference": "order 42",
    }
    # nothing of the payer
    assert payer.wallet_id not in str(payload) and payer.number not in str(payload)

    # A replay of the same request posts nothing and writes no second event.
    key = "pay-again"
    assert (await api.transfer(payer, shop.number, 1 * TL, key=key)).status_code == 201
    again = await api.transfer(payer, shop.number, 1 * TL, key=key)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert len(await events(api)) == 2


async def test_a_refused_payment_writes_no_event_and_an_event_that_cannot_be_written_moves_no_money(
    api: WalletApi,
) -> None:
    payer = await api.customer(funds=10 * TL)
    shop = await api.business()
    assert_problem(await api.transfer(payer, shop.number, 50 * TL), "insufficient-funds", 422)
    assert await events(api) == []

    # The reverse: the event of the next payment is already there (as the owner puts it), so
    # its insert fails: the payment, in the same statement, rolls back with it.
    key = "the-key-0001"
    r = await api.transfer(payer, shop.number, 1 * TL, key=key)
    assert r.status_code == 201
    before = await api.counts()
    balance = await api.balance(payer.wallet_id)
    async with api.owner_connection() as conn:
        # Fail any insert of an event from now on (a trigger the owner adds): the movement
        # must fail with it.
        await conn.execute(
            "CREATE FUNCTION wallet.no_events() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'no events'; END $$;"
            " CREATE TRIGGER no_events BEFORE INSERT ON wallet.webhook_events"
            " FOR EACH ROW EXECUTE FUNCTION wallet.no_events()"
        )
    r = await api.transfer(payer, shop.number, 2 * TL)
    assert r.status_code >= 500, r.text
    assert await api.counts() == before
    assert await api.balance(payer.wallet_id) == balance
    # a p2p, which writes no event, still goes through
    friend = await api.customer()
    assert (await api.transfer(payer, friend.number, 1 * TL)).status_code == 201
    await api.verify()


async def test_refunds_and_promo_grants_write_their_events(api: WalletApi) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business(funds=100 * TL)
    payment = (await api.transfer(payer, shop.number, 30 * TL)).json()
    refund = await api.post(f"/v1/transfers/{payment['id']}/refund", {"reference": "returned"}, shop.auth)
    assert refund.status_code == 201, refund.text
    programme = await api.programme(shop)
    grant = await api.post(
        "/v1/promos",
        {
            "from_wallet": shop.wallet_id,
            "to_wallet_number": payer.number,
            "amount": 10 * TL,
            "programme": programme,
        },
        shop.auth,
    )
    assert grant.status_code == 201, grant.text
    rows = await events(api)
    assert [(e["type"], e["resource_id"]) for e in rows] == [
        ("payment.received", payment["id"]),
        ("payment.refunded", payment["id"]),  # the payment is the resource: in order after it
        ("promo.granted", grant.json()["id"]),
    ]
    import orjson

    refunded = orjson.loads(rows[1]["payload"])
    assert refunded["refund_id"] == refund.json()["id"] and refunded["amount_minor"] == 30 * TL
    granted = orjson.loads(rows[2]["payload"])
    assert granted["to_wallet_number"] == payer.number and granted["programme"] == programme
    assert granted["amount_minor"] == 10 * TL and granted["wallet_id"] == shop.wallet_id
    # a refused refund (twice) writes nothing more
    again = await api.post(f"/v1/transfers/{payment['id']}/refund", {}, shop.auth)
    assert again.status_code == 409
    assert len(await events(api)) == 3
