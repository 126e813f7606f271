"""The front doors with every internal service behind them, real: onboarding (with its fakes),
wallet-api and withdrawal-orchestrator (its routes; the saga's broker side is the withdrawal
tests'), real tokens.

- A customer registers and verifies through personal-mobile-api, finds their account, tier and
  limits there, and follows a withdrawal's refusal and a missing one.
- Each front API's served document is exact: Schemathesis, ``--checks all`` (tests/contract.py),
  positive, negative and coverage cases, against the running front API and what is behind it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from hiwallet.withdrawals.app import create_withdrawal_app
from tests import contract
from tests.edge.conftest import RedisServer, edge_settings, running_front
from tests.onboarding.conftest import Onboarding
from tests.servers import serve, stop
from tests.wallet_api.conftest import TL, WalletApi
from tests.withdrawals.conftest import settings_for

IBAN = "TR330006100519786457841326"


@pytest.fixture
async def orchestrator(withdrawal_db: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """withdrawal-orchestrator's routes (no broker: ``background=False``) against the test's
    identity and wallet-api; a factory, called with them."""
    started: list[tuple[Any, Any]] = []

    def start(idp_base: str, wallet_api_url: str) -> str:
        settings = settings_for(withdrawal_db, customer_issuer_base=idp_base, wallet_api_url=wallet_api_url)
        url, server, thread = serve(create_withdrawal_app(settings, background=False), "orchestrator")
        started.append((server, thread))
        return url

    yield start
    for server, thread in started:
        stop(server, thread)


async def test_a_customer_registers_and_verifies_through_the_front_door(
    onb: Onboarding, orchestrator: Any, redis_server: RedisServer
) -> None:
    settings = edge_settings(
        onb.idp,
        redis_server.url,
        wallet_api_url=onb.wallet_api_url,
        onboarding_url=onb.url,
        withdrawals_url=orchestrator(onb.idp.base_url, onb.wallet_api_url),
    )
    async with (
        running_front("personal", **settings) as front,
        httpx.AsyncClient(base_url=front.url, timeout=30) as mobile,
    ):
        through = dataclasses.replace(onb, http=mobile)  # the same steps, through the front door
        email, done = await through.registered()
        auth = {"Authorization": f"Bearer {onb.token(email)}"}
        me = await mobile.get("/v1/me", headers=auth)
        assert me.status_code == 200, me.text
        assert me.json()["account_id"] == done["account_id"]
        accounts = (await mobile.get("/v1/me/accounts", headers=auth)).json()["accounts"]
        assert [a["id"] for a in accounts] == [done["account_id"]]
        wallet = accounts[0]["wallets"][0]
        limits = await mobile.get(f"/v1/me/accounts/{done['account_id']}/limits", headers=auth)
        assert limits.status_code == 200, limits.text
        assert limits.json()["tier"] == me.json()["tier"]
        # onboarding's own refusal arrives unchanged: a wrong code
        again = await through.register(email)
        wrong = await mobile.post(f"/v1/registrations/{again}/verify", json={"code": "000000"})
        direct = await onb.http.post(f"/v1/registrations/{again}/verify", json={"code": "000000"})
        assert wrong.status_code == direct.status_code and wrong.status_code in (409, 422), wrong.text
        assert wrong.json()["type"] == direct.json()["type"]
        # a withdrawal from an empty wallet: the orchestrator's answer through the door
        asked = await mobile.post(
            "/v1/withdrawals",
            json={
                "wallet": wallet["id"],
                "amount_minor": 10 * TL,
                "currency": "TRY",
                "destination_iban": IBAN,
            },
            headers={**auth, "Idempotency-Key": str(uuid.uuid4())},
        )
        assert asked.status_code == 202, asked.text
        followed = await mobile.get(asked.headers["location"], headers=auth)
        assert followed.status_code == 200 and followed.json()["id"] == asked.json()["id"]
        listed = await mobile.get("/v1/withdrawals", params={"wallet": wallet["id"]}, headers=auth)
        assert [w["id"] for w in listed.json()["withdrawals"]] == [asked.json()["id"]]
        missing = await mobile.get("/v1/withdrawals/0190a0b0-0000-7000-8000-000000000000", headers=auth)
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"


@pytest.fixture
async def personal_behind(
    onb: Onboarding, orchestrator: Any, redis_server: RedisServer
) -> AsyncIterator[tuple[str, str, str]]:
    """personal-mobile-api with all three behind it; its URL, a registered customer's token and
    their wallet."""
    email, _ = await _registered(onb)
    token = onb.token(email)
    settings = edge_settings(
        onb.idp,
        redis_server.url,
        rate_limit_subject=10**6,
        rate_limit_address=10**6,
        wallet_api_url=onb.wallet_api_url,
        onboarding_url=onb.url,
        withdrawals_url=orchestrator(onb.idp.base_url, onb.wallet_api_url),
    )
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        accounts = (await http.get("/v1/me/accounts", headers={"Authorization": f"Bearer {token}"})).json()
        yield front.url, token, accounts["accounts"][0]["wallets"][0]["id"]


@pytest.fixture
async def business_behind(
    api: WalletApi, orchestrator: Any, redis_server: RedisServer
) -> AsyncIterator[tuple[str, Any]]:
    """business-api with wallet-api and the orchestrator behind it; its URL and the business
    (merchant-demo linked to it, funded)."""
    shop = await api.business(client="merchant-demo", funds=1_000 * TL)
    settings = edge_settings(
        api.idp,
        redis_server.url,
        rate_limit_subject=10**6,
        wallet_api_url=api.base_url,
        withdrawals_url=orchestrator(api.idp.base_url, api.base_url),
    )
    async with running_front("business", **settings) as front:
        yield front.url, shop


def _steer(wallet: str, account: str | None = None) -> Any:
    def steer(case: Any) -> None:
        if contract.digest(case)[0] % 2:
            return
        params = case.path_parameters or {}
        if "wallet_id" in params:
            params["wallet_id"] = wallet
        if "account_id" in params and account:
            params["account_id"] = account
        if isinstance(case.body, dict):
            for field in ("from_wallet", "wallet"):
                if field in case.body:
                    case.body[field] = wallet
        if isinstance(case.query, dict) and "wallet" in case.query:
            case.query["wallet"] = wallet
            case.query.pop("cursor", None)
        if "Idempotency-Key" in (case.headers or {}):
            case.headers["Idempotency-Key"] = str(uuid.UUID(bytes=contract.digest(case)[:16]))

    return steer


def test_personal_mobile_api_matches_its_document(personal_behind: tuple[str, str, str]) -> None:
    url, token, wallet = personal_behind
    seen = contract.check_document(url, token=lambda: token, steer=_steer(wallet), accepted=("422", "409"))
    assert any(k.endswith(" 200") for k in seen), seen


def test_business_api_matches_its_document(business_behind: tuple[str, Any]) -> None:
    url, shop = business_behind
    seen = contract.check_document(
        url, token=lambda: shop.token, steer=_steer(shop.wallet_id, shop.account_id), accepted=("422", "409")
    )
    assert any(k.endswith(" 200") for k in seen), seen


async def _registered(onb: Onboarding) -> tuple[str, dict[str, Any]]:
    async with httpx.AsyncClient(base_url=onb.url, timeout=30) as http:
        return await dataclasses.replace(onb, http=http).registered()
