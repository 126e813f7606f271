"""The counterparty of a statement's lines (Ledger.counterparties): the other customer wallet a
transfer, a payment or its refund moved money with, found in whichever bucket it lives; none
for a top-up (its other leg is the provider's clearing) and never the fee's revenue leg."""

from __future__ import annotations

from hiwallet.ledger import Ledger
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
