"""Who may do what: a member sees and moves; anyone else gets 404 as if nothing existed. Staff
tokens, tokens for another audience, expired and missing tokens are refused."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx

from tests.identity.test_verifier import claims_of, sign, staff_person_token
from tests.wallet_api.conftest import ANY_PROGRAMME, TL, WalletApi, assert_problem, client_token


async def test_a_stranger_gets_404_for_reading_and_moving(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    mallory = await api.customer(funds=100 * TL)
    shop = await api.business(funds=100 * TL)
    t = (await api.transfer(alice, shop.number, 10 * TL)).json()
    before = await api.counts()
    for who in (mallory.auth, api.onboarding):
        for path in (
            f"/v1/accounts/{alice.account_id}",
            f"/v1/wallets/{alice.wallet_id}",
            f"/v1/wallets/{alice.wallet_id}/statement",
            f"/v1/wallets/{alice.wallet_id}/promos",
            f"/v1/wallets/{alice.wallet_id}/overview",
            f"/v1/transfers/{t['id']}",
            f"/v1/accounts/{shop.account_id}",
        ):
            assert_problem(await api.http.get(path, headers=who), "not-found", 404)
    missing_account = alice.account_id[:-4] + "ffff"
    assert_problem(
        await api.http.get(f"/v1/accounts/{missing_account}", headers=mallory.auth), "not-found", 404
    )
    # Moving from someone else's wallet: the same 404, nothing written.
    steal = {"from_wallet": alice.wallet_id, "to_wallet_number": mallory.number, "amount": TL}
    assert_problem(await api.post("/v1/transfers", steal, mallory.auth), "not-found", 404)
    steal_shop = {"from_wallet": shop.wallet_id, "to_wallet_number": mallory.number, "amount": TL}
    assert_problem(await api.post("/v1/transfers", steal_shop, mallory.auth), "not-found", 404)
    assert_problem(await api.post(f"/v1/transfers/{t['id']}/refund", {}, mallory.auth), "not-found", 404)
    expires = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    promo = {**steal_shop, "expires_at": expires, "programme": ANY_PROGRAMME}
    assert_problem(await api.post("/v1/promos", promo, mallory.auth), "not-found", 404)
    r = await api.http.post(
        f"/v1/accounts/{alice.account_id}/wallets", json={"currency": "EUR"}, headers=mallory.auth
    )
    assert_problem(r, "not-found", 404)
    # Another merchant integration does not see this business either.
    other = {"Authorization": f"Bearer {client_token(api.idp, 'merchant-three')}"}
    assert_problem(await api.http.get(f"/v1/wallets/{shop.wallet_id}", headers=other), "not-found", 404)
    assert (await api.http.get("/v1/accounts", headers=other)).json() == {"accounts": []}
    assert await api.counts() == before
    # A malformed or out-of-range id is refused without a lookup.
    r = await api.http.get("/v1/wallets/9999:w:01234567-89ab-7def-8123-456789abcdef", headers=alice.auth)
    assert_problem(r, "not-found", 404)
    assert_problem(await api.http.get("/v1/wallets/nonsense", headers=alice.auth), "not-found", 404)
    assert_problem(await api.http.get("/v1/transfers/0000:x", headers=alice.auth), "not-found", 404)
    await api.verify()


async def test_staff_tokens_are_refused_on_every_customer_endpoint(api: WalletApi) -> None:
    alice = await api.customer(funds=10 * TL)
    bob = await api.customer()
    staff_person = staff_person_token(api.staff_idp)
    staff_service = client_token(api.staff_idp, "staff-admin")
    before = await api.counts()
    for token in (staff_person, staff_service):
        auth = {"Authorization": f"Bearer {token}"}
        calls = [
            api.http.get("/v1/accounts", headers=auth),
            api.http.get(f"/v1/accounts/{alice.account_id}", headers=auth),
            api.http.get(f"/v1/wallets/{alice.wallet_id}", headers=auth),
            api.http.get(f"/v1/wallets/{alice.wallet_id}/statement", headers=auth),
            api.http.get(f"/v1/wallets/{alice.wallet_id}/promos", headers=auth),
            api.http.get(f"/v1/wallets/{alice.wallet_id}/overview", headers=auth),
            api.http.post("/v1/accounts/personal", json={"subject": "x"}, headers=auth),
            api.http.put(f"/v1/accounts/{alice.account_id}/tier", json={"tier": "contracted"}, headers=auth),
            api.post(
                "/v1/transfers",
                {"from_wallet": alice.wallet_id, "to_wallet_number": bob.number, "amount": TL},
                auth,
            ),
        ]
        for call in calls:
            assert_problem(await call, "caller-not-allowed", 403)
    assert await api.counts() == before


async def test_token_refusals(api: WalletApi) -> None:
    alice = await api.customer(funds=10 * TL)
    path = f"/v1/wallets/{alice.wallet_id}"
    assert_problem(await api.http.get(path), "token-missing", 401)
    assert_problem(
        await api.http.get(path, headers={"Authorization": "Bearer nonsense"}), "invalid-token", 401
    )
    claims = claims_of(alice.token)
    expired = sign(api.idp, claims | {"iat": int(time.time()) - 900, "exp": int(time.time()) - 600})
    r = await api.http.get(path, headers={"Authorization": f"Bearer {expired}"})
    assert_problem(r, "token-expired", 401)
    assert "invalid_token" in r.headers["www-authenticate"]
    other_audience = sign(api.idp, claims | {"aud": ["personal-mobile-api"]})
    assert_problem(
        await api.http.get(path, headers={"Authorization": f"Bearer {other_audience}"}), "wrong-audience", 401
    )
    # The same claims signed by the staff realm's key: its issuer does not publish that key.
    forged = sign(api.staff_idp, claims)
    assert_problem(
        await api.http.get(path, headers={"Authorization": f"Bearer {forged}"}), "invalid-token", 401
    )
    async with httpx.AsyncClient(base_url=api.base_url) as raw:
        ok = await raw.get(path, headers=alice.auth)
    assert ok.status_code == 200


async def test_no_token_is_401_before_anything_else_is_looked_at(api: WalletApi) -> None:
    """The money-moving routes read the caller themselves (or, with a path, as a dependency):
    without a token each is 401, whatever its body, key or path holds, and nothing is written."""
    before = await api.counts()
    for path in ("/v1/transfers", "/v1/promos", "/v1/transfers/not-an-id/refund"):
        for body in (b"{", b'{"amount": -1}', b"[]"):
            r = await api.http.post(path, content=body, headers={"Content-Type": "application/json"})
            assert_problem(r, "token-missing", 401)
    assert await api.counts() == before
