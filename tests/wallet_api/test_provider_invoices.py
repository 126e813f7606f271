"""A provider's invoice (issue 24): an employee with ``finance.invoices`` enters it through
wallet-api with an Idempotency-Key, or an operator through ``hiwallet invoices enter``:
provider_expense −amount, nostro +amount, once per (provider, invoice number). Real wallet-api,
real PostgreSQL, real staff-realm tokens (tests/wallet_api/test_staff_money.py's fixtures)."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from hiwallet.contracts.databases import DATABASES
from hiwallet.ledger import Role
from hiwallet.wallet_api import cli as wallet_cli
from hiwallet.wallet_api.staff_money import enter_provider_invoice
from tests.wallet_api.conftest import TL, WalletApi, assert_problem
from tests.wallet_api.test_cli import _in_thread
from tests.wallet_api.test_staff_money import Staff
from tests.wallet_api.test_staff_money import staff as staff
from tests.wallet_api.test_staff_money import staff_admin as staff_admin
from tests.wallet_api.test_staff_money import staff_claims as staff_claims
from tests.wallet_api.test_staff_money import wallet_api_settings as wallet_api_settings

PATH = "/v1/staff/provider-invoices"


def last_month() -> str:
    now = datetime.now(UTC)
    return (now.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")


async def test_an_invoice_names_the_month_it_bills(api: WalletApi, staff: Staff) -> None:
    """The month is kept on the posting (reconciliation's late invoices read it); a month not
    begun, or not a month, is refused with nothing booked; the invoice again under another month
    is another invoice's content: 409."""
    _, auth = staff.employee("finance.invoices")
    before = await books(api)
    number = f"INV-{uuid.uuid4().hex[:8]}"
    body = {"provider": "stripe", "invoice_number": number, "amount_minor": 3 * TL, "period": "2026-01"}
    for period in ("2999-01", "2026-13", "2026-1", "january"):
        refused = await api.post(PATH, {**body, "period": period}, auth)
        assert refused.status_code == 422, (period, refused.text)
    assert await books(api) == before
    entered = await api.post(PATH, body, auth)
    assert entered.status_code == 201, entered.text
    assert entered.json()["period"] == "2026-01"
    posted = await api.ledger.transaction(entered.json()["transaction_id"])
    assert posted.metadata == {"provider": "stripe", "period": "2026-01"}
    assert_problem(
        await api.post(PATH, {**body, "period": "2026-02"}, auth), "invoice-entered-otherwise", 409
    )
    assert await books(api) == (before[0] - 3 * TL, before[1] + 3 * TL)


async def books(api: WalletApi) -> tuple[int, int]:
    store = api.ledger.store
    return (
        await store.system_balance(Role.PROVIDER_EXPENSE, "TRY"),
        await store.system_balance(Role.NOSTRO, "TRY"),
    )


async def test_an_invoice_is_booked_once_whoever_enters_it(api: WalletApi, staff: Staff) -> None:
    actor, auth = staff.employee("finance.invoices")
    other_actor, other = staff.employee("finance.invoices")
    expense, nostro = await books(api)
    number = f"INV-{uuid.uuid4().hex[:8]}"
    body = {"provider": "stripe", "invoice_number": number, "amount_minor": 12 * TL, "currency": "TRY"}
    key = str(uuid.uuid4())
    # the same request twice at once under one key, and the same invoice under another key and
    # by another employee: one posting
    first, again, elsewhere = await asyncio.gather(
        api.post(PATH, body, auth, key=key), api.post(PATH, body, auth, key=key), api.post(PATH, body, other)
    )
    answered = [r for r in (first, again) if r.status_code == 201]
    assert answered, (first.text, again.text)
    assert all(r.status_code in (201, 409) for r in (first, again)), (first.text, again.text)
    assert elsewhere.status_code == 201, elsewhere.text
    transaction = answered[0].json()["transaction_id"]
    assert elsewhere.json()["transaction_id"] == transaction
    assert (answered[0].json()["amount_minor"], answered[0].json()["provider"]) == (12 * TL, "stripe")
    assert answered[0].json()["period"] == last_month()  # no month given: last month's
    replay = await api.post(PATH, body, auth, key=key)
    assert replay.status_code == 201 and replay.json() == answered[0].json()
    assert await books(api) == (expense - 12 * TL, nostro + 12 * TL)
    # whoever of the two entered it first (the requests ran at once) is the posting's actor
    assert (await api.ledger.transaction(transaction)).actor in (actor, other_actor)
    # the same key with another body: 422; the same invoice with another amount: 409, nothing booked
    changed = {**body, "amount_minor": 13 * TL}
    assert_problem(await api.post(PATH, changed, auth, key=key), "idempotency-key-reused", 422)
    assert_problem(await api.post(PATH, changed, auth), "invoice-entered-otherwise", 409)
    # the operator's command takes the same path: the invoice is there already
    posted = await enter_provider_invoice(
        api.ledger,
        provider="stripe",
        invoice_number=number,
        amount=12 * TL,
        currency="TRY",
        period=answered[0].json()["period"],
        actor="operator:x",
    )
    assert posted["transaction_id"] == transaction
    assert await books(api) == (expense - 12 * TL, nostro + 12 * TL)
    await api.verify()


async def test_only_finance_may_enter_an_invoice(api: WalletApi, staff: Staff) -> None:
    _, auth = staff.employee("credit.goodwill", "promo.staff")
    body = {"provider": "stripe", "invoice_number": "INV-1", "amount_minor": TL}
    before = await books(api)
    refused = await api.post(PATH, body, auth)
    assert_problem(refused, "permission-missing", 403)
    assert refused.json()["permission"] == "finance.invoices"
    _, finance = staff.employee("finance.invoices")
    assert (await api.post(PATH, body, finance, key=None)).status_code == 400  # no Idempotency-Key
    assert (await api.post(PATH, {**body, "amount_minor": 0}, finance)).status_code == 422
    assert (await api.post(PATH, {**body, "provider": "Stripe!"}, finance)).status_code == 422
    assert await books(api) == before


async def test_an_operator_enters_an_invoice_once(api: WalletApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hiwallet invoices enter``: the operator as the actor; again, the same posting; another
    amount under the number, refused (exit code 1, nothing booked)."""
    monkeypatch.setitem(DATABASES, "wallet", api.database)
    monkeypatch.setattr(wallet_cli, "get_wallet_api_settings", lambda: api.service.settings)
    monkeypatch.setattr(wallet_cli, "operator", lambda: "operator:ayla")
    runner = CliRunner()
    before = await books(api)
    args = ["invoices", "enter", "--provider", "bank", "--number", "2026/11-7", "--amount-minor", "4500"]
    first = await _in_thread(runner, *args)
    transaction = re.search(r"in transaction (\S+)", first)[1]  # type: ignore[index]
    assert transaction in await _in_thread(runner, *args)
    assert (await api.ledger.transaction(transaction)).actor == "operator:ayla"
    refused = await _in_thread(runner, *args[:-1], "4600", code=1)
    assert "invoice-entered-otherwise" in refused or "another amount" in refused
    assert await books(api) == (before[0] - 4500, before[1] + 4500)
    await api.verify()
