"""Registrations at once and registrations cut short: one user and one account whatever
happens, and a retry (or the sweep) finishes what a crash or an outage left."""

from __future__ import annotations

import asyncio

import pytest

from hiwallet.onboarding.service import FAULT_ENV
from tests.onboarding.conftest import Onboarding, assert_problem, new_email, run_in_service_loop


async def verified_registration(onb: Onboarding, email: str) -> str:
    registration_id = await onb.register(email)
    assert (await onb.verify(registration_id, await onb.email_code(email))).status_code == 200
    return registration_id


async def accounts_of(onb: Onboarding, subject: str) -> list[str]:
    rows = await onb.wallet_sql("SELECT account_id FROM wallet.identity_accounts WHERE subject = $1", subject)
    return [r["account_id"] for r in rows]


async def test_two_registrations_of_one_address_at_once_make_one_user(onb: Onboarding) -> None:
    email = new_email()
    # both started and verified before either has a user (each mail's code is its own)
    first = await onb.register(email)
    first_code = await onb.email_code(email)
    second = await onb.register(email)
    second_code = await onb.email_code(email)
    assert (await onb.verify(first, first_code)).status_code == 200
    assert (await onb.verify(second, second_code)).status_code == 200
    answers = await asyncio.gather(onb.complete(first), onb.complete(second))
    assert sorted(a.status_code for a in answers) == [201, 409]
    assert_problem(next(a for a in answers if a.status_code == 409), "email-registered", 409)
    users = onb.users_with(email)
    assert len(users) == 1
    assert len(await accounts_of(onb, users[0]["id"])) == 1
    assert len(await onb.sql("SELECT id FROM onboarding.customers")) == 1


async def test_one_registration_completed_twice_at_once_makes_one_user_and_one_account(
    onb: Onboarding,
) -> None:
    email = new_email()
    registration_id = await verified_registration(onb, email)
    answers = await asyncio.gather(*(onb.complete(registration_id) for _ in range(3)))
    assert {a.status_code for a in answers} <= {200, 201} and 201 in {a.status_code for a in answers}
    assert len({a.json()["account_id"] for a in answers}) == 1
    users = onb.users_with(email)
    assert len(users) == 1
    assert await accounts_of(onb, users[0]["id"]) == [answers[0].json()["account_id"]]


async def test_a_crash_after_the_user_was_created_is_finished_by_the_retry(
    onb: Onboarding, monkeypatch: pytest.MonkeyPatch
) -> None:
    email = new_email()
    registration_id = await verified_registration(onb, email)
    # the request dies right after identity made the user, before onboarding recorded it
    monkeypatch.setenv(FAULT_ENV, "raise")
    assert_problem(await onb.complete(registration_id), "internal-error", 500)
    users = onb.users_with(email)
    assert len(users) == 1
    rows = await onb.sql("SELECT sub, account_id FROM onboarding.customers")
    assert [(r["sub"], r["account_id"]) for r in rows] == [(None, None)]
    assert await accounts_of(onb, users[0]["id"]) == []
    registration = await onb.sql("SELECT status, customer_id FROM onboarding.registrations")
    assert [tuple(r) for r in registration] == [("email_verified", registration_id)]
    monkeypatch.delenv(FAULT_ENV)
    # the retry adopts the user (made after this registration's claim) and opens the account;
    # the password is the retry's (the customer may have typed another)
    done = await onb.complete(registration_id, "the second password")
    assert done.status_code == 201, done.text
    assert [u["id"] for u in onb.users_with(email)] == [users[0]["id"]]
    assert await accounts_of(onb, users[0]["id"]) == [done.json()["account_id"]]
    onb.token(email, "the second password")


