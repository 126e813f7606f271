"""wallet-consumer's SettlementReported handler on the real wallet database (its own role), in
the transaction the consumer gives it: what matches a top-up is posted once (clearing +gross,
nostro −net, provider_expense −fee in the net model), everything else is a finding and posts
nothing; money is conserved whatever the payout holds (Hypothesis), and the ledger verifies.
The path with real processes and messages is tests/topup_webhook/test_settlements.py."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from typing import Any

import asyncpg
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hiwallet.contracts.settlements import (
    BankStatement,
    BankStatementLine,
    SettlementLine,
    settlement_reported,
)
from hiwallet.core.consumer import IncomingMessage
from hiwallet.core.ids import derived_id
from hiwallet.ledger import Ledger, Role
from hiwallet.wallet_consumer.settlements import SettlementHandler, SettlementMetrics


async def books(ledger: Ledger) -> dict[str, int]:
    store = ledger.store
    return {
        "clearing": await store.system_balance(Role.CLEARING, "TRY", "stripe"),
        "nostro": await store.system_balance(Role.NOSTRO, "TRY"),
        "expense": await store.system_balance(Role.PROVIDER_EXPENSE, "TRY"),
    }


async def topped_up(ledger: Ledger, wallet: str, amount: int) -> str:
    """A card top-up the ledger holds, as wallet-consumer credits one: its Stripe payment id."""
    intent = f"pi_{uuid.uuid4().hex[:20]}"
    key = derived_id("topup", "stripe", intent)
    await ledger.topup(key, wallet, amount, provider="stripe", actor="topup-webhook:stripe", ref="t")
    return intent


def line(
    intent: str | None, gross: int, fee: int, *, type_: str = "charge", net: int | None = None
) -> SettlementLine:
    return SettlementLine(
        line_id=f"txn_{uuid.uuid4().hex[:20]}",
        type=type_,
        provider_payment_id=intent,
        payment_id=derived_id("topup", "stripe", intent) if intent else None,
        gross_minor=gross,
        fee_minor=fee,
        net_minor=gross - fee if net is None else net,
    )


def message(lines: list[SettlementLine], model: str = "net", amount: int | None = None) -> IncomingMessage:
    out = settlement_reported(
        provider="stripe",
        payout_id=f"po_{uuid.uuid4().hex[:20]}",
        currency="TRY",
        model=model,  # type: ignore[arg-type]
        amount_minor=sum(x.net_minor for x in lines) if amount is None else amount,
        paid_at=datetime.now(UTC),
        lines=lines,
    )
    return IncomingMessage(
        message_id=out.message_id,
        type=out.type,
        routing_key=out.routing_key,
        body=orjson.loads(out.body),
        headers={},
        redelivered=False,
        delivery_count=0,
    )


async def handle(pool: asyncpg.Pool, handler: SettlementHandler, msg: IncomingMessage) -> dict[str, Any]:
    async with pool.acquire() as conn, conn.transaction():
        return dict(await handler(conn, msg))


async def kinds(pool: asyncpg.Pool, payout_id: str) -> list[str]:
    rows = await pool.fetch(
        "SELECT kind FROM wallet.reconciliation_findings WHERE details->>'payout_id' = $1 ORDER BY kind",
        payout_id,
    )
    return [r["kind"] for r in rows]


async def test_what_matches_is_posted_and_the_rest_are_findings(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger
) -> None:
    handler = SettlementHandler(consumer_ledger, SettlementMetrics())
    wallet = (await ledger.open_wallet("s", bucket=77)).wallet_id
    a, b, c = [await topped_up(ledger, wallet, amount) for amount in (1_000, 2_000, 3_000)]
    before = await books(ledger)
    good = [line(a, 1_000, 59), line(b, 2_000, 88)]
    bad = [
        line(c, 3_100, 120),  # another amount than the top-up
        line(f"pi_{uuid.uuid4().hex[:20]}", 500, 30),  # no such top-up
        line(c, 3_000, 100, net=2_000),  # net ≠ gross − fee
        line(None, -400, 0, type_="refund"),  # not a payment
    ]
    msg = message(good + bad, amount=999_999)
    outcome = await handle(pool, handler, msg)
    assert (outcome["result"], outcome["gross_minor"], outcome["fee_minor"]) == ("settled", 3_000, 147)
    after = await books(ledger)
    assert after == {
        "clearing": before["clearing"] + 3_000,
        "nostro": before["nostro"] - (3_000 - 147),
        "expense": before["expense"] - 147,
    }
    assert await kinds(pool, msg.body["payout_id"]) == [
        "payout_amount_differs",
        "payout_inconsistent_line",
        "payout_total_differs",
        "payout_unmatched",
        "payout_unsupported_line",
    ]
    # the same top-up in a second payout: a finding, nothing posted
    again = message([line(a, 1_000, 59)])
    assert (await handle(pool, handler, again))["result"] == "nothing-settled"
    assert await kinds(pool, again.body["payout_id"]) == ["payout_already_settled"]
    # the same message handled again (as if its processed_events row were lost): nothing more
    await handle(pool, handler, msg)
    assert await books(ledger) == after
    report = await ledger.store.verify()
    assert report.ok, report.problems


async def test_the_gross_model_posts_no_fee_and_a_fee_in_it_is_a_finding(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger
) -> None:
    handler = SettlementHandler(consumer_ledger, SettlementMetrics())
    wallet = (await ledger.open_wallet("g", bucket=78)).wallet_id
    a, b = [await topped_up(ledger, wallet, amount) for amount in (4_000, 5_000)]
    before = await books(ledger)
    msg = message([line(a, 4_000, 0), line(b, 5_000, 150)], model="gross")
    outcome = await handle(pool, handler, msg)
    assert (outcome["gross_minor"], outcome["fee_minor"]) == (4_000, 0)
    assert await books(ledger) == {
        "clearing": before["clearing"] + 4_000,
        "nostro": before["nostro"] - 4_000,
        "expense": before["expense"],
    }
    assert await kinds(pool, msg.body["payout_id"]) == ["payout_inconsistent_line"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.tuples(
            st.integers(1, 1_000_000),  # the top-up
            st.integers(0, 100_000),  # the fee
            st.sampled_from(["match", "differs", "unknown"]),
        ),
        min_size=1,
        max_size=6,
    ),
    model=st.sampled_from(["net", "gross"]),
)
async def test_money_is_conserved_and_clearing_moves_by_what_matched(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger, lines: list[tuple[int, int, str]], model: str
) -> None:
    handler = SettlementHandler(consumer_ledger, SettlementMetrics())
    wallet = (await ledger.open_wallet("h", bucket=79)).wallet_id
    made, matched_gross, matched_fee = [], 0, 0
    for amount, fee, kind in lines:
        fee = 0 if model == "gross" else min(fee, amount - 1)
        intent = await topped_up(ledger, wallet, amount)
        if kind == "match":
            made.append(line(intent, amount, fee))
            matched_gross, matched_fee = matched_gross + amount, matched_fee + fee
        elif kind == "differs":
            made.append(line(intent, amount + 1, fee))
        else:
            made.append(line(f"pi_{uuid.uuid4().hex[:20]}", amount, fee))
    before = await books(ledger)
    await handle(pool, handler, message(made, model=model))
    after = await books(ledger)
    delta = {k: after[k] - before[k] for k in after}
    assert sum(delta.values()) == 0
    assert delta == {
        "clearing": matched_gross,
        "nostro": -(matched_gross - matched_fee),
        "expense": -matched_fee,
    }


async def test_the_banks_day_keeps_its_whole_statement_once(
    pool: asyncpg.Pool, consumer_ledger: Ledger
) -> None:
    """The bank's day carries its statement: kept in the handler's transaction (every line,
    signed, and the balances), once however often the day is handled; a day with no wire to
    settle keeps it too."""
    day = date(2026, 11, 3)
    lines = [
        BankStatementLine(
            bank_reference="crd_1", customer_reference="po_1", amount_minor=5_000, booked_on=day
        ),
        BankStatementLine(
            bank_reference="trf_1",
            customer_reference="c:bank",
            amount_minor=-2_000,
            booked_on=day,
            saga_id="s-1",
        ),
    ]
    out = settlement_reported(
        provider="bank",
        payout_id=f"statement-{day:%Y%m%d}",
        currency="TRY",
        model="gross",
        amount_minor=0,
        paid_at=datetime.now(UTC),
        lines=[],
        statement=BankStatement(day=day, currency="TRY", opening_minor=100, closing_minor=3_100, lines=lines),
    )
    msg = IncomingMessage(
        message_id=out.message_id,
        type=out.type,
        routing_key=out.routing_key,
        body=orjson.loads(out.body),
        headers={},
        redelivered=False,
        delivery_count=0,
    )
    handler = SettlementHandler(consumer_ledger, SettlementMetrics())
    for _ in range(2):
        assert (await handle(pool, handler, msg))["result"] == "nothing-settled"
    kept = await pool.fetchrow("SELECT opening_minor, closing_minor, lines FROM wallet.bank_statements")
    assert tuple(kept) == (100, 3_100, 2)
    rows = await pool.fetch(
        "SELECT bank_reference, customer_reference, amount_minor, saga_id FROM wallet.bank_statement_lines"
        " ORDER BY position"
    )
    assert [tuple(r) for r in rows] == [("crd_1", "po_1", 5_000, None), ("trf_1", "c:bank", -2_000, "s-1")]
