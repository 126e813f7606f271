"""The daily summary's figures equal sums over the statements: Hypothesis drives payments,
transfers (p2p, B2P, B2B) and refunds between a few customers and businesses on a fresh
database per example, the summary job's work runs as wallet-consumer, and every row is compared
with what the wallets' own statements (the ledger's read, page by page) add up to: per business
and in total, per day, the transactions, what came in, what went out, and the fees (the revenue
legs of those transactions). Computed twice, the same rows (the upsert per day)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import date
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hiwallet.core import db
from hiwallet.core.ids import new_id
from hiwallet.ledger import (
    Ledger,
    LedgerError,
    LedgerStore,
    TxType,
    cash_account,
    init_connection,
    promo_account,
)
from hiwallet.reconciliation import TOTAL, read_summary, refresh_summary
from hiwallet.wallet_api.accounts import Accounts
from hiwallet.wallet_api.settings import WalletApiSettings
from tests import pgtemplate
from tests.reconciliation.conftest import FEES, TL

CUSTOMERS, BUSINESSES = 3, 2
operations = st.lists(
    st.tuples(
        st.sampled_from(["payment", "p2p", "b2p", "b2b", "refund"]),
        st.integers(0, 5),
        st.integers(0, 5),
        st.integers(1, 400 * TL),
    ),
    max_size=10,
)


async def _statement(ledger: Ledger, account: str) -> list[Any]:
    lines: list[Any] = []
    cursor = None
    while True:
        page = await ledger.statement(account, cursor=cursor, limit=50)
        lines += page.lines
        if page.next_cursor is None:
            return lines
        cursor = page.next_cursor


async def _expected(
    ledger: Ledger, wallets: dict[str, list[str]]
) -> dict[tuple[str, str, str], tuple[int, ...]]:
    """(day, currency, owner) -> (transactions, in, out, fees) from the statements; owner TOTAL
    over every wallet."""
    fees_of: dict[str, int] = {}

    async def fee(tx: str) -> int:
        if tx not in fees_of:
            legs = (await ledger.transaction(tx)).legs
            fees_of[tx] = sum(leg.amount for leg in legs if ":sys:revenue:" in leg.account)
        return fees_of[tx]

    txs: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    flows: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for owner, ids in wallets.items():
        for wallet in ids:
            for account in (cash_account(wallet), promo_account(wallet)):
                for line in await _statement(ledger, account):
                    for scope in {owner, TOTAL} if owner else {TOTAL}:
                        key = (line.posted_at.date().isoformat(), line.currency, scope)
                        txs[key].add(line.transaction_id)
                        flows[key][0 if line.amount > 0 else 1] += abs(line.amount)
    return {
        key: (len(ids), flows[key][0], flows[key][1], sum([await fee(t) for t in ids]))
        for key, ids in txs.items()
    }


async def _example(
    template: str, ops: list[tuple[str, int, int, int]]
) -> dict[tuple[str, str, str], tuple[int, ...]]:
    database = await pgtemplate.clone(template)
    try:
        api = await db.create_pool(database, role=db.app_role("wallet"), max_size=2, init=init_connection)
        consumer = await db.create_pool(
            database, role=db.app_role("wallet", "wallet_consumer"), max_size=2, init=init_connection
        )
        try:
            ledger = Ledger(LedgerStore(api), FEES)
            accounts = Accounts(api, ledger, WalletApiSettings())
            customers = [(await ledger.open_wallet(f"person-{n}")).wallet_id for n in range(CUSTOMERS)]
            for c in customers:
                await ledger.topup(new_id(), c, 1_000 * TL, provider="stripe", actor="test", ref="fund")
            businesses: dict[str, str] = {}
            for n in range(BUSINESSES):
                view = await accounts.open_business(f"Shop {n}", operator="operator:test")
                businesses[view["id"]] = view["wallets"][0]["id"]
            shops = list(businesses.values())
            payments: list[str] = []
            for kind, i, j, amount in ops:
                try:
                    if kind == "payment":
                        posted = await ledger.payment(
                            new_id(),
                            customers[i % CUSTOMERS],
                            shops[j % BUSINESSES],
                            amount,
                            actor="t",
                            ref="p",
                        )
                        payments.append(posted.id)
                    elif kind == "p2p" and i % CUSTOMERS != j % CUSTOMERS:
                        await ledger.transfer(
                            new_id(),
                            customers[i % CUSTOMERS],
                            customers[j % CUSTOMERS],
                            amount,
                            actor="t",
                            ref="p",
                        )
                    elif kind == "b2p":
                        await ledger.transfer(
                            new_id(),
                            shops[i % BUSINESSES],
                            customers[j % CUSTOMERS],
                            amount,
                            actor="t",
                            ref="p",
                            type_=TxType.B2P,
                        )
                    elif kind == "b2b" and i % BUSINESSES != j % BUSINESSES:
                        await ledger.transfer(
                            new_id(),
                            shops[i % BUSINESSES],
                            shops[j % BUSINESSES],
                            amount,
                            actor="t",
                            ref="p",
                            type_=TxType.B2B,
                        )
                    elif kind == "refund" and payments:
                        await ledger.refund(payments.pop(i % len(payments)), actor="t")
                except LedgerError:
                    pass  # refused (not enough money): nothing moved, nothing to count
            wallets: dict[str, list[str]] = {owner: [w] for owner, w in businesses.items()}
            wallets[""] = customers  # in the totals only
            expected = await _expected(ledger, wallets)
            days = sorted({d for d, _, _ in expected})
            async with consumer.acquire() as conn:
                await refresh_summary(conn, [date.fromisoformat(d) for d in days])
                first = await read_summary(
                    conn, date.fromisoformat(days[0]), date.fromisoformat(days[-1]), account_id=None
                )
                await refresh_summary(conn, [date.fromisoformat(d) for d in days])  # again: the same rows
                second = await read_summary(
                    conn, date.fromisoformat(days[0]), date.fromisoformat(days[-1]), account_id=None
                )
            got = {
                (r.day.isoformat(), r.currency, r.account_id): (
                    r.transactions,
                    r.volume_in_minor,
                    r.volume_out_minor,
                    r.fees_minor,
                )
                for r in first
            }
            assert got == expected
            assert [
                (
                    r.day,
                    r.currency,
                    r.account_id,
                    r.transactions,
                    r.volume_in_minor,
                    r.volume_out_minor,
                    r.fees_minor,
                )
                for r in second
            ] == [
                (
                    r.day,
                    r.currency,
                    r.account_id,
                    r.transactions,
                    r.volume_in_minor,
                    r.volume_out_minor,
                    r.fees_minor,
                )
                for r in first
            ]
            # a business whose wallet never moved has no row; one that moved has one per day
            assert {a for _, _, a in got} <= {TOTAL, *businesses}
            return got
        finally:
            await api.close()
            await consumer.close()
    finally:
        await pgtemplate.drop_database(database)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=operations)
def test_the_summary_equals_the_sums_over_the_statements(
    wallet_template: str, ops: list[tuple[str, int, int, int]]
) -> None:
    asyncio.run(_example(wallet_template, ops))


def test_the_property_is_not_vacuous(wallet_template: str) -> None:
    """One fixed sequence with a payment, a refund and transfers of every kind: fees and both
    directions are in the figures compared above."""
    got = asyncio.run(
        _example(
            wallet_template,
            [
                ("payment", 0, 0, 100 * TL),
                ("payment", 1, 1, 30 * TL),
                ("refund", 0, 0, 1),
                ("b2p", 1, 2, 5 * TL),
                ("b2b", 1, 0, 10 * TL),
                ("p2p", 0, 1, 3 * TL),
            ],
        )
    )
    (total,) = [v for (_, _, owner), v in got.items() if owner == TOTAL]
    shops = [v for (_, _, owner), v in got.items() if owner != TOTAL]
    # 3 top-ups, 2 payments, a refund, b2p, b2b, p2p; fees: 2 % of the payment left (one refunded)
    assert total[0] == 9 and total[3] == 2 * 30 * TL // 100
    assert len(shops) == 2 and all(t > 0 and i > 0 and o > 0 for t, i, o, _ in shops)
