"""Onboarding end to end, over HTTP between real processes (tests/e2e/onboarding.py): the whole
registration and basic verification with the codes read from the mail catcher and sms-fake,
the login and the first own wire -> verified through bank-fake, topup-webhook, wallet-consumer
and RabbitMQ; every refusal the issue lists; onboarding killed between creating the user and
opening the account; two registrations of one address at once; the sealed columns; and no
personal data in any process's log."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest

from hiwallet.onboarding.crypto import KeyRing, Undecryptable, place
from hiwallet.onboarding.settings import DEV_DATA_KEYS
from tests.e2e import harness
from tests.e2e.onboarding import (
    AYSE,
    DECEASED,
    ISMAIL,
    MEHMET,
    NOT_FOUND,
    ONBOARDING,
    PASSWORD,
    UNAVAILABLE,
    OnboardingSystem,
    new_email,
    onboarding_system,
    problem,
)
from tests.edge.conftest import RedisServer, edge_settings, nowhere, running_front
from tests.identity.conftest import IdentityServer


@pytest.fixture(scope="module")
async def system_module(
    vhost: str,
    onboarding_template: str,
    wallet_template: str,
    topup_template: str,
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[OnboardingSystem]:
    log_dir = tmp_path_factory.mktemp("onboarding")
    async with onboarding_system(
        vhost, (onboarding_template, wallet_template, topup_template), customer_idp, staff_idp, log_dir
    ) as running:
        yield running
        # the whole module's run: nothing personal a test sent in any process's log
        assert running.leaks() == [], running.leaks()[:5]


@pytest.fixture
async def system(system_module: OnboardingSystem) -> AsyncIterator[OnboardingSystem]:
    await system_module.heal()
    yield system_module


@pytest.fixture
async def http(system: OnboardingSystem) -> AsyncIterator[httpx.AsyncClient]:
    async with system.http() as client:
        yield client


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def mobile(system: OnboardingSystem, redis_server: RedisServer) -> AsyncIterator[httpx.AsyncClient]:
    """The customer's app's client: personal-mobile-api in front of onboarding and wallet-api."""
    settings = edge_settings(
        system.idp,
        redis_server.url,
        wallet_api_url=system.api.base_url,
        onboarding_url=system.url(ONBOARDING),
        withdrawals_url=nowhere(),
        upstream_read_timeout_s=30.0,
    )
    async with (
        running_front("personal", **settings) as front,
        httpx.AsyncClient(base_url=front.url, timeout=30) as client,
    ):
        yield client


async def test_a_customer_registers_verifies_logs_in_and_is_verified_by_their_first_wire(
    system: OnboardingSystem, mobile: httpx.AsyncClient
) -> None:
    """The whole way through the mobile app's front door (personal-mobile-api): registration,
    verifications, the tier raised by the first own wire, then money sent and read back."""
    http = mobile
    email = new_email()
    registration_id = await system.register(http, email)
    verified = await http.post(
        f"/v1/registrations/{registration_id}/verify", json={"code": await system.email_code(email)}
    )
    assert verified.json() == {"registration_id": registration_id, "status": "email_verified"}
    done = await http.post(f"/v1/registrations/{registration_id}/complete", json={"password": PASSWORD})
    assert done.status_code == 201, done.text
    body = done.json()
    assert body["status"] == "completed" and "login_hint=" in body["login_url"]
    assert body["login_url"].startswith(system.idp.base_url)
    again = await http.post(f"/v1/registrations/{registration_id}/complete", json={"password": PASSWORD})
    assert (again.status_code, again.json()) == (200, body)

    # the login (identity's token endpoint, as the login page's form ends) and wallet-api's
    # account: tier unknown, opened by onboarding
    auth = system.token(email)
    [user] = system.users_with(email)
    [account] = await system.accounts_of(user["id"])
    assert (account["id"], account["tier"]) == (body["account_id"], "unknown")
    me = (await http.get("/v1/me", headers=auth)).json()
    assert (me["tier"], me["phone_verified"], me["identity_verified"]) == ("unknown", False, False)

    phone = await system.verify_phone(http, auth)
    assert (await system.identity(http, auth, AYSE)).status_code == 200
    await system.accept_all(http, auth)
    me = (await http.get("/v1/me", headers=auth)).json()
    assert (me["tier"], me["remaining"]) == ("unverified", [])
    assert AYSE["tckn"] not in str(me) and phone not in str(me)
    assert [a["tier"] for a in await system.accounts_of(user["id"])] == ["unverified"]

    # the first wire from their own account: bank-fake -> topup-webhook -> wallet-consumer
    # (credited, TopupCredited) -> onboarding (the bank's sender TCKN = theirs) -> verified
    customer = await system.customer(user["id"])

    async def wire_from(tckn: str) -> str:
        system.personal.add(tckn)  # through bank-fake, topup-webhook: no log may hold it either
        async with httpx.AsyncClient(base_url=system.url("bank-fake")) as bank:
            wire = await bank.post(
                "/v1/topups",
                json={
                    "sender_name": harness.SENDER_NAME,
                    "sender_iban": harness.SENDER_IBAN,
                    "sender_tckn": tckn,
                    "reference": f"HiWallet {customer['wallet_id']}",
                    "amount_minor": 500_00,
                    "currency": "TRY",
                },
                headers={"Authorization": f"Bearer {harness.BANK_API_KEY}"},
            )
        assert wire.status_code == 200, wire.text
        return str(wire.json()["id"])

    # first a wire from someone else's account: credited, checked, nothing raised
    other = await wire_from(MEHMET["tckn"])

    async def checked() -> list[asyncpg.Record]:
        return await system.fetch(
            system.onboarding_db, "SELECT * FROM onboarding.wire_checks ORDER BY checked_at"
        )

    [first] = await harness.until(checked, 30, "the other's wire checked")
    assert (first["wire_id"], first["result"]) == (other, "other-sender")
    assert [a["tier"] for a in await system.accounts_of(user["id"])] == ["unverified"]
    own = await wire_from(AYSE["tckn"])

    async def tier_verified() -> bool:
        return [a["tier"] for a in await system.accounts_of(user["id"])] == ["verified"]

    async def me_verified() -> bool:
        return bool((await http.get("/v1/me", headers=auth)).json()["tier"] == "verified")

    await harness.until(tier_verified, 30, "the tier verified by the first own wire")
    # onboarding records wallet-api's answer in the consumer's own transaction, which commits
    # after wallet-api's: /v1/me may say "unverified" for that moment (seen under load), so it
    # is waited for too, not read once
    await harness.until(me_verified, 30, "/v1/me saying verified")
    assert [(c["customer_id"], c["wire_id"], c["result"]) for c in await checked()] == [
        (customer["id"], other, "other-sender"),
        (customer["id"], own, "verified"),
    ]

    # the sealed columns: no plaintext in the database; the key ring opens them, another key not
    row = await system.customer(user["id"])
    sealed = {c: bytes(row[c]) for c in ("tckn_enc", "phone_enc", "given_name_enc", "birth_date_enc")}
    for column, blob in sealed.items():
        for plain in (AYSE["tckn"], phone, AYSE["given_name"].encode().decode(), "1990-04-01"):
            assert plain.encode() not in blob, column
    ring = KeyRing.parse(DEV_DATA_KEYS)
    assert ring.open(sealed["tckn_enc"], place("customers", "tckn_enc", row["id"])) == AYSE["tckn"]
    other = KeyRing.parse("dev1:" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=")
    with pytest.raises(Undecryptable):
        other.open(sealed["tckn_enc"], place("customers", "tckn_enc", row["id"]))
    with pytest.raises(Undecryptable):  # the right key, another row: the AAD binds it
        ring.open(sealed["tckn_enc"], place("customers", "tckn_enc", "someone-else"))
    # and no process logged what this customer sent
    assert system.leaks() == []

    # Money through the same door: the two wires' 1,000 TL, 100 TL of it sent to someone else.
    wallet = customer["wallet_id"]
    assert (await http.get(f"/v1/wallets/{wallet}", headers=auth)).json()["cash"] == 1_000_00
    friend = await system.api.customer()
    sent = await http.post(
        "/v1/transfers",
        json={"from_wallet": wallet, "to_wallet_number": friend.number, "amount": 100_00},
        headers={**auth, "Idempotency-Key": str(uuid.uuid4())},
    )
    assert sent.status_code == 201, sent.text
    assert (await http.get(f"/v1/wallets/{wallet}", headers=auth)).json()["cash"] == 900_00
    movements = (await http.get(f"/v1/wallets/{wallet}/movements", headers=auth)).json()["lines"]
    assert [(m["type"], m["balance_after"]) for m in movements] == [
        ("topup", 500_00),
        ("topup", 1_000_00),
        ("p2p", 900_00),
    ]


async def test_every_refusal_of_registration_and_verification(
    system: OnboardingSystem, http: httpx.AsyncClient
) -> None:
    # a wrong code (attempts left), then too many: a new code is needed
    email = new_email()
    registration_id = await system.register(http, email)
    code = await system.email_code(email)
    wrong = f"{(int(code) + 1) % 10**6:06d}"
    body = problem(
        await verify(http, registration_id, wrong),
        "code-invalid",
        422,
    )
    assert body["attempts_left"] == 4
    for _ in range(4):
        await verify(http, registration_id, wrong)
    spent = await verify(http, registration_id, code)
    problem(spent, "too-many-attempts", 429)
    # resending replaces it: the old code is wrong, the new one works
    assert (await http.post(f"/v1/registrations/{registration_id}/resend")).status_code == 202
    fresh = await system.email_code(email, count=2)
    assert (await verify(http, registration_id, fresh)).status_code == 200

    # an expired code (its time moved back in the database, as ten minutes would)
    late = new_email()
    late_id = await system.register(http, late)
    late_code = await system.email_code(late)
    await system.fetch(
        system.onboarding_db,
        "UPDATE onboarding.registrations SET code_expires_at = now() - interval '1 second' WHERE id = $1",
        late_id,
    )
    problem(await verify(http, late_id, late_code), "code-expired", 422)

    # a registered address: the same answer, a "you already have an account" mail, no code
    # that works; nothing revealed
    known, _ = await system.registered(http)
    first = await http.post("/v1/registrations", json={"email": known})
    assert first.status_code == 202 and set(first.json()) == {"registration_id", "expires_at"}
    mails = await harness.until(lambda: _mails(system, known, 2), 20, "the second mail")
    assert _code_in(mails[0]) is None  # no code in it
    guess = await http.post(
        f"/v1/registrations/{first.json()['registration_id']}/verify", json={"code": "123456"}
    )
    problem(guess, "code-invalid", 422)

    # identity refusals: a checksum (before the registry), not found, mismatch, deceased, the
    # registry unavailable (503, Retry-After, nothing recorded: a retry passes)
    email, _ = await system.registered(http)
    auth = system.token(email)
    await system.verify_phone(http, auth)
    bad = {**MEHMET, "tckn": MEHMET["tckn"][:-1] + str((int(MEHMET["tckn"][-1]) + 1) % 10)}
    problem(await system.identity(http, auth, bad), "tckn-invalid", 422)
    # KPS answers only true or false: a number it does not know, details that do not match and a
    # deceased person are one refusal (onboarding/errors.py IdentityMismatch)
    for who in (NOT_FOUND, {**MEHMET, "family_name": "Kaya"}, DECEASED):
        problem(await system.identity(http, auth, who), "identity-mismatch", 422)
    unavailable = await system.identity(http, auth, UNAVAILABLE)
    problem(unavailable, "registry-unavailable", 503)
    assert int(unavailable.headers["retry-after"]) > 0
    me = (await http.get("/v1/me", headers=auth)).json()
    assert me["identity_verified"] is False
    assert (await system.identity(http, auth, MEHMET)).status_code == 200

    # a TCKN bound to another customer
    other, _ = await system.registered(http)
    other_auth = system.token(other)
    problem(await system.identity(http, other_auth, MEHMET), "tckn-taken", 409)
    assert (await system.identity(http, other_auth, ISMAIL)).status_code == 200


async def verify(http: httpx.AsyncClient, registration_id: str, code: str) -> httpx.Response:
    return await http.post(f"/v1/registrations/{registration_id}/verify", json={"code": code})


def _code_in(mail: dict[str, object]) -> str | None:
    found = re.search(r"\b([0-9]{6})\b", str(mail.get("Text", "")))
    return found.group(1) if found else None


async def _mails(system: OnboardingSystem, email: str, count: int) -> list[dict[str, object]] | None:
    mails = await system.mails_to(email)
    return mails if len(mails) >= count else None


async def test_onboarding_killed_between_the_user_and_the_account_finishes_on_retry(
    system: OnboardingSystem, http: httpx.AsyncClient
) -> None:
    dying = await system.replace_onboarding(fault="exit")
    email = new_email()
    registration_id = await system.register(http, email)
    code = await system.email_code(email)
    assert (await verify(http, registration_id, code)).status_code == 200
    with pytest.raises(httpx.TransportError):  # the process dies with the request in hand
        await http.post(f"/v1/registrations/{registration_id}/complete", json={"password": PASSWORD})
    assert await dying.wait_exit() == 70
    [user] = system.users_with(email)  # created: the identity service answered before the death
    assert await system.accounts_of(user["id"]) == []

    await system.heal()  # onboarding again, without the fault
    done = await http.post(f"/v1/registrations/{registration_id}/complete", json={"password": PASSWORD})
    assert done.status_code == 201, done.text
    assert [u["id"] for u in system.users_with(email)] == [user["id"]]  # one user: adopted
    [account] = await system.accounts_of(user["id"])
    assert account["id"] == done.json()["account_id"]
    system.token(email)  # and it logs in with the password of the retry


async def test_two_registrations_of_one_address_at_once_make_one_user(
    system: OnboardingSystem, http: httpx.AsyncClient
) -> None:
    email = new_email()
    first = await system.register(http, email)
    second = await system.register(http, email)
    mails = await harness.until(lambda: _mails(system, email, 2), 20, "two codes")
    codes = {m["ID"]: _code_in(m) for m in mails}
    assert all(codes.values())
    # each registration's own code (a code is bound to its registration): try both on both
    for registration_id in (first, second):
        for code in codes.values():
            got = await verify(http, registration_id, code)
            if got.status_code == 200:
                break
        else:
            raise AssertionError("no code verified the registration")
    answers = await asyncio.gather(
        *(http.post(f"/v1/registrations/{r}/complete", json={"password": PASSWORD}) for r in (first, second))
    )
    # the first to claim the address makes the user; the other is told it is registered (its
    # caller proved the mailbox with the code: nothing is revealed)
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201, 409], [a.text for a in answers]
    assert len(system.users_with(email)) == 1
    [user] = system.users_with(email)
    assert len(await system.accounts_of(user["id"])) == 1
