"""Accounts and wallets: opened by onboarding only, tiers only go up, one wallet per currency,
wallet numbers that carry their bucket and a check digit."""

from __future__ import annotations

import asyncio

from hiwallet.wallet_api.domain import luhn_valid
from tests.wallet_api.conftest import WalletApi, assert_problem, client_token, password_token, subject_of


async def test_onboarding_opens_a_personal_account_with_a_try_wallet(api: WalletApi) -> None:
    api.idp.create_user("ayse-open")
    token = password_token(api.idp, "ayse-open")
    subject = subject_of(token)
    opened = await api.http.post("/v1/accounts/personal", json={"subject": subject}, headers=api.onboarding)
    assert opened.status_code == 201, opened.text
    account = opened.json()
    assert account["kind"] == "personal" and account["tier"] == "unknown" and account["name"] is None
    [wallet] = account["wallets"]
    assert wallet["currency"] == "TRY"
    bucket = account["id"][:4]
    # The account, its wallet and its number share the bucket; the number has a check digit.
    assert wallet["id"].startswith(bucket + ":w:") and wallet["number"][:4] == bucket
    assert len(wallet["number"]) == 16 and luhn_valid(wallet["number"])

    # The customer became its member: they see it, and it is listed as theirs.
    me = {"Authorization": f"Bearer {token}"}
    assert (await api.http.get(f"/v1/accounts/{account['id']}", headers=me)).json() == account
    listed = await api.http.get("/v1/accounts", headers=me)
    assert listed.status_code == 200 and listed.json() == {"accounts": [account]}
    row = await api.pool.fetchrow("SELECT opened_by FROM wallet.accounts WHERE id = $1", account["id"])
    assert row["opened_by"].startswith("client:onboarding:")

    # Asked again (a retry of onboarding): the same account, not a second one.
    again = await api.http.post("/v1/accounts/personal", json={"subject": subject}, headers=api.onboarding)
    assert again.status_code == 200 and again.json() == account
    assert (await api.counts())["accounts"] == 1


async def test_concurrent_opens_for_one_person_make_one_account(api: WalletApi) -> None:
    body = {"subject": "0b3f9d1e-1111-4c8e-9a55-123456789abc"}
    answers = await asyncio.gather(
        *(api.http.post("/v1/accounts/personal", json=body, headers=api.onboarding) for _ in range(6))
    )
    assert sorted(r.status_code for r in answers) == [200] * 5 + [201]
    assert len({r.json()["id"] for r in answers}) == 1
    counts = await api.counts()
    assert counts["accounts"] == 1 and counts["wallets"] == 1
    await api.verify()


async def test_only_onboarding_opens_accounts_and_changes_tiers(api: WalletApi) -> None:
    customer = await api.customer("unverified")
    merchant = {"Authorization": f"Bearer {client_token(api.idp, 'merchant-demo')}"}
    for auth in (customer.auth, merchant):
        r = await api.http.post("/v1/accounts/personal", json={"subject": "someone"}, headers=auth)
        assert_problem(r, "onboarding-only", 403)
        r = await api.http.put(
            f"/v1/accounts/{customer.account_id}/tier", json={"tier": "contracted"}, headers=auth
        )
        assert_problem(r, "onboarding-only", 403)
    account = await api.http.get(f"/v1/accounts/{customer.account_id}", headers=customer.auth)
    assert account.json()["tier"] == "unverified"
    assert (await api.counts())["accounts"] == 1


async def test_a_tier_only_goes_up(api: WalletApi) -> None:
    customer = await api.customer("unknown")
    path = f"/v1/accounts/{customer.account_id}/tier"
    for tier in ("unverified", "verified", "verified"):
        r = await api.http.put(path, json={"tier": tier}, headers=api.onboarding)
        assert r.status_code == 200 and r.json()["tier"] == tier
    # the highest tier is staff's, on evidence: onboarding's raise refuses it, nothing changed
    refused = await api.http.put(path, json={"tier": "contracted"}, headers=api.onboarding)
    assert assert_problem(refused, "contract-required", 403)["requested"] == "contracted"
    assert (await api.http.get(f"/v1/accounts/{customer.account_id}", headers=customer.auth)).json()[
        "tier"
    ] == "verified"
    await api.contract(customer.account_id)
    for lower in ("verified", "unverified", "unknown"):
        body = assert_problem(
            await api.http.put(path, json={"tier": lower}, headers=api.onboarding), "tier-downgrade", 409
        )
        assert body["current"] == "contracted" and body["requested"] == lower
    assert_problem(
        await api.http.put(path, json={"tier": "gold"}, headers=api.onboarding), "validation-error", 422
    )
    business = await api.business()
    r = await api.http.put(
        f"/v1/accounts/{business.account_id}/tier", json={"tier": "verified"}, headers=api.onboarding
    )
    assert_problem(r, "not-a-personal-account", 422)
    missing = "0001:a:01234567-89ab-7def-8123-456789abcdef"
    r = await api.http.put(f"/v1/accounts/{missing}/tier", json={"tier": "verified"}, headers=api.onboarding)
    assert_problem(r, "not-found", 404)


async def test_one_wallet_per_currency(api: WalletApi) -> None:
    customer = await api.customer()
    path = f"/v1/accounts/{customer.account_id}/wallets"
    eur = await api.http.post(path, json={"currency": "EUR"}, headers=customer.auth)
    assert eur.status_code == 201, eur.text
    wallet = eur.json()
    assert wallet["currency"] == "EUR" and wallet["cash"] == wallet["promo"] == wallet["available"] == 0
    assert wallet["number"][:4] == customer.account_id[:4]
    again = await api.http.post(path, json={"currency": "EUR"}, headers=customer.auth)
    assert again.status_code == 200 and again.json()["id"] == wallet["id"]
    try_again = await api.http.post(path, json={"currency": "TRY"}, headers=customer.auth)
    assert try_again.status_code == 200 and try_again.json()["id"] == customer.wallet_id
    body = assert_problem(
        await api.http.post(path, json={"currency": "XAU"}, headers=customer.auth),
        "unsupported-currency",
        422,
    )
    assert "TRY" in body["supported"]
    account = (await api.http.get(f"/v1/accounts/{customer.account_id}", headers=customer.auth)).json()
    assert sorted(w["currency"] for w in account["wallets"]) == ["EUR", "TRY"]
    await api.verify()


async def test_a_business_linked_to_an_integration(api: WalletApi) -> None:
    business = await api.business("Simit Sarayı")
    r = await api.http.get("/v1/accounts", headers=business.auth)
    assert r.status_code == 200
    [account] = r.json()["accounts"]
    assert account["id"] == business.account_id and account["kind"] == "business"
    assert account["tier"] is None and account["name"] == "Simit Sarayı"
