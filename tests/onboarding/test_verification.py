"""Basic verification with the customer's token: phone by SMS, identity against the population
registry (nvi-fake), the consents; then the tier unverified in wallet-api. Every refusal."""

from __future__ import annotations

import httpx

from tests.identity.conftest import IdentityServer
from tests.onboarding.conftest import (
    AYSE,
    DECEASED,
    ISMAIL,
    MEHMET,
    NOT_FOUND,
    UNAVAILABLE,
    Onboarding,
    assert_problem,
    service_token,
)
from tests.wallet_api.conftest import client_token


async def wallet_tier(onb: Onboarding, account_id: str) -> str:
    rows = await onb.wallet_sql("SELECT tier FROM wallet.accounts WHERE id = $1", account_id)
    return str(rows[0]["tier"])


async def test_phone_identity_and_consents_make_the_account_unverified(onb: Onboarding) -> None:
    _, auth = await onb.customer()
    me = (await onb.http.get("/v1/me", headers=auth)).json()
    assert me["tier"] == "unknown" and me["remaining"] == [
        "phone",
        "identity",
        "user_agreement",
        "privacy_notice",
    ]
    account_id = me["account_id"]

    phone = "+905321110001"
    sent = await onb.http.post("/v1/me/phone", json={"phone": "0532 111 00 01"}, headers=auth)
    assert sent.status_code == 202 and sent.json()["phone"] == "+90********01"
    verified = await onb.http.post(
        "/v1/me/phone/verify", json={"code": await onb.sms_code(phone)}, headers=auth
    )
    assert verified.status_code == 200 and verified.json()["phone_verified"]

    identity = await onb.http.post("/v1/me/identity", json=ISMAIL, headers=auth)  # lower case, Turkish i
    assert identity.status_code == 200, identity.text
    assert identity.json()["identity_verified"] and identity.json()["tier"] == "unknown"
    # the same identity again: harmless
    assert (await onb.http.post("/v1/me/identity", json=ISMAIL, headers=auth)).status_code == 200

    first = await onb.http.post(
        "/v1/me/consents", json={"document": "user_agreement", "version": "2026-01"}, headers=auth
    )
    assert first.json()["remaining"] == ["privacy_notice"] and first.json()["tier"] == "unknown"
    last = await onb.http.post(
        "/v1/me/consents", json={"document": "privacy_notice", "version": "2026-01"}, headers=auth
    )
    body = last.json()
    assert body["tier"] == "unverified" and body["remaining"] == []
    assert [(c["document"], c["version"]) for c in body["consents"]] == [
        ("user_agreement", "2026-01"),
        ("privacy_notice", "2026-01"),
    ]
    assert await wallet_tier(onb, account_id) == "unverified"
    # a repeat is harmless, and nothing in the answer is the TCKN or the whole number
    again = await onb.accept_all(auth)
    assert again.status_code == 200 and again.json()["tier"] == "unverified"
    assert ISMAIL["tckn"] not in again.text and phone not in again.text

    metrics = (await onb.http.get("/metrics")).text
    for line in (
        'hiwallet_onboarding_verifications_total{kind="identity",outcome="ok"} 2.0',
        'hiwallet_onboarding_verifications_total{kind="phone",outcome="ok"} 1.0',
        'hiwallet_onboarding_tier_raises_total{outcome="done",tier="unverified"} 1.0',
        'hiwallet_onboarding_registrations_total{step="completed"} 1.0',
        'hiwallet_onboarding_dependency_seconds_count{dependency="registry",operation="check"} 1.0',
        'hiwallet_onboarding_dependency_seconds_count{dependency="identity",operation="create_user"} 1.0',
    ):
        assert line in metrics, line
    assert ISMAIL["tckn"] not in metrics and phone[1:] not in metrics and "@" not in metrics


async def test_identity_refusals(onb: Onboarding) -> None:
    _, auth = await onb.customer()
    # the checksum is checked first: the registry is not even asked (it is made unavailable)
    async with httpx.AsyncClient(base_url=onb.nvi_url) as nvi:
        await nvi.put("/_control/unavailable", json={"unavailable": True})
        try:
            bad = {**AYSE, "tckn": "10000000147"}
            assert_problem(
                await onb.http.post("/v1/me/identity", json=bad, headers=auth), "tckn-invalid", 422
            )
        finally:
            await nvi.delete("/_control/unavailable")
    for who in (NOT_FOUND, DECEASED, {**AYSE, "family_name": "Kaya"}, {**AYSE, "birth_date": "1991-04-01"}):
        response = await onb.http.post("/v1/me/identity", json=who, headers=auth)
        assert_problem(response, "identity-mismatch", 422)
    # unavailable: 503, retryable, nothing recorded
    response = await onb.http.post("/v1/me/identity", json=UNAVAILABLE, headers=auth)
    assert_problem(response, "registry-unavailable", 503)
    assert int(response.headers["retry-after"]) > 0
    me = (await onb.http.get("/v1/me", headers=auth)).json()
    assert not me["identity_verified"]
    assert (await onb.sql("SELECT count(*) AS n FROM onboarding.customers WHERE tckn_hash IS NOT NULL"))[0][
        "n"
    ] == 0
    # then it works
    assert (await onb.http.post("/v1/me/identity", json=MEHMET, headers=auth)).status_code == 200
    # and another number for the same customer is refused
    response = await onb.http.post("/v1/me/identity", json=AYSE, headers=auth)
    assert_problem(response, "identity-already-verified", 409)


