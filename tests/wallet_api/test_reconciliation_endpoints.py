"""wallet-api's reconciliation and daily-summary endpoints (hiwallet.reconciliation): staff with
``finance.reconciliation`` list, page and resolve findings (the resolver is the token's
employee) and run a round; the summary as JSON and CSV to staff, and to a business for itself.

Real wallet-api on a socket, real PostgreSQL, real staff-realm tokens (tests/wallet_api/
test_staff_money.py's employees and staff-admin stand-in)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from hiwallet.contracts.settlements import BankStatement, BankStatementLine
from hiwallet.ledger import cash_account
from hiwallet.reconciliation import (
    BANK_LINE_UNMATCHED,
    PAYOUT_UNMATCHED,
    RECONCILE_LOCK_KEY,
    record_finding,
    refresh_summary,
)
from hiwallet.wallet_consumer.settlements import SettlementHandler
from tests.wallet_api import test_staff_money as _money
from tests.wallet_api.conftest import TL, WalletApi, assert_problem
from tests.wallet_api.test_staff_money import Staff

# test_staff_money's employees, their tokens and staff-admin's stand-in
staff, staff_admin, staff_claims = _money.staff, _money.staff_admin, _money.staff_claims
wallet_api_settings = _money.wallet_api_settings

FINANCE = "finance.reconciliation"
FINDINGS = "/v1/staff/reconciliation/findings"


async def test_every_endpoint_needs_its_permission(api: WalletApi, staff: Staff) -> None:
    _, other = staff.employee("customer.view", "credit.goodwill")
    made_up = "0190b6a4-0000-7000-8000-000000000000"
    for method, path, body in [
        ("GET", FINDINGS, None),
        ("GET", f"{FINDINGS}/{made_up}", None),
        ("POST", f"{FINDINGS}/{made_up}/resolve", {"note": "x"}),
        ("POST", "/v1/staff/reconciliation/runs", None),
        ("GET", "/v1/staff/daily-summary", None),
    ]:
        r = await api.http.request(method, path, json=body, headers=other)
        assert assert_problem(r, "permission-missing", 403)["permission"] == FINANCE
    # a customer's token is not staff's
    alice = await api.customer()
    assert_problem(await api.http.get(FINDINGS, headers=alice.auth), "caller-not-allowed", 403)


async def test_a_planted_discrepancy_is_found_listed_and_resolved_by_the_employee(
    api: WalletApi, staff: Staff
) -> None:
    actor, auth = staff.employee(FINANCE)
    alice = await api.customer(funds=10 * TL)
    ran = await api.http.post("/v1/staff/reconciliation/runs", headers=auth)
    assert ran.status_code == 200, ran.text
    assert ran.json()["found"] == {}  # the top-up's window (stripe: days) has not passed
    await api.as_owner(
        "UPDATE ledger.accounts SET balance = balance + 5 WHERE id = $1", cash_account(alice.wallet_id)
    )
    ran = await api.http.post("/v1/staff/reconciliation/runs", headers=auth)
    assert (ran.json()["found"], ran.json()["new"]) == ({"balance_mismatch": 1}, 1)

    listed = await api.http.get(FINDINGS, params={"status": "open"}, headers=auth)
    assert listed.status_code == 200, listed.text
    [found] = listed.json()["findings"]
    assert (found["kind"], found["subject"]) == ("balance_mismatch", cash_account(alice.wallet_id))
    assert found["details"]["balance"] - found["details"]["lines_total"] == 5

    resolved = await api.http.post(
        f"{FINDINGS}/{found['id']}/resolve", json={"note": "tampering test"}, headers=auth
    )
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert (body["status"], body["resolved_by"], body["resolution_note"]) == (
        "resolved",
        actor,
        "tampering test",
    )
    again = await api.http.post(f"{FINDINGS}/{found['id']}/resolve", json={"note": "twice"}, headers=auth)
    assert assert_problem(again, "finding-resolved", 409)["resolved_by"] == actor
    assert (await api.http.get(FINDINGS, headers=auth)).json()["findings"] == []
    done = (await api.http.get(FINDINGS, params={"status": "resolved"}, headers=auth)).json()["findings"]
    assert [f["id"] for f in done] == [found["id"]]
    assert (await api.http.get(f"{FINDINGS}/{found['id']}", headers=auth)).json()["status"] == "resolved"
    assert_problem(await api.http.get(f"{FINDINGS}/not-an-id", headers=auth), "not-found", 404)
    assert_problem(
        await api.http.post(f"{FINDINGS}/{found['id']}/resolve", json={"note": ""}, headers=auth),
        "validation-error",
        422,
    )


async def test_a_bank_statement_line_the_nostro_lacks_is_found_by_a_staff_round(
    api: WalletApi, staff: Staff
) -> None:
    """The nostro check in the on-demand round, as wallet-api's role (its grants on the kept
    statements): a credit five days old (past the default wait of three) that no nostro line
    answers."""
    _, auth = staff.employee(FINANCE)
    day = datetime.now(UTC).date() - timedelta(days=5)
    line = BankStatementLine(
        bank_reference="crd_stray", customer_reference="po_stray", amount_minor=7 * TL, booked_on=day
    )
    statement = BankStatement(day=day, currency="TRY", opening_minor=0, closing_minor=7 * TL, lines=[line])
    # and the days after it, quiet (the bank writes a statement every day: a day without one is
    # a finding of its own)
    quiet = [
        BankStatement(day=later, currency="TRY", opening_minor=7 * TL, closing_minor=7 * TL, lines=[])
        for later in (day + timedelta(days=n) for n in range(1, 5))
    ]
    async with api.owner_connection() as conn:  # as wallet-consumer keeps the bank's days
        for kept in (statement, *quiet):
            await SettlementHandler._keep_statement(conn, kept)
    ran = await api.http.post("/v1/staff/reconciliation/runs", headers=auth)
    assert ran.status_code == 200, ran.text
    assert ran.json()["found"] == {BANK_LINE_UNMATCHED: 1}
    listed = await api.http.get(FINDINGS, params={"kind": BANK_LINE_UNMATCHED}, headers=auth)
    [found] = listed.json()["findings"]
    assert found["subject"] == f"TRY:{day.isoformat()}:crd_stray"
    assert (found["details"]["amount_minor"], found["details"]["reference"]) == (7 * TL, "payout:po_stray")


async def test_findings_page_by_cursor(api: WalletApi, staff: Staff) -> None:
    _, auth = staff.employee(FINANCE)
    ids = {(await record_finding(api.pool, PAYOUT_UNMATCHED, f"po_{n}", {"n": n})).id for n in range(5)}
    seen: list[str] = []
    params: dict[str, str | int] = {"limit": 2, "kind": PAYOUT_UNMATCHED}
    while True:
        page = (await api.http.get(FINDINGS, params=params, headers=auth)).json()
        seen += [f["id"] for f in page["findings"]]
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert len(seen) == 5 and set(seen) == ids
    assert_problem(
        await api.http.get(FINDINGS, params={"cursor": "nope"}, headers=auth), "invalid-request", 422
    )


@pytest.mark.parametrize("accept_csv", [False, True])
async def test_the_daily_summary_as_json_and_csv_to_staff_and_to_the_business(
    api: WalletApi, staff: Staff, accept_csv: bool
) -> None:
    _, auth = staff.employee(FINANCE)
    shop = await api.business()
    alice = await api.customer(funds=100 * TL)
    paid = await api.transfer(alice, shop.number, 10 * TL)
    assert paid.status_code == 201, paid.text
    fee = (await api.ledger.transaction(paid.json()["id"])).metadata["fee"]
    assert fee > 0  # the default fee policy charges payments
    async with api.owner_connection() as conn:  # the summary job's work, as wallet-consumer does
        await refresh_summary(conn, [datetime.now(UTC).date()])
    today = datetime.now(UTC).date().isoformat()

    staff_rows = (await api.http.get("/v1/staff/daily-summary", headers=auth)).json()["days"]
    by_account = {r["account_id"]: r for r in staff_rows}
    assert by_account[shop.account_id] | {"computed_at": None} == {
        "day": today,
        "currency": "TRY",
        "account_id": shop.account_id,
        "transactions": 1,
        "volume_in_minor": 10 * TL,
        "volume_out_minor": 0,
        "fees_minor": fee,
        "computed_at": None,
    }
    assert by_account[None]["transactions"] == 2  # the top-up and the payment
    assert by_account[None]["fees_minor"] == fee

    headers = {**shop.auth, **({"Accept": "text/csv"} if accept_csv else {})}
    params = {} if accept_csv else {"format": "csv"}
    own = await api.http.get(f"/v1/accounts/{shop.account_id}/daily-summary", params=params, headers=headers)
    assert own.status_code == 200, own.text
    assert own.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(own.text)))
    assert rows == [
        {
            "day": today,
            "currency": "TRY",
            "account_id": shop.account_id,
            "transactions": "1",
            "volume_in_minor": str(10 * TL),
            "volume_out_minor": "0",
            "fees_minor": str(fee),
        }
    ]
    as_json = await api.http.get(f"/v1/accounts/{shop.account_id}/daily-summary", headers=shop.auth)
    assert [r["account_id"] for r in as_json.json()["days"]] == [shop.account_id]
    # not the caller's: the 404 of a missing account; a person's account has no summary
    assert_problem(
        await api.http.get(f"/v1/accounts/{shop.account_id}/daily-summary", headers=alice.auth),
        "not-found",
        404,
    )
    assert_problem(
        await api.http.get(f"/v1/accounts/{alice.account_id}/daily-summary", headers=alice.auth),
        "not-a-business",
        403,
    )
    bad = await api.http.get(
        "/v1/staff/daily-summary", params={"from": "2026-02-01", "to": "2026-01-01"}, headers=auth
    )
    assert_problem(bad, "invalid-request", 422)


async def test_a_round_on_demand_while_another_runs_is_409(api: WalletApi, staff: Staff) -> None:
    _, auth = staff.employee(FINANCE)
    async with api.owner_connection() as conn:
        # another instance's round: the jobs' lock held elsewhere
        await conn.execute("SELECT pg_advisory_lock($1)", RECONCILE_LOCK_KEY)
        assert_problem(
            await api.http.post("/v1/staff/reconciliation/runs", headers=auth), "reconciliation-running", 409
        )
        await conn.execute("SELECT pg_advisory_unlock($1)", RECONCILE_LOCK_KEY)
    ran = await api.http.post("/v1/staff/reconciliation/runs", headers=auth)
    assert ran.status_code == 200, ran.text
