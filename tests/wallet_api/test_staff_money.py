"""wallet-api's staff money (issue 13): staff promo, campaigns with a budget, promo programmes,
goodwill credits with four eyes and a daily ceiling.

Real wallet-api, real PostgreSQL, real tokens of the staff realm (one employee logs in with a
password and TOTP on the identity pages; the tokens of the others are the same claims with
another subject, signed with the staff realm's own active key, so wallet-api verifies them as
it verifies any: a login per employee would cost seconds each). staff-admin's GET /v1/me is
tests/staff_stub.py's stand-in on a real socket, read on every request (the real staff-admin
process is tests/e2e's); it is stopped for real where a test needs it down. After every test
that moves money the ledger verifies clean.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from hiwallet.ledger import Role, cash_account, promo_account, system_account
from tests.identity.conftest import IdentityServer
from tests.identity.test_verifier import sign
from tests.staff_stub import StaffAdminStub, claims_of, staff_login
from tests.wallet_api.conftest import PROBLEM, TL, Customer, WalletApi, assert_problem

ALL = [
    "promo.staff",
    "campaigns.view",
    "campaigns.manage",
    "promo.merchant_accept",
    "credit.goodwill",
]


@pytest.fixture
def staff_admin() -> Iterator[StaffAdminStub]:
    # per test: one test stops it for real
    stub = StaffAdminStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def wallet_api_settings(staff_admin: StaffAdminStub, request: pytest.FixtureRequest) -> dict[str, Any]:
    extra: dict[str, Any] = getattr(request, "param", {})
    return {"staff_admin_url": staff_admin.url, "staff_admin_timeout_s": 1.0, **extra}


@pytest.fixture(scope="module")
def staff_claims(staff_idp: IdentityServer) -> dict[str, Any]:
    """The claims of a real staff-realm token: an employee logs in with password and TOTP."""
    token, _ = staff_login(staff_idp, f"s{uuid.uuid4().hex[:10]}")
    return claims_of(token)


class Staff:
    def __init__(self, api: WalletApi, stub: StaffAdminStub, claims: dict[str, Any]) -> None:
        self.api, self.stub, self.claims = api, stub, claims

    def employee(self, *permissions: str) -> tuple[str, dict[str, str]]:
        """A new employee holding ``permissions``: their actor and their Authorization header."""
        sub = str(uuid.uuid4())
        self.stub.employees[sub] = set(permissions)
        token = sign(self.api.staff_idp, {**self.claims, "sub": sub})
        return f"staff:{sub}", {"Authorization": f"Bearer {token}"}


@pytest.fixture
def staff(api: WalletApi, staff_admin: StaffAdminStub, staff_claims: dict[str, Any]) -> Staff:
    return Staff(api, staff_admin, staff_claims)


def days(n: float) -> str:
    return (datetime.now(UTC) + timedelta(days=n)).isoformat()


async def statement(api: WalletApi, who: Customer, purse: str = "cash") -> list[dict[str, Any]]:
    r = await api.http.get(f"/v1/wallets/{who.wallet_id}/statement?purse={purse}", headers=who.auth)
    assert r.status_code == 200, r.text
    lines: list[dict[str, Any]] = r.json()["lines"]
    return lines


async def actor_of(api: WalletApi, transaction_id: str) -> str:
    return (await api.ledger.transaction(transaction_id)).actor


# ---------------------------------------------------------------------------------------------
# Who may call: every endpoint names one permission
# ---------------------------------------------------------------------------------------------


async def test_every_staff_money_endpoint_needs_its_permission(api: WalletApi, staff: Staff) -> None:
    alice = await api.customer()
    money = {"wallet": alice.wallet_id, "amount_minor": TL}
    promo = {**money, "expires_at": days(7)}
    campaign = {"name": "Kış", "budget_minor": TL, "ends_at": days(7)}
    made_up = uuid.uuid4()  # an id of the right form that names nothing: 404 once let in
    calls: list[tuple[str, str, str, dict[str, Any] | None]] = [
        ("promo.staff", "POST", "/v1/staff/promos", promo),
        ("campaigns.manage", "POST", "/v1/staff/campaigns", campaign),
        ("campaigns.view", "GET", "/v1/staff/campaigns", None),
        ("campaigns.manage", "POST", f"/v1/staff/campaigns/{made_up}/grants", promo),
        ("promo.merchant_accept", "GET", "/v1/staff/promo-programmes?status=proposed", None),
        ("promo.merchant_accept", "POST", f"/v1/staff/promo-programmes/{made_up}/accept", {}),
        ("credit.goodwill", "POST", "/v1/staff/goodwill-credits", {**money, "reason": "late"}),
        ("credit.goodwill", "GET", "/v1/staff/goodwill-credits?status=pending", None),
        ("credit.goodwill", "POST", f"/v1/staff/goodwill-credits/{made_up}/approve", None),
    ]
    everything_else = staff.employee("customer.view", "withdrawal.review", "staff.manage")
    before = await api.counts()
    for permission, method, path, body in calls:
        _, others = staff.employee(*(p for p in ALL if p != permission))
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        for auth in (others, everything_else[1]):
            r = await api.http.request(method, path, json=body, headers={**auth, **headers})
            assert assert_problem(r, "permission-missing", 403)["permission"] == permission
        r = await api.http.request(method, path, json=body, headers={**alice.auth, **headers})
        assert_problem(r, "caller-not-allowed", 403)
        _, holder = staff.employee(permission)
        r = await api.http.request(method, path, json=body, headers={**holder, **headers})
        assert r.status_code in (200, 201, 404), (path, r.text)  # let in (404: the made-up ids)
    # the customer endpoints that move money stay closed to staff
    _, everyone = staff.employee(*ALL)
    move = {"from_wallet": alice.wallet_id, "to_wallet_number": alice.number, "amount": TL}
    assert_problem(await api.post("/v1/transfers", move, everyone), "caller-not-allowed", 403)
    after = await api.counts()
    # what the holders did: one promo grant and one goodwill credit, two legs each
    assert after["lines"] - before["lines"] == 4
    await api.verify()


async def test_a_malformed_id_in_a_staff_path_is_the_404_of_a_missing_one(
    api: WalletApi, staff: Staff
) -> None:
    """As on the customer routes (test_document): the answer says nothing of the id's form."""
    alice = await api.customer()
    _, auth = staff.employee(*ALL)
    bodies = {
        "/v1/staff/campaigns/{campaign_id}/grants": {
            "wallet": alice.wallet_id,
            "amount_minor": TL,
            "expires_at": days(7),
        },
        "/v1/staff/promo-programmes/{programme_id}/accept": {},
        "/v1/staff/promo-programmes/{programme_id}/refuse": {},
    }
    templates = [
        ("GET", "/v1/staff/campaigns/{campaign_id}"),
        ("POST", "/v1/staff/campaigns/{campaign_id}/grants"),
        ("GET", "/v1/staff/promo-programmes/{programme_id}"),
        ("POST", "/v1/staff/promo-programmes/{programme_id}/accept"),
        ("POST", "/v1/staff/promo-programmes/{programme_id}/refuse"),
        ("GET", "/v1/staff/goodwill-credits/{credit_id}"),
        ("POST", "/v1/staff/goodwill-credits/{credit_id}/approve"),
    ]
    before = await api.counts()
    for method, template in templates:
        expected = None
        for value in (str(uuid.uuid4()), "not-an-id", "0001:x", "%00", "x" * 300):
            path = re.sub(r"\{\w+\}", value, template)
            headers = {**auth, "Idempotency-Key": str(uuid.uuid4())}
            r = await api.http.request(method, path, json=bodies.get(template), headers=headers)
            body = assert_problem(r, "not-found", 404)
            body.pop("instance")
            expected = expected or body
            assert body == expected, (method, template, value)
    assert await api.counts() == before


