"""Every posting rule, with the legs of the architecture document's examples (in kuruş)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiwallet.ledger.accounts import Role, cash_account, promo_account, system_account
from hiwallet.ledger.errors import HoldNotUsable, InsufficientFunds, NothingToExpire, NotRefundable
from hiwallet.ledger.model import PostResult, TxType
from hiwallet.ledger.rules import MAX_AMOUNT_MINOR, FeePolicy
from hiwallet.ledger.service import Ledger
from tests import pgtemplate
from tests.ledger.conftest import TL, assert_verified, cash, documented_fee, funded_wallet

A, B = 7, 900  # two buckets, so that transfers cross shards as they will on Citus


def legs(result: PostResult) -> dict[str, int]:
    """The legs a rule wrote, transit legs aside (they must net to zero among themselves)."""
    transit = [line.amount for line in result.lines if ":sys:transit:" in line.account]
    assert sum(transit) == 0
    return {line.account: line.amount for line in result.lines if ":sys:transit:" not in line.account}


def clearing(provider: str, bucket: int) -> str:
    return system_account(Role.CLEARING, "TRY", bucket=bucket, provider=provider)


def revenue(bucket: int) -> str:
    return system_account(Role.REVENUE, "TRY", bucket=bucket)


async def test_topup(ledger: Ledger) -> None:
    w = (await ledger.open_wallet("alice", bucket=A)).wallet_id
    r = await ledger.topup("t1", w, 100 * TL, provider="stripe", actor="test", ref="pi_1")
    assert legs(r) == {cash_account(w): 100 * TL, clearing("stripe", A): -100 * TL}
    # a top-up by bank transfer goes to the bank's clearing account
    r = await ledger.topup("t2", w, 100 * TL, provider="bank", actor="test", ref="wire_1")
    assert legs(r) == {cash_account(w): 100 * TL, clearing("bank", A): -100 * TL}
    assert await ledger.store.system_balance(Role.CLEARING, "TRY", "stripe") == -100 * TL
    await assert_verified(ledger.store)


async def test_p2p(ledger: Ledger) -> None:
    sender = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    receiver = await funded_wallet(ledger, "bob", 0, bucket=B)
    r = await ledger.transfer("p1", sender, receiver, 100 * TL, actor="alice", ref="dinner")
    assert legs(r) == {cash_account(sender): -100 * TL, cash_account(receiver): 100 * TL}
    assert (await ledger.store.transaction(r.id)).type == "p2p"
    await assert_verified(ledger.store)


@pytest.mark.parametrize("type_", [TxType.B2P, TxType.B2B])
async def test_business_transfers(ledger: Ledger, type_: TxType) -> None:
    business = await funded_wallet(ledger, "acme", 100 * TL, bucket=A)
    other = await funded_wallet(ledger, "someone", 0, bucket=B)
    r = await ledger.transfer("b1", business, other, 30 * TL, actor="acme", ref="payout", type_=type_)
    assert legs(r) == {cash_account(business): -30 * TL, cash_account(other): 30 * TL}
    assert (await ledger.store.transaction(r.id)).type == type_.value


async def test_payment_with_fee(ledger: Ledger) -> None:
    payer = await funded_wallet(ledger, "alice", 200 * TL, bucket=A)
    merchant = await funded_wallet(ledger, "shop", 0, bucket=B)
    r = await ledger.payment("pay1", payer, merchant, 100 * TL, actor="alice", ref="order-1")
    assert legs(r) == {cash_account(payer): -102 * TL, cash_account(merchant): 100 * TL, revenue(A): 2 * TL}
    await assert_verified(ledger.store)


# Half-up rounding at its edges, each fee worked out by hand: (fee policy, amount, fee).
MAX = MAX_AMOUNT_MINOR
FEE_EDGES = [
    (FeePolicy(bps=200), 1, 0),  # the smallest amount: 0.02 kuruş
    (FeePolicy(bps=200), 24, 0),  # 0.48
    (FeePolicy(bps=200), 25, 1),  # exactly 0.5: up
    (FeePolicy(bps=200), 26, 1),  # 0.52
    (FeePolicy(bps=200), 75, 2),  # 1.5: up
    (FeePolicy(bps=200), 125, 3),  # 2.5: up (to even would give 2)
    (FeePolicy(bps=150), 33, 0),  # 0.495: x.49…, down
    (FeePolicy(bps=150), 34, 1),  # 0.51
    (FeePolicy(bps=1), 4_999, 0),  # 0.4999
    (FeePolicy(bps=1), 5_000, 1),  # 0.5
    (FeePolicy(bps=1), 5_001, 1),  # 0.5001
    (FeePolicy(bps=1), 14_999, 1),  # 1.4999
    (FeePolicy(bps=1), 15_000, 2),  # 1.5
    (FeePolicy(bps=200), MAX, 20_000_000_000_000),  # the largest amount
    (FeePolicy(bps=200), MAX - 25, 20_000_000_000_000),  # 19,999,999,999,999.5: up
    (FeePolicy(bps=1), MAX - 5_000, 100_000_000_000),  # 99,999,999,999.5: up
    (FeePolicy(bps=1), MAX - 5_001, 99_999_999_999),  # 99,999,999,999.4999: down
    (FeePolicy(bps=10_000), MAX, MAX),  # all of it
    (FeePolicy(bps=21), 737_361_557_222_619, 1_548_459_270_167),  # …167.4999: down (a float says up)
    (FeePolicy(bps=200, min_minor=100), 25, 100),  # the minimum wins
    (FeePolicy(bps=200, min_minor=100), 5_025, 101),  # 100.5 rounds up past the minimum
    (FeePolicy(bps=200, fixed_minor=2 * TL), 25, 201),  # fixed on top of the rounded part
    (FeePolicy(fixed_minor=2 * TL), MAX, 2 * TL),  # the withdrawal fee: flat
]


@pytest.mark.parametrize(("policy", "amount", "fee"), FEE_EDGES)
def test_fee_rounds_half_up_at_its_edges(policy: FeePolicy, amount: int, fee: int) -> None:
    assert documented_fee(amount, policy) == fee  # the tests' own reading of the docs agrees
    assert policy.fee(amount) == fee


@st.composite
def amounts_and_bps(draw: st.DrawFn) -> tuple[int, int]:
    """Any amount, or one within a few kuruş of a fee of exactly x.5 kuruş (where half up,
    half down, half to even and floating point part ways)."""
    bps = draw(st.integers(1, 10_000) | st.sampled_from([1, 2, 5, 25, 150, 200, 10_000]))
    if draw(st.booleans()):
        return draw(st.integers(1, MAX_AMOUNT_MINOR)), bps
    top = MAX_AMOUNT_MINOR * bps // 10_000
    # a fee of half + 0.5; near the top too, where a float has lost the half already
    half = draw(st.integers(0, top) | st.integers(max(0, top - 1_000), top))
    amount = -(-(2 * half + 1) * 5_000 // bps) + draw(st.integers(-2, 2))
    return min(max(amount, 1), MAX_AMOUNT_MINOR), bps


@settings(max_examples=40 * settings.default.max_examples, deadline=None)
@given(amount_bps=amounts_and_bps(), min_minor=st.integers(0, 1_000), fixed_minor=st.integers(0, 1_000))
def test_fee_is_the_documented_half_up(amount_bps: tuple[int, int], min_minor: int, fixed_minor: int) -> None:
    amount, bps = amount_bps
    policy = FeePolicy(bps=bps, min_minor=min_minor, fixed_minor=fixed_minor)
    assert policy.fee(amount) == documented_fee(amount, policy)


@pytest.mark.parametrize(
    ("amount", "fee"),
    [(1, 0), (24, 0), (25, 1), (26, 1), (MAX - 25, 20_000_000_000_000), (MAX, 20_000_000_000_000)],
)
async def test_payment_fee_at_the_edges_reaches_revenue(ledger: Ledger, amount: int, fee: int) -> None:
    """The ledger's fixture charges 2 %: the payer pays the amount and the rounded fee, exactly,
    and revenue gets the fee (no revenue leg at all when it rounds to nothing)."""
    payer = await funded_wallet(ledger, "alice", amount, bucket=A)
    await ledger.topup("fee-money", payer, fee or 1, provider="stripe", actor="test", ref="fee")
    merchant = await funded_wallet(ledger, "shop", 0, bucket=B)
    r = await ledger.payment("pay1", payer, merchant, amount, actor="alice", ref="order-1")
    expected = {cash_account(payer): -(amount + fee), cash_account(merchant): amount}
    if fee:
        expected[revenue(A)] = fee
    assert legs(r) == expected
    assert await cash(ledger, payer) == (0 if fee else 1)
    await assert_verified(ledger.store)


async def test_payment_spends_promo_first_earliest_expiring(ledger: Ledger) -> None:
    payer = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    merchant = await funded_wallet(ledger, "shop", 100 * TL, bucket=B)
    now = datetime.now(UTC)
    late = await ledger.promo_grant(
        "g-late",
        payer,
        30 * TL,
        expires_at=now + timedelta(days=30),
        actor="acme",
        ref="promo",
        business=merchant,
    )
    early = await ledger.promo_grant(
        "g-early", payer, 10 * TL, expires_at=now + timedelta(days=1), actor="ops", ref="campaign-1"
    )
    r = await ledger.payment("pay1", payer, merchant, 100 * TL, actor="alice", ref="order-1")
    # the document's numbers: promo −40, cash −62, receiver +100, revenue +2
    assert legs(r) == {
        promo_account(payer): -40 * TL,
        cash_account(payer): -62 * TL,
        cash_account(merchant): 100 * TL,
        revenue(A): 2 * TL,
    }
    batches = {b.id: b.remaining for b in await ledger.store.promo_batches(payer)}
    assert batches == {early.id: 0, late.id: 0}

    # with less to pay than promo holds, the earliest-expiring batch is spent first
    await ledger.promo_grant("g3", payer, 30 * TL, expires_at=now + timedelta(days=30), actor="ops", ref="c")
    g4 = await ledger.promo_grant(
        "g4", payer, 30 * TL, expires_at=now + timedelta(days=2), actor="ops", ref="c"
    )
    r = await ledger.payment("pay2", payer, merchant, 10 * TL, actor="alice", ref="order-2")
    assert legs(r)[promo_account(payer)] == -(10 * TL + 20)  # 10 TL and its 2 % fee, all promo
    assert cash_account(payer) not in legs(r)
    batches = {b.id: b.remaining for b in await ledger.store.promo_batches(payer)}
    assert batches[g4.id] == 30 * TL - 10 * TL - 20
    await assert_verified(ledger.store)


async def test_expired_promo_is_not_spent(ledger: Ledger) -> None:
    payer = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    merchant = await funded_wallet(ledger, "shop", 0, bucket=B)
    # expired a second ago (no waiting for a grant to expire), and a live one beside it
    past = datetime.now(UTC) - timedelta(seconds=1)
    await ledger.promo_grant("g1", payer, 10 * TL, expires_at=past, actor="ops", ref="c")
    live = await ledger.promo_grant(
        "g2", payer, 3 * TL, expires_at=datetime.now(UTC) + timedelta(days=1), actor="ops", ref="c"
    )
    r = await ledger.payment("pay1", payer, merchant, 10 * TL, actor="alice", ref="o")
    assert legs(r)[promo_account(payer)] == -3 * TL  # the live batch only
    assert {b.id: b.remaining for b in await ledger.store.promo_batches(payer)}[live.id] == 0
    assert (await ledger.store.wallet_balance(payer)).promo == 10 * TL  # the expired one, untouched


async def test_a_balance_never_counts_expired_promo_even_before_the_job(ledger: Ledger) -> None:
    """Promo past its expiry is still in the promo account until the job returns it; the
    balance names it apart (promo_expired) and leaves it out of promo_live and available, as
    the payment path leaves it out of what it spends. After the job, nothing changes for the
    customer."""
    shop = await funded_wallet(ledger, "shop", 100 * TL, bucket=B)
    payer = await funded_wallet(ledger, "alice", 10 * TL, bucket=A)
    past = datetime.now(UTC) - timedelta(seconds=1)
    await ledger.promo_grant("g1", payer, 40 * TL, expires_at=past, actor="shop", ref="c", business=shop)
    await ledger.promo_grant("g2", payer, 6 * TL, expires_at=past, actor="ops", ref="c")
    later = datetime.now(UTC) + timedelta(days=1)
    await ledger.promo_grant("g3", payer, 5 * TL, expires_at=later, actor="ops", ref="c")
    b = await ledger.store.wallet_balance(payer)
    assert (b.cash, b.promo, b.promo_expired, b.promo_live, b.available) == (
        10 * TL,
        51 * TL,
        46 * TL,
        5 * TL,
        15 * TL,
    )
    # What the balance offers is what can be spent, and not a minor unit more.
    with pytest.raises(InsufficientFunds):
        await ledger.payment("too-much", payer, shop, 15 * TL, actor="alice", ref="o")  # + 2 % fee
    r = await ledger.payment("pay", payer, shop, 14 * TL, actor="alice", ref="o")
    assert legs(r)[promo_account(payer)] == -5 * TL  # the live batch only
    b = await ledger.store.wallet_balance(payer)
    assert (b.promo_live, b.available) == (0, 10 * TL - (14 * TL + 28) + 5 * TL)
    assert await ledger.expire_promos(actor="job") == 2
    after = await ledger.store.wallet_balance(payer)
    assert (after.promo, after.promo_expired, after.promo_live, after.available) == (0, 0, 0, b.available)
    await assert_verified(ledger.store)


async def test_promo_a_refund_gives_back_after_its_expiry_expires_again(
    ledger: Ledger, wallet_db: str
) -> None:
    """A payment spent a batch; the batch expired (its remainder returned); the payment is then
    refunded, which gives the spent promo back to the batch, expired by now. That money is the
    funder's too: the next expiry returns it, under a key of its own (the first expiry's key is
    a replay by then), once; the customer is never shown it meanwhile."""
    shop = await funded_wallet(ledger, "shop", 100 * TL, bucket=B)
    payer = await funded_wallet(ledger, "alice", 10 * TL, bucket=A)
    later = datetime.now(UTC) + timedelta(days=1)
    await ledger.promo_grant("g1", payer, 40 * TL, expires_at=later, actor="shop", ref="c", business=shop)
    pay = await ledger.payment("pay", payer, shop, 10 * TL, actor="alice", ref="o")
    assert legs(pay)[promo_account(payer)] == -(10 * TL + 20)
    async with pgtemplate.owner_connection(wallet_db) as owner:  # its clock moves, no waiting
        await owner.execute("UPDATE ledger.promo_batches SET expires_at = now() - interval '1 second'")
    shop_before = await cash(ledger, shop)
    assert await ledger.expire_promos(actor="job") == 1
    assert await cash(ledger, shop) == shop_before + 40 * TL - (10 * TL + 20)

    await ledger.refund(pay.id, actor="shop")  # the shop pays back 10 TL, the fee comes back
    b = await ledger.store.wallet_balance(payer)
    assert (b.promo, b.promo_expired, b.promo_live) == (10 * TL + 20, 10 * TL + 20, 0)
    assert await ledger.expire_promos(actor="operator:someone") == 1  # another actor: no matter
    assert await ledger.expire_promos(actor="job") == 0
    b = await ledger.store.wallet_balance(payer)
    assert (b.promo, b.promo_expired) == (0, 0)
    # The shop: its 40 TL grant back in full, less nothing; the payment and its refund net out.
    assert await cash(ledger, shop) == shop_before + 40 * TL - (10 * TL + 20) - 10 * TL + (10 * TL + 20)
    await assert_verified(ledger.store)


async def test_promo_grant_business_and_campaign(ledger: Ledger) -> None:
    business = await funded_wallet(ledger, "acme", 100 * TL, bucket=B)
    customer = await funded_wallet(ledger, "alice", 0, bucket=A)
    later = datetime.now(UTC) + timedelta(days=7)
    r = await ledger.promo_grant(
        "g1", customer, 40 * TL, expires_at=later, actor="acme", ref="welcome", business=business
    )
    assert legs(r) == {cash_account(business): -40 * TL, promo_account(customer): 40 * TL}
    r = await ledger.promo_grant("g2", customer, 10 * TL, expires_at=later, actor="ops", ref="campaign-7")
    assert legs(r) == {
        system_account(Role.PROMO_EXPENSE, "TRY", bucket=A): -10 * TL,
        promo_account(customer): 10 * TL,
    }
    balance = await ledger.store.wallet_balance(customer)
    assert (balance.cash, balance.promo, balance.available) == (0, 50 * TL, 50 * TL)
    batches = await ledger.store.promo_batches(customer)
    assert sorted((b.funded_by, b.amount, b.remaining) for b in batches) == [
        ("business", 40 * TL, 40 * TL),
        ("platform", 10 * TL, 10 * TL),
    ]
    await assert_verified(ledger.store)


async def test_business_cannot_grant_more_than_it_has(ledger: Ledger) -> None:
    business = await funded_wallet(ledger, "acme", 10 * TL, bucket=B)
    customer = await funded_wallet(ledger, "alice", 0, bucket=A)
    with pytest.raises(InsufficientFunds):
        await ledger.promo_grant(
            "g1",
            customer,
            40 * TL,
            expires_at=datetime.now(UTC) + timedelta(days=1),
            actor="acme",
            ref="x",
            business=business,
        )


async def test_promo_expiry_returns_remaining_to_funder_or_breakage(ledger: Ledger) -> None:
    business = await funded_wallet(ledger, "acme", 100 * TL, bucket=B)
    customer = await funded_wallet(ledger, "alice", 0, bucket=A)
    merchant = await funded_wallet(ledger, "shop", 0, bucket=B)
    # Spent while live, then expired: the posting function reads the database's clock, so the
    # test lets that clock pass the expiry (pg_sleep_until: until the very instant, not a guessed
    # duration); the expiry job's own clock is passed in. The second leaves room for the spend.
    soon = datetime.now(UTC) + timedelta(seconds=1)
    last = soon + timedelta(milliseconds=1)
    await ledger.promo_grant(
        "g1", customer, 40 * TL, expires_at=soon, actor="acme", ref="p", business=business
    )
    await ledger.promo_grant("g2", customer, 10 * TL, expires_at=last, actor="ops", ref="c")
    # spend 20.40 of it: the business batch (earliest) keeps 19.60
    r = await ledger.payment("pay", customer, merchant, 20 * TL, actor="alice", ref="o")
    assert legs(r)[promo_account(customer)] == -(20 * TL + 40)  # spent before the expiry
    before = soon - timedelta(microseconds=1)
    assert await ledger.expire_promos(actor="job", now=before) == 0  # nothing expired yet

    await ledger.store._pool.execute("SELECT pg_sleep_until($1)", last)
    later = last
    assert await ledger.expire_promos(actor="job", now=later) == 2
    lines = (await ledger.store.statement(promo_account(customer))).lines
    expiry = [line for line in lines if line.type == "promo_expiry"]
    assert sorted(line.amount for line in expiry) == [-(1960), -(10 * TL)]
    by_tx = {line.transaction_id: await ledger.store.transaction(line.transaction_id) for line in expiry}
    destinations = {
        leg.account: leg.amount
        for tx in by_tx.values()
        for leg in tx.legs
        if leg.amount > 0 and ":sys:transit:" not in leg.account
    }
    assert destinations == {
        cash_account(business): 1960,
        system_account(Role.PROMO_BREAKAGE, "TRY", bucket=A): 10 * TL,
    }
    assert (await ledger.store.wallet_balance(customer)).promo == 0
    # a second run finds nothing
    assert await ledger.expire_promos(actor="job", now=later) == 0
    await assert_verified(ledger.store)


async def test_promo_expiry_refused_before_time(ledger: Ledger) -> None:
    from hiwallet.ledger import rules

    customer = await funded_wallet(ledger, "alice", 0, bucket=A)
    g = await ledger.promo_grant(
        "g1", customer, 5 * TL, expires_at=datetime.now(UTC) + timedelta(days=1), actor="ops", ref="c"
    )
    breakage = system_account(Role.PROMO_BREAKAGE, "TRY", bucket=A)
    with pytest.raises(NothingToExpire) as err:
        await ledger.store.post(rules.promo_expiry(g.id, promo_account(customer), breakage, "TRY", actor="x"))
    assert err.value.fields["reason"] == "not_expired"


async def test_withdrawal_with_fee(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 200 * TL, bucket=A)
    r = await ledger.withdrawal("wd1", w, 100 * TL, actor="alice", ref="saga-1")
    assert legs(r) == {cash_account(w): -102 * TL, clearing("bank", A): 100 * TL, revenue(A): 2 * TL}
    await assert_verified(ledger.store)


async def test_withdrawal_refund_negates_all_three_legs_once(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 200 * TL, bucket=A)
    wd = await ledger.withdrawal("wd1", w, 100 * TL, actor="alice", ref="saga-1")
    r = await ledger.refund(wd.id, actor="saga")
    assert legs(r) == {cash_account(w): 102 * TL, clearing("bank", A): -100 * TL, revenue(A): -2 * TL}
    assert await cash(ledger, w) == 200 * TL
    again = await ledger.refund(wd.id, actor="someone-else")
    assert again.replayed and again.id == r.id
    assert await cash(ledger, w) == 200 * TL
    assert await ledger.store.refund_of(wd.id) == r.id
    await assert_verified(ledger.store)


async def test_payment_refund_restores_promo_batches(ledger: Ledger) -> None:
    payer = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    merchant = await funded_wallet(ledger, "shop", 0, bucket=B)
    g = await ledger.promo_grant(
        "g1", payer, 40 * TL, expires_at=datetime.now(UTC) + timedelta(days=3), actor="ops", ref="c"
    )
    pay = await ledger.payment("pay1", payer, merchant, 100 * TL, actor="alice", ref="order-1")
    r = await ledger.refund(pay.id, actor="shop")
    assert legs(r) == {
        promo_account(payer): 40 * TL,
        cash_account(payer): 62 * TL,
        cash_account(merchant): -100 * TL,
        revenue(A): -2 * TL,
    }
    assert [b.remaining for b in await ledger.store.promo_batches(payer) if b.id == g.id] == [40 * TL]
    assert (await ledger.store.wallet_balance(payer)).available == 140 * TL
    await assert_verified(ledger.store)


async def test_refund_needs_the_receiver_to_have_the_money(ledger: Ledger) -> None:
    payer = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    merchant = await funded_wallet(ledger, "shop", 0, bucket=B)
    other = await funded_wallet(ledger, "carol", 0, bucket=A)
    pay = await ledger.payment("pay1", payer, merchant, 50 * TL, actor="alice", ref="o")
    await ledger.transfer("drain", merchant, other, 50 * TL, actor="shop", ref="x", type_=TxType.B2P)
    with pytest.raises(InsufficientFunds):
        await ledger.refund(pay.id, actor="shop")
    assert await ledger.store.refund_of(pay.id) is None


async def test_refunds_of_refunds_and_promo_are_refused(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    other = await funded_wallet(ledger, "bob", 0, bucket=B)
    p = await ledger.transfer("p1", w, other, 10 * TL, actor="alice", ref="x")
    r = await ledger.refund(p.id, actor="bob")
    with pytest.raises(NotRefundable):
        await ledger.refund(r.id, actor="bob")
    g = await ledger.promo_grant(
        "g1", w, 5 * TL, expires_at=datetime.now(UTC) + timedelta(days=1), actor="o", ref="c"
    )
    with pytest.raises(NotRefundable):
        await ledger.refund(g.id, actor="ops")


async def test_settlement_of_topups_gross_and_net(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 0, bucket=A)
    await ledger.topup("t1", w, 100 * TL, provider="stripe", actor="stripe", ref="pi")
    await ledger.topup("t2", w, 100 * TL, provider="bank", actor="bank", ref="wire")
    clearing_stripe = system_account(Role.CLEARING, "TRY", provider="stripe")
    clearing_bank = system_account(Role.CLEARING, "TRY", provider="bank")
    nostro = system_account(Role.NOSTRO, "TRY")
    expense = system_account(Role.PROVIDER_EXPENSE, "TRY")
    # Net: the provider keeps its fee: clearing +100, nostro −97.10, provider_expense −2.90
    r = await ledger.settle_topups(
        "s1", "stripe", gross=100 * TL, fee=290, model="net", actor="ops", ref="po_1"
    )
    assert legs(r) == {clearing_stripe: 100 * TL, nostro: -9710, expense: -290}
    assert (await ledger.store.account(nostro)).balance == -9710  # 97.10 at the bank
    # Gross: all of it arrives, the fee comes later as an invoice
    r = await ledger.settle_topups("s2", "bank", gross=100 * TL, actor="ops", ref="stmt-1")
    assert legs(r) == {clearing_bank: 100 * TL, nostro: -100 * TL}
    r = await ledger.provider_invoice("inv1", "bank", amount=150, actor="ops", ref="inv-1")
    assert legs(r) == {expense: -150, nostro: 150}
    # what the providers owed is settled: the clearing accounts are back at zero in sum
    assert await ledger.store.system_balance(Role.CLEARING, "TRY", "stripe") == 0
    assert await ledger.store.system_balance(Role.CLEARING, "TRY", "bank") == 0
    await assert_verified(ledger.store)


async def test_settlement_of_withdrawals(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 200 * TL, bucket=A)
    await ledger.withdrawal("wd1", w, 100 * TL, actor="alice", ref="saga-1")
    r = await ledger.settle_withdrawals("sw1", "bank", owed=100 * TL, actor="ops", ref="batch-1")
    assert legs(r) == {
        system_account(Role.CLEARING, "TRY", provider="bank"): -100 * TL,
        system_account(Role.NOSTRO, "TRY"): 100 * TL,
    }
    assert await ledger.store.system_balance(Role.CLEARING, "TRY", "bank") == 0
    await assert_verified(ledger.store)


async def test_sweep_moves_sub_accounts_into_central(ledger: Ledger) -> None:
    for i, bucket in enumerate([A, B, 33]):
        w = await funded_wallet(ledger, f"c{i}", 0, bucket=bucket)
        await ledger.topup(f"t{i}", w, (i + 1) * TL, provider="stripe", actor="s", ref="pi")
    assert await ledger.sweep(Role.CLEARING, actor="job", provider="stripe") == 3
    central = system_account(Role.CLEARING, "TRY", provider="stripe")
    assert (await ledger.store.account(central)).balance == -6 * TL
    assert await ledger.store.system_balance(Role.CLEARING, "TRY", "stripe") == -6 * TL
    assert await ledger.sweep(Role.CLEARING, actor="job", provider="stripe") == 0
    await assert_verified(ledger.store)


async def test_hold_capture_and_release_each_once(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    shop = await funded_wallet(ledger, "shop", 0, bucket=B)
    h = await ledger.hold(w, "order-1", 60 * TL)
    assert (h.status, h.held, h.replayed) == ("pending", 60 * TL, False)
    assert (await ledger.hold(w, "order-1", 60 * TL)).replayed
    balance = await ledger.store.wallet_balance(w)
    assert (balance.cash, balance.held, balance.available) == (100 * TL, 60 * TL, 40 * TL)
    # held money is not available to anything else
    with pytest.raises(InsufficientFunds) as err:
        await ledger.transfer("p1", w, shop, 50 * TL, actor="alice", ref="x")
    assert err.value.fields["available"] == 40 * TL
    with pytest.raises(InsufficientFunds):
        await ledger.hold(w, "order-2", 41 * TL)

    c = await ledger.capture(w, "order-1", 60 * TL, shop, actor="shop", ref="order-1")
    assert legs(c) == {cash_account(w): -60 * TL, cash_account(shop): 60 * TL}
    again = await ledger.capture(w, "order-1", 60 * TL, shop, actor="shop", ref="order-1")
    assert again.replayed and again.id == c.id
    with pytest.raises(HoldNotUsable):
        await ledger.release(w, "order-1")
    balance = await ledger.store.wallet_balance(w)
    assert (balance.cash, balance.held) == (40 * TL, 0)

    await ledger.hold(w, "order-3", 30 * TL)
    r = await ledger.release(w, "order-3")
    assert (r.status, r.held, r.replayed) == ("released", 0, False)
    assert (await ledger.release(w, "order-3")).replayed
    with pytest.raises(HoldNotUsable):
        await ledger.capture(w, "order-3", 30 * TL, shop, actor="shop", ref="order-3")
    await assert_verified(ledger.store)


async def test_partial_capture_releases_the_rest(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    shop = await funded_wallet(ledger, "shop", 0, bucket=B)
    await ledger.hold(w, "order-1", 60 * TL)
    with pytest.raises(HoldNotUsable):
        await ledger.capture(w, "order-1", 61 * TL, shop, actor="shop", ref="o")
    await ledger.capture(w, "order-1", 45 * TL, shop, actor="shop", ref="o")
    balance = await ledger.store.wallet_balance(w)
    assert (balance.cash, balance.held, balance.available) == (55 * TL, 0, 55 * TL)
    await assert_verified(ledger.store)


async def test_debit_by_ref_is_taken_once(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    shop = await funded_wallet(ledger, "shop", 0, bucket=B)
    first = await ledger.debit(w, 18 * TL, shop, actor="orders", ref="order-42")
    assert not first.replayed
    # asked again, even for another amount: the money for order-42 is taken; answered as before
    for amount in (18 * TL, 25 * TL):
        again = await ledger.debit(w, amount, shop, actor="orders", ref="order-42")
        assert again.replayed and again.id == first.id
    assert await cash(ledger, w) == 82 * TL
    await assert_verified(ledger.store)


async def test_reads_statement_transaction_and_balance_as_of(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 0, bucket=A)
    other = await funded_wallet(ledger, "bob", 0, bucket=B)
    results = []
    for i in range(7):
        results.append(await ledger.topup(f"t{i}", w, 10 * TL, provider="stripe", actor="s", ref=f"pi_{i}"))
    p = await ledger.transfer("p1", w, other, 25 * TL, actor="alice", ref="rent")

    # paginated in version order, each line with amount, type, ref and balance after
    seen, cursor = [], None
    while True:
        page = await ledger.store.statement(cash_account(w), cursor=cursor, limit=3)
        seen.extend(page.lines)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert [line.version for line in seen] == list(range(1, 9))
    assert [line.balance_after for line in seen] == [*(10 * TL * k for k in range(1, 8)), 45 * TL]
    assert (seen[-1].type, seen[-1].ref, seen[-1].amount) == ("p2p", "rent", -25 * TL)

    tx = await ledger.store.transaction(p.id)
    assert (tx.type, tx.actor, tx.ref) == ("p2p", "alice", "rent")
    assert {leg.account: leg.amount for leg in tx.legs if ":sys:transit:" not in leg.account} == {
        cash_account(w): -25 * TL,
        cash_account(other): 25 * TL,
    }

    before_all = results[0].posted_at - timedelta(microseconds=1)
    assert await ledger.store.balance_as_of(cash_account(w), before_all) == 0
    assert await ledger.store.balance_as_of(cash_account(w), results[2].posted_at) == 30 * TL
    assert await ledger.store.balance_as_of(cash_account(w), p.posted_at) == 45 * TL


async def test_goodwill(ledger: Ledger) -> None:
    """goodwill_expense −, customer cash +: the platform's expense (central, per currency), cash
    the customer may spend at once; a second post under the key is a replay; never refundable."""
    w = (await ledger.open_wallet("alice", bucket=A)).wallet_id
    expense = system_account(Role.GOODWILL_EXPENSE, "TRY")
    assert expense == "0000:sys:goodwill_expense:TRY"
    posting = ledger.goodwill_posting("gw1", w, 25 * TL, "TRY", actor="staff:emp-1", ref="late delivery")
    r = await ledger.post(posting)
    assert legs(r) == {cash_account(w): 25 * TL, expense: -25 * TL}
    assert (await ledger.post(posting)).replayed
    tx = await ledger.transaction(r.id)
    assert (tx.type, tx.actor) == (TxType.GOODWILL, "staff:emp-1")
    assert await cash(ledger, w) == 25 * TL
    with pytest.raises(NotRefundable):
        ledger.refund_posting(tx, actor="staff:emp-1")
    await assert_verified(ledger.store)


async def test_has_lines_tells_whether_each_transaction_touched_each_account(ledger: Ledger) -> None:
    sender = await funded_wallet(ledger, "alice", 100 * TL, bucket=A)
    receiver = await funded_wallet(ledger, "bob", 0, bucket=B)
    other = await funded_wallet(ledger, "carol", 0, bucket=A)
    r = await ledger.transfer("h1", sender, receiver, 10 * TL, actor="alice", ref="lunch")
    pairs = [
        (r.id, cash_account(sender)),
        (r.id, cash_account(receiver)),  # another bucket than the transaction's home
        (r.id, cash_account(other)),
        ("0007:no-such-transaction", cash_account(sender)),
    ]
    assert await ledger.has_lines(pairs) == [True, True, False, False]
    assert await ledger.has_lines([]) == []
