"""Registration over HTTP: the e-mail code, the password, the user in the customers' realm and
the personal account in wallet-api; every refusal of the issue; the login URL."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from tests.onboarding.conftest import Onboarding, assert_problem, new_email


async def test_a_registration_creates_one_user_and_one_account_and_the_customer_can_log_in(
    onb: Onboarding,
) -> None:
    email = new_email()
    response = await onb.http.post("/v1/registrations", json={"email": email})
    assert response.status_code == 202
    registration_id = response.json()["registration_id"]
    assert set(response.json()) == {"registration_id", "expires_at"}
    verified = await onb.verify(registration_id, await onb.email_code(email))
    assert verified.status_code == 200
    assert verified.json() == {"registration_id": registration_id, "status": "email_verified"}

    done = await onb.complete(registration_id)
    assert done.status_code == 201, done.text
    body = done.json()
    assert body["status"] == "completed" and body["registration_id"] == registration_id
    login = urlsplit(body["login_url"])
    assert body["login_url"].startswith(f"{onb.idp.issuer}/protocol/openid-connect/auth?")
    assert parse_qs(login.query)["login_hint"] == [email]

    users = onb.users_with(email)
    assert len(users) == 1 and users[0]["emailVerified"] and users[0]["enabled"]
    accounts = (
        await onb.wallet_sql(
            "SELECT a.id, a.tier FROM wallet.accounts a JOIN wallet.members m USING (bucket, account_id)"
            " WHERE m.subject = $1",
            users[0]["id"],
        )
        if False
        else await onb.wallet_sql(
            "SELECT account_id, subject FROM wallet.identity_accounts WHERE subject = $1", users[0]["id"]
        )
    )
    assert [a["account_id"] for a in accounts] == [body["account_id"]]
    # the customer logs in with the password; the token's subject is the customer onboarding keeps
    onb.token(email)
    rows = await onb.sql("SELECT sub, account_id, wallet_id, tier FROM onboarding.customers")
    assert [(r["sub"], r["account_id"], r["tier"]) for r in rows] == [
        (users[0]["id"], body["account_id"], "unknown")
    ]
    assert rows[0]["wallet_id"]

    registration = await onb.sql("SELECT status, customer_id FROM onboarding.registrations")
    assert [tuple(r) for r in registration] == [("completed", registration_id)]
    # repeated: the same answer, 200, nothing new
    again = await onb.complete(registration_id)
    assert again.status_code == 200 and again.json() == body
    assert len(onb.users_with(email)) == 1


async def test_a_wrong_code_counts_down_then_too_many_attempts_until_a_resend(onb: Onboarding) -> None:
    email = new_email()
    registration_id = await onb.register(email)
    code = await onb.email_code(email)
    wrong = "000000" if code != "000000" else "111111"
    for left in (4, 3, 2, 1, 0):
        body = assert_problem(await onb.verify(registration_id, wrong), "code-invalid", 422)
        assert body["attempts_left"] == left
    # spent: even the right code is refused now
    assert_problem(await onb.verify(registration_id, code), "too-many-attempts", 429)
    # a resend replaces the code and the attempts; the old code is wrong now
    resent = await onb.http.post(f"/v1/registrations/{registration_id}/resend")
    assert resent.status_code == 202
    new_code = await onb.email_code(email)
    if new_code != code:
        assert_problem(await onb.verify(registration_id, code), "code-invalid", 422)
    assert (await onb.verify(registration_id, new_code)).status_code == 200
    # single use
    assert_problem(await onb.verify(registration_id, new_code), "code-used", 409)


async def test_an_expired_code_is_refused(onb: Onboarding) -> None:
    email = new_email()
    registration_id = await onb.register(email)
    await onb.sql(
        "UPDATE onboarding.registrations SET code_expires_at = now() - interval '1 second' WHERE id = $1",
        registration_id,
    )
    assert_problem(await onb.verify(registration_id, await onb.email_code(email)), "code-expired", 422)


async def test_a_registered_address_is_not_revealed(onb: Onboarding) -> None:
    email, _ = await onb.registered()
    response = await onb.http.post("/v1/registrations", json={"email": email.upper()})
    # the same answer as for a new address
    assert response.status_code == 202 and set(response.json()) == {"registration_id", "expires_at"}
    registration_id = response.json()["registration_id"]
    mails = await onb.mails_to(email)
    assert "already" in mails[0]["Text"] and not any(c.isdigit() for c in mails[0]["Subject"])
    # whatever code is tried, it is wrong, and answered as a wrong code is
    for code in ("123456", "654321"):
        assert_problem(await onb.verify(registration_id, code), "code-invalid", 422)
    assert len(onb.users_with(email)) == 1


async def test_an_address_made_without_onboarding_is_not_revealed_either(onb: Onboarding) -> None:
    email = new_email()
    onb.idp.create_user(email.split("@")[0], email=email)
    registration_id = await onb.register(email)
    assert "already" in (await onb.mails_to(email))[0]["Text"]
    assert_problem(await onb.verify(registration_id, "123456"), "code-invalid", 422)


async def test_the_steps_out_of_order_and_unknown_registrations(onb: Onboarding) -> None:
    email = new_email()
    registration_id = await onb.register(email)
    assert_problem(await onb.complete(registration_id), "email-not-verified", 409)
    missing = "0190aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee"
    assert_problem(await onb.verify(missing, "123456"), "registration-not-found", 404)
    assert_problem(await onb.verify("not-an-id", "123456"), "registration-not-found", 404)
    assert_problem(await onb.complete(missing), "registration-not-found", 404)
    # a short password never reaches the identity service
    assert (await onb.verify(registration_id, await onb.email_code(email))).status_code == 200
    short = await onb.complete(registration_id, "tiny-pw")
    assert_problem(short, "validation-error", 422)
    assert "tiny-pw" not in short.text
    assert onb.users_with(email) == []
    # a code that is not six digits is not an attempt
    assert_problem(await onb.verify(registration_id, "12345"), "validation-error", 422)