async def test_a_deactivated_employee_is_refused_on_the_next_request(api: WalletApi, staff: Staff) -> None:
    alice = await api.customer()
    actor, auth = staff.employee("credit.goodwill")
    body = {"wallet": alice.wallet_id, "amount_minor": TL, "reason": "sorry"}
    assert (await api.post("/v1/staff/goodwill-credits", body, auth)).status_code == 201
    del staff.stub.employees[actor.removeprefix("staff:")]  # deactivated in staff-admin
    assert_problem(await api.post("/v1/staff/goodwill-credits", body, auth), "staff-not-allowed", 403)
    assert await api.balance(alice.wallet_id) == {"cash": TL, "promo": 0, "held": 0}
    await api.verify()


async def test_staff_admin_down_is_503_for_staff_while_customers_are_served(
    api: WalletApi, staff: Staff
) -> None:
    alice = await api.customer(funds=10 * TL)
    bob = await api.customer()
    _, auth = staff.employee(*ALL)
    staff.stub.stop()
    body = {"wallet": alice.wallet_id, "amount_minor": TL, "reason": "sorry"}
    refused, paid = await asyncio.gather(
        api.post("/v1/staff/goodwill-credits", body, auth), api.transfer(alice, bob.number, TL)
    )
    assert_problem(refused, "staff-admin-unavailable", 503)
    assert refused.headers["retry-after"]
    assert paid.status_code == 201, paid.text
    await api.verify()


