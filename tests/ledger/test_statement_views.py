"""What a statement shows beside its lines: the counterparty (Ledger.counterparties: the other
customer wallet a transfer, a payment or its refund moved money with, found in whichever bucket
it lives; none for a top-up, never the fee's revenue leg) and each day's closing balance
(Ledger.daily_balances, the web app's chart)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hiwallet.ledger import InvalidRequest, Ledger
from hiwallet.ledger.accounts import cash_account
from tests.ledger.conftest import funded_wallet

TL = 100


async def test_each_line_names_the_other_wallet_across_buckets(ledger: Ledger) -> None:
    alice = await funded_wallet(ledger, "alice", 500 * TL, bucket=3)
    bob = await funded_wallet(ledger, "bob", 0, bucket=900)
    shop = await funded_wallet(ledger, "shop", 0, bucket=3)
    sent = await ledger.transfer("p2p-1", alice, bob, 40 * TL, actor="alice", ref="rent")
    paid = await ledger.payment("pay-1", alice, shop, 25 * TL, actor="alice", ref="order")
    refunded = await ledger.refund(paid.id, actor="shop")

    statement = await ledger.statement(cash_account(alice))
    ids = [line.transaction_id for line in statement.lines]
    assert len(ids) == 4  # the funding, the transfer, the payment, the refund
    found = await ledger.counterparties(cash_account(alice), ids)
    assert found == {sent.id: bob, paid.id: shop, refunded.id: shop}
    # and from the other side, in its own bucket
    assert await ledger.counterparties(cash_account(bob), [sent.id]) == {sent.id: alice}
    assert await ledger.counterparties(cash_account(alice), []) == {}


async def test_the_balance_at_the_end_of_each_day(ledger: Ledger) -> None:
    """Each UTC day's closing balance of an account: 0 on the days before its first line, the
    last line's balance on the day it was posted, the same on the days after (none here)."""
    alice = await funded_wallet(ledger, "alice", 100 * TL, bucket=5)
    bob = await funded_wallet(ledger, "bob", 0, bucket=5)
    await ledger.transfer("d-1", alice, bob, 30 * TL, actor="alice", ref="x")
    await ledger.transfer("d-2", alice, bob, 20 * TL, actor="alice", ref="y")
    today = datetime.now(UTC).date()
    account = cash_account(alice)
    assert await ledger.daily_balances(account, today - timedelta(days=2), today) == [
        (today - timedelta(days=2), 0),
        (today - timedelta(days=1), 0),
        (today, 50 * TL),
    ]
    assert await ledger.daily_balances(cash_account(bob), today, today + timedelta(days=1)) == [
        (today, 50 * TL),
        (today + timedelta(days=1), 50 * TL),
    ]
    with pytest.raises(InvalidRequest):
        await ledger.daily_balances(account, today - timedelta(days=400), today)
    with pytest.raises(InvalidRequest):
        await ledger.daily_balances(account, today, today - timedelta(days=1))