async def test_an_outage_of_wallet_api_is_finished_by_the_retry_or_the_sweep(onb: Onboarding) -> None:
    real = onb.settings.wallet_api_url
    onb.settings.wallet_api_url = "http://127.0.0.1:9"  # nothing listens
    try:
        by_retry = await verified_registration(onb, new_email())
        by_sweep = await verified_registration(onb, new_email())
        for registration_id in (by_retry, by_sweep):
            assert_problem(await onb.complete(registration_id), "dependency-unavailable", 503)
        rows = await onb.sql("SELECT sub, account_id FROM onboarding.customers")
        assert len(rows) == 2 and all(r["sub"] and r["account_id"] is None for r in rows)
    finally:
        onb.settings.wallet_api_url = real
    done = await onb.complete(by_retry)
    assert done.status_code == 201 and done.json()["account_id"]
    # the sweep opens the other's account without its password; its complete then answers it
    assert run_in_service_loop(onb, onb.service.sweep()) >= 1
    opened = await onb.sql("SELECT account_id FROM onboarding.customers WHERE id = $1", by_sweep)
    assert opened[0]["account_id"]
    done = await onb.complete(by_sweep, "any other password")  # the user exists: unused
    assert done.json()["account_id"] == opened[0]["account_id"]


async def test_a_claim_abandoned_without_a_user_does_not_hold_the_address_for_ever(onb: Onboarding) -> None:
    email = new_email()
    abandoned = await verified_registration(onb, email)
    real = onb.settings.customer_issuer_base
    onb.settings.customer_issuer_base = "http://127.0.0.1:9"  # identity is down
    try:
        assert_problem(await onb.complete(abandoned), "dependency-unavailable", 503)
    finally:
        onb.settings.customer_issuer_base = real
    assert [r["sub"] for r in await onb.sql("SELECT sub FROM onboarding.customers")] == [None]
    # while the first registration lives, its claim holds the address
    second = await verified_registration(onb, email)  # a code, not "you have an account"
    assert_problem(await onb.complete(second), "email-registered", 409)
    # once it has expired, the next registration takes the address over
    await onb.sql(
        "UPDATE onboarding.registrations SET expires_at = now() - interval '1 second' WHERE id = $1",
        abandoned,
    )
    done = await onb.complete(second)
    assert done.status_code == 201, done.text
    assert len(onb.users_with(email)) == 1
    assert [r["id"] for r in await onb.sql("SELECT id FROM onboarding.customers")] == [second]


@pytest.mark.parametrize("onboarding_settings", [{"rate_per_address": 2}], indirect=True)
async def test_codes_to_one_address_are_rate_limited(onb: Onboarding) -> None:
    email = new_email()
    registration_id = await onb.register(email)
    assert (await onb.http.post(f"/v1/registrations/{registration_id}/resend")).status_code == 202
    for attempt in (
        onb.http.post("/v1/registrations", json={"email": email}),
        onb.http.post(f"/v1/registrations/{registration_id}/resend"),
    ):
        response = await attempt
        body = assert_problem(response, "rate-limited", 429)
        assert int(response.headers["retry-after"]) == body["retry_after"] > 0
    assert len(await onb.mails_to(email)) == 2
    await onb.register(new_email())  # another address is not held back


@pytest.mark.parametrize("onboarding_settings", [{"rate_per_ip": 3}], indirect=True)
async def test_requests_from_one_address_are_rate_limited_and_forwarded_for_is_not_believed(
    onb: Onboarding,
) -> None:
    for n in range(3):
        await onb.register(new_email(), **{"X-Forwarded-For": f"10.0.0.{n}"})
    response = await onb.http.post(
        "/v1/registrations", json={"email": new_email()}, headers={"X-Forwarded-For": "10.0.0.99"}
    )
    assert_problem(response, "rate-limited", 429)


@pytest.mark.parametrize(
    "onboarding_settings", [{"rate_per_ip": 2, "trusted_proxies": "127.0.0.1"}], indirect=True
)
async def test_behind_a_trusted_proxy_each_client_address_has_its_own_limit(onb: Onboarding) -> None:
    ayse = {"X-Forwarded-For": "203.0.113.7"}
    for _ in range(2):
        await onb.register(new_email(), **ayse)
    response = await onb.http.post("/v1/registrations", json={"email": new_email()}, headers=ayse)
    assert_problem(response, "rate-limited", 429)
    # another client behind the same proxy; a forged address left of the proxy's changes nothing
    await onb.register(new_email(), **{"X-Forwarded-For": "203.0.113.8"})
    forged = {"X-Forwarded-For": "198.51.100.1, 203.0.113.7"}
    response = await onb.http.post("/v1/registrations", json={"email": new_email()}, headers=forged)
    assert_problem(response, "rate-limited", 429)