# ---------------------------------------------------------------------------------------------
# Platform promo and campaigns
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("wallet_api_settings", [{"staff_promo_daily_ceiling_minor": 50 * TL}], indirect=True)
async def test_staff_promo_is_platform_funded_and_capped_per_employee_and_day(
    api: WalletApi, staff: Staff
) -> None:
    alice = await api.customer()
    actor, auth = staff.employee("promo.staff")
    body = {"wallet": alice.wallet_id, "amount_minor": 30 * TL, "expires_at": days(30), "reference": "özür"}
    first = await api.post("/v1/staff/promos", body, auth, key="promo-1")
    assert first.status_code == 201, first.text
    grant = first.json()
    bucket = int(alice.wallet_id[:4])
    assert {(leg["account"], leg["amount"]) for leg in grant["legs"]} == {
        (promo_account(alice.wallet_id), 30 * TL),
        (system_account(Role.PROMO_EXPENSE, "TRY", bucket=bucket), -30 * TL),
    }
    assert grant["type"] == "promo_grant" and grant["from_wallet"] is None and grant["expires_at"]
    assert await actor_of(api, grant["id"]) == actor
    again = await api.post("/v1/staff/promos", body, auth, key="promo-1")
    assert again.json() == grant and again.headers["idempotent-replayed"] == "true"
    # the customer sees it: their promo purse, and the batch funded by the platform
    [line] = await statement(api, alice, "promo")
    assert (line["type"], line["amount"], line["reference"]) == ("promo_grant", 30 * TL, "özür")
    # 30 + 30 passes the ceiling of 50: refused, nothing written; another employee may
    refused = await api.post("/v1/staff/promos", body, auth)
    assert assert_problem(refused, "daily-ceiling-exceeded", 422)["used"] == 30 * TL
    _, other = staff.employee("promo.staff")
    assert (await api.post("/v1/staff/promos", body, other)).status_code == 201
    assert await api.balance(alice.wallet_id) == {"cash": 0, "promo": 60 * TL, "held": 0}
    # promo goes to personal accounts only
    shop = await api.business()
    to_shop = {**body, "wallet": shop.wallet_id, "amount_minor": TL}
    assert_problem(await api.post("/v1/staff/promos", to_shop, other), "recipient-cannot-receive", 422)
    await api.verify()


