"""End to end through the front doors, real wallet-api and real tokens behind them: a customer
sends money to another and pays a business through personal-mobile-api; the merchant's system
(client credentials, merchant-demo linked to the business) lists the payment and refunds it
through business-api. On the way: internal refusals arrive unchanged (the same bytes as
wallet-api's own answer), a forged identity header changes nothing, and no answer carries the
ledger's legs."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.edge.conftest import RedisServer, edge_settings, nowhere, running_front
from tests.wallet_api.conftest import TL, WalletApi

PROBLEM = "https://hiwallet.dev/problems/"


def _fronts(api: WalletApi, redis_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    personal = edge_settings(
        api.idp, redis_url, wallet_api_url=api.base_url, withdrawals_url=nowhere(), onboarding_url=nowhere()
    )
    business = edge_settings(api.idp, redis_url, wallet_api_url=api.base_url, withdrawals_url=nowhere())
    return personal, business


async def test_send_pay_list_and_refund_through_the_front_doors(
    api: WalletApi, redis_server: RedisServer
) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    shop = await api.business(client="merchant-demo")
    personal_settings, business_settings = _fronts(api, redis_server.url)
    async with (
        running_front("personal", **personal_settings) as personal_front,
        running_front("business", **business_settings) as business_front,
        httpx.AsyncClient(base_url=personal_front.url) as mobile,
        httpx.AsyncClient(base_url=business_front.url) as merchant,
    ):
        mine = await mobile.get("/v1/me/accounts", headers=alice.auth)
        assert mine.status_code == 200, mine.text
        [account] = mine.json()["accounts"]
        assert account["id"] == alice.account_id and account["wallets"][0]["id"] == alice.wallet_id

        sent = await mobile.post(
            "/v1/transfers",
            json={"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": 10 * TL},
            headers={**alice.auth, "Idempotency-Key": (key := str(uuid.uuid4()))},
        )
        assert sent.status_code == 201, sent.text
        assert sent.json()["type"] == "p2p" and "legs" not in sent.json()
        again = await mobile.post(
            "/v1/transfers",
            json={"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": 10 * TL},
            headers={**alice.auth, "Idempotency-Key": key},
        )
        assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
        assert again.json() == sent.json()

        paid = await mobile.post(
            "/v1/transfers",
            json={"from_wallet": alice.wallet_id, "to_wallet_number": shop.number, "amount": 5 * TL},
            headers={**alice.auth, "Idempotency-Key": str(uuid.uuid4())},
        )
        assert paid.status_code == 201, paid.text
        payment = paid.json()
        assert payment["type"] == "payment" and "legs" not in payment
        got = await mobile.get(f"/v1/transfers/{payment['id']}", headers=alice.auth)
        assert got.status_code == 200 and "legs" not in got.json()

        balance = (await mobile.get(f"/v1/wallets/{alice.wallet_id}", headers=alice.auth)).json()
        assert balance["cash"] == 85 * TL - payment["fee"]  # the payer pays the fee

        first = await mobile.get(f"/v1/wallets/{alice.wallet_id}/movements?limit=2", headers=alice.auth)
        assert first.status_code == 200, first.text
        lines = first.json()["lines"]
        assert [line["type"] for line in lines] == ["topup", "p2p"]
        rest = await mobile.get(
            f"/v1/wallets/{alice.wallet_id}/movements",
            params={"cursor": first.json()["next_cursor"]},
            headers=alice.auth,
        )
        assert [line["type"] for line in rest.json()["lines"]] == ["payment"]

        # the merchant's system: its account, the payment received, its refund
        accounts = await merchant.get("/v1/accounts", headers=shop.auth)
        assert accounts.status_code == 200, accounts.text
        assert [a["id"] for a in accounts.json()["accounts"]] == [shop.account_id]
        received = await merchant.get(f"/v1/wallets/{shop.wallet_id}/payments", headers=shop.auth)
        assert received.status_code == 200, received.text
        assert [(p["transaction_id"], p["type"]) for p in received.json()["lines"]] == [
            (payment["id"], "payment")
        ]
        refunded = await merchant.post(
            f"/v1/transfers/{payment['id']}/refund",
            json={"reference": "sorry"},
            headers={**shop.auth, "Idempotency-Key": str(uuid.uuid4())},
        )
        assert refunded.status_code == 201, refunded.text
        assert refunded.json()["type"] == "refund" and refunded.json()["refund_of"] == payment["id"]
        assert "legs" not in refunded.json()
        refunds = await merchant.get(f"/v1/wallets/{shop.wallet_id}/payments?kind=refund", headers=shop.auth)
        assert [p["transaction_id"] for p in refunds.json()["lines"]] == [refunded.json()["id"]]
        balance = (await mobile.get(f"/v1/wallets/{alice.wallet_id}", headers=alice.auth)).json()
        assert balance["cash"] == 90 * TL
        # the merchant's token on the personal door, the customer's on the merchants': 401
        assert (await mobile.get("/v1/me/accounts", headers=shop.auth)).status_code == 401
        assert (await merchant.get("/v1/accounts", headers=alice.auth)).status_code == 401
    await api.verify()


async def test_internal_refusals_arrive_as_wallet_api_answers_them(
    api: WalletApi, redis_server: RedisServer
) -> None:
    alice = await api.customer(funds=10 * TL)
    bob = await api.customer()
    personal_settings, _ = _fronts(api, redis_server.url)
    async with (
        running_front("personal", **personal_settings) as front,
        httpx.AsyncClient(base_url=front.url) as mobile,
    ):
        # the same request to the front API and to wallet-api itself: the same status and body
        cases: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = [
            ("GET", f"/v1/wallets/{bob.wallet_id}", None, {}),  # 404: not hers
            ("POST", "/v1/transfers", {"from_wallet": alice.wallet_id}, {"Idempotency-Key": "k"}),  # 422
            (
                "POST",
                "/v1/transfers",
                {"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": TL},
                {},
            ),  # 400: no key
            (
                "POST",
                "/v1/transfers",
                {"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": 1_000 * TL},
                {"Idempotency-Key": str(uuid.uuid4())},
            ),  # 422: funds
        ]
        for method, path, body, headers in cases:
            through = await mobile.request(method, path, json=body, headers={**alice.auth, **headers})
            direct = await api.http.request(method, path, json=body, headers={**alice.auth, **headers})
            assert through.status_code == direct.status_code, (path, through.text, direct.text)
            assert through.status_code in (400, 404, 422)
            assert (
                through.headers["content-type"]
                == direct.headers["content-type"]
                == "application/problem+json"
            )
            assert through.json() == direct.json()
    await api.verify()


async def test_a_forged_identity_header_changes_nothing(api: WalletApi, redis_server: RedisServer) -> None:
    """Forwarded or not, a header naming someone else does not make alice bob: wallet-api
    believes the token only (sent to it directly too, as a compromised front API would)."""
    alice = await api.customer(funds=10 * TL)
    bob = await api.customer(funds=10 * TL)
    forged = {
        "X-User-Id": bob.subject,
        "X-Forwarded-User": bob.subject,
        "X-Subject": bob.subject,
        "X-Account-Id": bob.account_id,
    }
    personal_settings, _ = _fronts(api, redis_server.url)
    async with (
        running_front("personal", **personal_settings) as front,
        httpx.AsyncClient(base_url=front.url) as mobile,
    ):
        for http in (mobile, api.http):
            seen = await http.get(f"/v1/wallets/{bob.wallet_id}", headers={**alice.auth, **forged})
            assert seen.status_code == 404, seen.text
            taken = await http.post(
                "/v1/transfers",
                json={"from_wallet": bob.wallet_id, "to_wallet_number": alice.number, "amount": TL},
                headers={**alice.auth, **forged, "Idempotency-Key": str(uuid.uuid4())},
            )
            assert taken.status_code == 404, taken.text
            mine = await http.get(
                "/v1/accounts" if http is api.http else "/v1/me/accounts", headers={**alice.auth, **forged}
            )
            assert [a["id"] for a in mine.json()["accounts"]] == [alice.account_id]
    assert (await api.balance(bob.wallet_id))["cash"] == 10 * TL
    await api.verify()


async def test_a_merchant_manages_its_webhook_endpoints_through_business_api(
    api: WalletApi, redis_server: RedisServer
) -> None:
    """Register (the secret once), list, read, change, rotate, disable, delete an endpoint, and
    read the deliveries, all through business-api; what wallet-api refuses arrives unchanged,
    and an account the client is no member of is 404 through the door as behind it."""
    shop = await api.business(client="merchant-demo")
    stranger = await api.customer()  # an account merchant-demo is no member of
    _, business_settings = _fronts(api, redis_server.url)
    url = "https://93.184.216.34/hooks"  # a literal public address: no DNS needed
    async with (
        running_front("business", **business_settings) as front,
        httpx.AsyncClient(base_url=front.url, headers=shop.auth) as merchant,
    ):
        made = await merchant.post(
            "/v1/webhook-endpoints",
            json={"account_id": shop.account_id, "url": url, "event_types": ["payment.received"]},
        )
        assert made.status_code == 201, made.text
        endpoint = made.json()
        assert endpoint["secret"].startswith("whsec_") and endpoint["enabled"]
        path = f"/v1/webhook-endpoints/{endpoint['id']}"

        listed = (await merchant.get("/v1/webhook-endpoints")).json()["endpoints"]
        assert [e["id"] for e in listed] == [endpoint["id"]] and "secret" not in listed[0]
        assert (await merchant.get(path)).json()["url"] == url

        changed = await merchant.patch(path, json={"event_types": ["payment.received", "payment.refunded"]})
        assert changed.status_code == 200 and changed.json()["event_types"] == [
            "payment.received",
            "payment.refunded",
        ]
        rotated = await merchant.post(f"{path}/rotate-secret")
        assert rotated.status_code == 200, rotated.text
        assert rotated.json()["secret"] != endpoint["secret"] and rotated.json()["previous_secret_until"]
        disabled = await merchant.patch(path, json={"enabled": False})
        assert disabled.json()["enabled"] is False and disabled.json()["disabled_reason"] == "member"

        # wallet-api's refusals, through the door as they are behind it
        private = await merchant.patch(path, json={"url": "http://127.0.0.1/hook"})
        behind = await api.http.patch(
            f"/v1{path[3:]}", json={"url": "http://127.0.0.1/hook"}, headers=shop.auth
        )
        assert private.status_code == behind.status_code == 422
        assert private.json()["type"] == behind.json()["type"] == PROBLEM + "webhook-url-forbidden"
        foreign = await merchant.post(
            "/v1/webhook-endpoints",
            json={"account_id": stranger.account_id, "url": url, "event_types": ["payment.received"]},
        )
        assert foreign.status_code == 404, foreign.text

        deliveries = await merchant.get("/v1/webhook-deliveries", params={"status": "pending", "limit": 10})
        assert deliveries.status_code == 200 and deliveries.json()["deliveries"] == []
        missing = await merchant.get("/v1/webhook-deliveries/0001:wd:00000000-0000-7000-8000-000000000000")
        assert missing.status_code == 404

        gone = await merchant.delete(path)
        assert gone.status_code == 204 and gone.content == b""
        assert (await merchant.get(path)).status_code == 404