async def test_a_tckn_bound_to_another_customer_is_refused(onb: Onboarding) -> None:
    _, first = await onb.customer()
    _, second = await onb.customer()
    assert (await onb.http.post("/v1/me/identity", json=AYSE, headers=first)).status_code == 200
    response = await onb.http.post("/v1/me/identity", json=AYSE, headers=second)
    assert_problem(response, "tckn-taken", 409)
    assert AYSE["tckn"] not in response.text


async def test_phone_refusals(onb: Onboarding) -> None:
    _, auth = await onb.customer()
    for wrong in ("+90 212 111 00 01", "12345", "+0123456789"):
        response = await onb.http.post("/v1/me/phone", json={"phone": wrong}, headers=auth)
        assert response.status_code == 422, (wrong, response.text)
    assert_problem(
        await onb.http.post("/v1/me/phone/verify", json={"code": "123456"}, headers=auth),
        "phone-code-missing",
        409,
    )
    phone = "+905321110002"
    assert (await onb.http.post("/v1/me/phone", json={"phone": phone}, headers=auth)).status_code == 202
    code = await onb.sms_code(phone)
    wrong = "000000" if code != "000000" else "111111"
    body = assert_problem(
        await onb.http.post("/v1/me/phone/verify", json={"code": wrong}, headers=auth), "code-invalid", 422
    )
    assert body["attempts_left"] == 4
    await onb.sql("UPDATE onboarding.phone_codes SET expires_at = now() - interval '1 second'")
    assert_problem(
        await onb.http.post("/v1/me/phone/verify", json={"code": code}, headers=auth), "code-expired", 422
    )


async def test_a_consent_of_another_version_is_refused(onb: Onboarding) -> None:
    _, auth = await onb.customer()
    response = await onb.http.post(
        "/v1/me/consents", json={"document": "user_agreement", "version": "2025-01"}, headers=auth
    )
    assert assert_problem(response, "consent-version-invalid", 422)["current"] == "2026-01"
    response = await onb.http.post(
        "/v1/me/consents", json={"document": "cookies", "version": "1"}, headers=auth
    )
    assert_problem(response, "validation-error", 422)


async def test_only_a_customers_own_token(onb: Onboarding, staff_idp: IdentityServer) -> None:
    assert (await onb.http.get("/v1/me")).status_code == 401
    # a service account of the customers' realm (onboarding's own), and one of the staff realm
    for token in (service_token(onb.idp), client_token(staff_idp, "staff-admin")):
        refused = await onb.http.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert_problem(refused, "caller-not-allowed", 403)
    forged = await onb.http.get("/v1/me", headers={"Authorization": "Bearer eyJhbGciOiJub25lIn0.e30."})
    assert forged.status_code == 401
    # a customer of the realm not registered through onboarding
    onb.idp.create_user("outsider-" + onb.database[-8:], password="correct horse battery")
    token = onb.token(f"outsider-{onb.database[-8:]}@example.com", "correct horse battery")
    assert_problem(
        await onb.http.get("/v1/me", headers={"Authorization": f"Bearer {token}"}), "customer-not-found", 404
    )


async def test_a_tier_raise_wallet_api_missed_is_finished_later(onb: Onboarding) -> None:
    _, auth = await onb.customer()
    account_id = (await onb.http.get("/v1/me", headers=auth)).json()["account_id"]
    assert (await onb.verify_phone(auth, "+905321110003")).status_code == 200
    assert (await onb.http.post("/v1/me/identity", json=AYSE, headers=auth)).status_code == 200
    real = onb.settings.wallet_api_url
    onb.settings.wallet_api_url = "http://127.0.0.1:9"  # nothing listens: wallet-api is down
    try:
        response = await onb.accept_all(auth)
        # the customer's steps are done and answered; the tier waits for wallet-api
        assert response.status_code == 200 and response.json()["remaining"] == []
        assert response.json()["tier"] == "unknown"
        assert await wallet_tier(onb, account_id) == "unknown"
        rows = await onb.sql(
            "SELECT tier, tier_wanted FROM onboarding.customers WHERE account_id = $1", account_id
        )
        assert (rows[0]["tier"], rows[0]["tier_wanted"]) == ("unknown", "unverified")
    finally:
        onb.settings.wallet_api_url = real
    # the next call (or the sweep) finishes it
    assert (await onb.http.get("/v1/me", headers=auth)).json()["tier"] == "unverified"
    assert await wallet_tier(onb, account_id) == "unverified"