async def test_concurrent_grants_never_overspend_a_campaign(api: WalletApi, staff: Staff) -> None:
    customers = [await api.customer() for _ in range(3)]
    _, manager = staff.employee("campaigns.manage", "campaigns.view")
    created = await api.post(
        "/v1/staff/campaigns", {"name": "Yılbaşı", "budget_minor": 10 * TL, "ends_at": days(10)}, manager
    )
    assert created.status_code == 201, created.text
    campaign = created.json()
    assert (campaign["budget_minor"], campaign["remaining_minor"], campaign["currency"]) == (
        10 * TL,
        10 * TL,
        "TRY",
    )

    async def grant(i: int) -> httpx.Response:
        body = {"wallet": customers[i % 3].wallet_id, "amount_minor": TL, "expires_at": days(20)}
        return await api.post(f"/v1/staff/campaigns/{campaign['id']}/grants", body, manager)

    answers = await asyncio.gather(*(grant(i) for i in range(30)))
    granted = [r for r in answers if r.status_code == 201]
    for r in answers:
        if r.status_code != 201:
            assert_problem(r, "budget-exhausted", 422)
    assert len(granted) == 10
    assert sorted(r.json()["campaign_remaining_minor"] for r in granted) == list(range(0, 10 * TL, TL))
    promo = [(await api.balance(c.wallet_id))["promo"] for c in customers]
    assert sum(promo) == 10 * TL
    read = await api.http.get(f"/v1/staff/campaigns/{campaign['id']}", headers=manager)
    assert read.json()["remaining_minor"] == 0
    listed = await api.http.get("/v1/staff/campaigns", headers=manager)
    assert [c["id"] for c in listed.json()["campaigns"]] == [campaign["id"]]
    async with api.owner_connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM wallet.campaign_grants") == 10
        # the database holds the line too: no statement can take the budget below zero
        with pytest.raises(Exception, match="campaigns_never_overspent"):
            await conn.execute("UPDATE wallet.campaigns SET remaining_minor = -1")
    await api.verify()


async def test_a_campaign_is_created_once_under_its_idempotency_key(api: WalletApi, staff: Staff) -> None:
    actor, manager = staff.employee("campaigns.manage", "campaigns.view")
    body = {"name": "Bahar", "budget_minor": 5 * TL, "ends_at": days(10)}
    # no key: refused, nothing made
    assert_problem(
        await api.post("/v1/staff/campaigns", body, manager, key=None), "idempotency-key-missing", 400
    )

    async def count() -> int:
        async with api.owner_connection() as conn:
            return int(await conn.fetchval("SELECT count(*) FROM wallet.campaigns"))

    assert await count() == 0
    # a double click: the same request twice at once under one key makes one campaign; the
    # second either waits for the first and replays it, or is told the first still runs
    answers = await asyncio.gather(
        *(api.post("/v1/staff/campaigns", body, manager, key="c-1") for _ in range(2))
    )
    made = [r for r in answers if r.status_code == 201]
    for r in answers:
        if r.status_code != 201:
            assert_problem(r, "idempotency-in-progress", 409)
    assert made and len({r.json()["id"] for r in made}) == 1
    first = made[0].json()
    assert (first["name"], first["budget_minor"], first["created_by"]) == ("Bahar", 5 * TL, actor)
    assert await count() == 1
    # asked again later: the first campaign, marked as a replay
    again = await api.post("/v1/staff/campaigns", body, manager, key="c-1")
    assert again.status_code == 201, again.text
    assert again.json() == first and again.headers["Idempotent-Replayed"] == "true"
    # another body under the key: 422, nothing made
    other = await api.post("/v1/staff/campaigns", {**body, "budget_minor": 6 * TL}, manager, key="c-1")
    assert_problem(other, "idempotency-key-reused", 422)
    # the key is the employee's: another employee's same key is their own campaign
    _, colleague = staff.employee("campaigns.manage")
    theirs = await api.post("/v1/staff/campaigns", body, colleague, key="c-1")
    assert theirs.status_code == 201 and theirs.json()["id"] != first["id"]
    # a refusal is not stored: the key serves the corrected request
    past = await api.post("/v1/staff/campaigns", {**body, "ends_at": days(-1)}, manager, key="c-2")
    assert assert_problem(past, "invalid-request", 422)["field"] == "ends_at"
    assert (await api.post("/v1/staff/campaigns", body, manager, key="c-2")).status_code == 201
    assert await count() == 3


# ---------------------------------------------------------------------------------------------
# Promo programmes
# ---------------------------------------------------------------------------------------------


async def test_a_business_grants_promo_only_under_an_accepted_programme(api: WalletApi, staff: Staff) -> None:
    shop = await api.business(funds=1_000 * TL)
    alice, bob = await api.customer(), await api.customer()
    proposal = {
        "from_wallet": shop.wallet_id,
        "name": "Kahve kulübü",
        "amount_per_customer": 15 * TL,
        "budget_minor": 25 * TL,
        "expires_at": days(30),
    }
    proposed = await api.http.post("/v1/promo-programmes", json=proposal, headers=shop.auth)
    assert proposed.status_code == 201, proposed.text
    programme = proposed.json()
    assert (programme["status"], programme["remaining_minor"], programme["currency"]) == (
        "proposed",
        25 * TL,
        "TRY",
    )

    def grant(to: Customer, amount: int, **extra: Any) -> dict[str, Any]:
        body = {"from_wallet": shop.wallet_id, "to_wallet_number": to.number, "amount": amount}
        return {**body, "programme": programme["id"], **extra}

    before = await api.counts()
    assert_problem(await api.post("/v1/promos", grant(alice, TL), shop.auth), "programme-not-accepted", 403)
    # a customer cannot propose; nor see the business's programme
    as_alice = {**proposal, "from_wallet": alice.wallet_id}
    r = await api.http.post("/v1/promo-programmes", json=as_alice, headers=alice.auth)
    assert_problem(r, "not-a-business", 403)
    assert_problem(
        await api.http.get(f"/v1/promo-programmes/{programme['id']}", headers=alice.auth), "not-found", 404
    )
    mine = await api.http.get("/v1/promo-programmes", headers=shop.auth)
    assert [p["id"] for p in mine.json()["programmes"]] == [programme["id"]]

    actor, reviewer = staff.employee("promo.merchant_accept")
    waiting = await api.http.get("/v1/staff/promo-programmes?status=proposed", headers=reviewer)
    assert programme["id"] in [p["id"] for p in waiting.json()["programmes"]]
    decide = f"/v1/staff/promo-programmes/{programme['id']}"
    accepted = await api.http.post(f"{decide}/accept", json={}, headers=reviewer)
    assert accepted.status_code == 200, accepted.text
    assert (accepted.json()["status"], accepted.json()["decided_by"]) == ("accepted", actor)
    # asked again: the same answer; the other decision now: 409
    again = await api.http.post(f"{decide}/accept", json={}, headers=reviewer)
    assert again.json() == accepted.json()
    refuse = await api.http.post(f"{decide}/refuse", json={"reason": "late"}, headers=reviewer)
    assert_problem(refuse, "already-decided", 409)
    assert await api.counts() == before

    ok = await api.post("/v1/promos", grant(alice, 10 * TL), shop.auth)
    assert ok.status_code == 201, ok.text
    # no expiry asked for: the programme's
    expiry = datetime.fromisoformat(ok.json()["expires_at"])
    assert expiry == datetime.fromisoformat(programme["expires_at"])
    # at most 15 to one customer, a grant's expiry not past the programme's
    assert_problem(
        await api.post("/v1/promos", grant(alice, 6 * TL), shop.auth),
        "programme-customer-amount-exceeded",
        422,
    )
    assert_problem(
        await api.post("/v1/promos", grant(bob, TL, expires_at=days(31)), shop.auth), "invalid-request", 422
    )
    assert (await api.post("/v1/promos", grant(alice, 5 * TL), shop.auth)).status_code == 201
    # 25 of budget, 15 spent: bob's 15 is more than what is left
    assert_problem(await api.post("/v1/promos", grant(bob, 15 * TL), shop.auth), "budget-exhausted", 422)
    assert (await api.post("/v1/promos", grant(bob, 10 * TL), shop.auth)).status_code == 201
    assert await api.balance(alice.wallet_id) == {"cash": 0, "promo": 15 * TL, "held": 0}
    assert await api.balance(bob.wallet_id) == {"cash": 0, "promo": 10 * TL, "held": 0}
    assert await api.balance(shop.wallet_id) == {"cash": 975 * TL, "promo": 0, "held": 0}

    # a refused programme never grants
    refused_id = await api.programme(shop, accept=False)
    decided = await api.http.post(
        f"/v1/staff/promo-programmes/{refused_id}/refuse", json={"reason": "too broad"}, headers=reviewer
    )
    assert (decided.json()["status"], decided.json()["decision_reason"]) == ("refused", "too broad")
    refused = {**grant(bob, TL), "programme": refused_id}
    assert_problem(await api.post("/v1/promos", refused, shop.auth), "programme-not-accepted", 403)
    await api.verify()


async def test_concurrent_business_grants_never_overspend_a_programme(api: WalletApi) -> None:
    shop = await api.business(funds=1_000 * TL)
    customers = [await api.customer() for _ in range(4)]
    programme = await api.programme(shop, amount_per_customer=3 * TL, budget=10 * TL)

    async def grant(i: int) -> httpx.Response:
        body = {
            "from_wallet": shop.wallet_id,
            "to_wallet_number": customers[i % 4].number,
            "amount": TL,
            "programme": programme,
        }
        return await api.post("/v1/promos", body, shop.auth)

    answers = await asyncio.gather(*(grant(i) for i in range(24)))
    statuses = sorted(r.status_code for r in answers)
    assert statuses.count(201) == 10, [r.text for r in answers if r.status_code != 201][:3]
    for r in answers:
        if r.status_code != 201:
            slug = r.json()["type"].removeprefix(PROBLEM)
            assert slug in ("budget-exhausted", "programme-customer-amount-exceeded"), r.text
    promo = [(await api.balance(c.wallet_id))["promo"] for c in customers]
    assert sum(promo) == 10 * TL and max(promo) <= 3 * TL
    assert (await api.balance(shop.wallet_id))["cash"] == 990 * TL
    await api.verify()


# ---------------------------------------------------------------------------------------------
# Goodwill credits
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wallet_api_settings",
    [{"goodwill_approval_threshold_minor": 20 * TL, "goodwill_daily_ceiling_minor": 100 * TL}],
    indirect=True,
)
async def test_goodwill_above_the_threshold_needs_a_second_employee(api: WalletApi, staff: Staff) -> None:
    alice = await api.customer()
    first, first_auth = staff.employee("credit.goodwill")
    second, second_auth = staff.employee("credit.goodwill")
    small = {"wallet": alice.wallet_id, "amount_minor": 20 * TL, "reason": "late delivery"}
    posted = await api.post("/v1/staff/goodwill-credits", small, first_auth, key="gw-1")
    assert posted.status_code == 201, posted.text
    credit = posted.json()
    assert (credit["status"], credit["requested_by"], credit["approved_by"]) == ("posted", first, None)
    tx = await api.ledger.transaction(credit["transaction_id"])
    assert (tx.type, tx.actor) == ("goodwill", first)
    assert {(leg.account, leg.amount) for leg in tx.legs} == {
        (cash_account(alice.wallet_id), 20 * TL),
        (system_account(Role.GOODWILL_EXPENSE, "TRY"), -20 * TL),
    }
    replay = await api.post("/v1/staff/goodwill-credits", small, first_auth, key="gw-1")
    assert replay.json() == credit and replay.headers["idempotent-replayed"] == "true"

    large = {**small, "amount_minor": 50 * TL, "reason": "broken order"}
    pending = await api.post("/v1/staff/goodwill-credits", large, first_auth)
    assert pending.status_code == 202, pending.text
    credit_id = pending.json()["id"]
    assert pending.json()["status"] == "pending" and pending.json()["transaction_id"] is None
    assert await api.balance(alice.wallet_id) == {"cash": 20 * TL, "promo": 0, "held": 0}
    listed = await api.http.get("/v1/staff/goodwill-credits?status=pending", headers=second_auth)
    assert [c["id"] for c in listed.json()["goodwill_credits"]] == [credit_id]
    # four eyes: never the requester's own approval
    own = await api.http.post(f"/v1/staff/goodwill-credits/{credit_id}/approve", headers=first_auth)
    assert_problem(own, "four-eyes", 403)
    assert await api.balance(alice.wallet_id) == {"cash": 20 * TL, "promo": 0, "held": 0}
    # two approvals at once by the second employee: it moves once
    approvals = await asyncio.gather(
        *(
            api.http.post(f"/v1/staff/goodwill-credits/{credit_id}/approve", headers=second_auth)
            for _ in range(3)
        )
    )
    assert {r.status_code for r in approvals} == {200}, [r.text for r in approvals]
    approved = approvals[0].json()
    assert (approved["status"], approved["approved_by"], approved["requested_by"]) == (
        "posted",
        second,
        first,
    )
    assert await actor_of(api, approved["transaction_id"]) == second
    assert await api.balance(alice.wallet_id) == {"cash": 70 * TL, "promo": 0, "held": 0}
    # the customer sees both credits in their statement, with the reasons
    lines = await statement(api, alice)
    assert [(ln["type"], ln["amount"], ln["reference"]) for ln in lines] == [
        ("goodwill", 20 * TL, "goodwill: late delivery"),
        ("goodwill", 50 * TL, "goodwill: broken order"),
    ]
    # a posted credit is never edited; the database refuses it even to the service's role
    with pytest.raises(Exception, match="posted"):
        await api.pool.execute(
            "UPDATE wallet.goodwill_credits SET status = 'pending' WHERE id = $1", credit_id
        )
    async with api.owner_connection() as conn:
        with pytest.raises(Exception, match="four_eyes"):
            await conn.execute(
                "INSERT INTO wallet.goodwill_credits (id, bucket, wallet_id, currency, amount_minor, reason,"
                " status, requested_by, requested_at, approved_by, approved_at)"
                " VALUES ('x', 1, 'w', 'TRY', 1, 'r', 'pending', 'staff:a', now(), 'staff:a', now())"
            )
    await api.verify()


@pytest.mark.parametrize(
    "wallet_api_settings",
    [{"goodwill_approval_threshold_minor": 1_000 * TL, "goodwill_daily_ceiling_minor": 100 * TL}],
    indirect=True,
)
async def test_the_goodwill_daily_ceiling_holds_under_concurrency(api: WalletApi, staff: Staff) -> None:
    alice = await api.customer()
    _, auth = staff.employee("credit.goodwill")
    body = {"wallet": alice.wallet_id, "amount_minor": 15 * TL, "reason": "outage"}
    answers = await asyncio.gather(*(api.post("/v1/staff/goodwill-credits", body, auth) for _ in range(12)))
    ok = [r for r in answers if r.status_code == 201]
    for r in answers:
        if r.status_code != 201:
            assert_problem(r, "daily-ceiling-exceeded", 422)
    assert len(ok) == 6  # 6 × 15 = 90 of 100; a seventh would be 105
    assert await api.balance(alice.wallet_id) == {"cash": 90 * TL, "promo": 0, "held": 0}
    # a correction is another movement: a second employee credits what was missed
    _, other = staff.employee("credit.goodwill")
    fix = {**body, "amount_minor": 5 * TL, "reason": "correction of an outage credit"}
    assert (await api.post("/v1/staff/goodwill-credits", fix, other)).status_code == 201
    assert await api.balance(alice.wallet_id) == {"cash": 95 * TL, "promo": 0, "held": 0}
    await api.verify()
