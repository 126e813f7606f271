"""Hypothesis drives the real ledger through any sequence of opens, top-ups, transfers,
payments, promo grants and expiries, holds, captures, releases, refunds, replays and reused ids,
against a model of what each wallet should hold; after every step the invariants are checked in
PostgreSQL, and at the end the whole ledger is verified.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from hiwallet.core import db
from hiwallet.ledger.errors import HoldNotUsable, InsufficientFunds, InvalidPosting, TransactionIdReused
from hiwallet.ledger.model import PostResult
from hiwallet.ledger.rules import MAX_AMOUNT_MINOR
from hiwallet.ledger.service import Ledger
from hiwallet.ledger.store import LedgerStore, init_connection
from tests import pgtemplate
from tests.ledger.conftest import FEES, documented_fee
from tests.strength import scaled

amounts = st.integers(min_value=1, max_value=5_000)
# Payments also at the edges of the fee's half-up rounding. The fixture's fee is 2 % (checked
# here, the edges are worked out for it): 25 + 50k kuruş pay exactly x.5 kuruş of fee (rounded
# up), 24 + 50k pay x.48 (down), 26 + 50k pay x.52 (up); and the smallest and largest amounts.
assert FEES.payment.bps == 200 and FEES.payment.min_minor == FEES.payment.fixed_minor == 0
fee_edges = st.integers(0, 99).flatmap(lambda k: st.sampled_from([50 * k + 24, 50 * k + 25, 50 * k + 26]))
payment_amounts = amounts | fee_edges | st.sampled_from([1, MAX_AMOUNT_MINOR])
# The largest top-up too, so that a wallet can afford the largest payment.
topup_amounts = amounts | st.just(MAX_AMOUNT_MINOR)


@dataclass
class Batch:
    id: str
    remaining: int
    expires_at: datetime
    funder: str | None  # a business wallet, or None for the platform

    @property
    def live(self) -> bool:
        return self.expires_at > datetime.now(UTC)


@dataclass
class WalletModel:
    id: str
    cash: int = 0
    held: int = 0
    batches: list[Batch] = field(default_factory=list)
    holds: dict[str, int] = field(default_factory=dict)

    @property
    def promo(self) -> int:
        return sum(b.remaining for b in self.batches)

    def live_promo(self) -> list[Batch]:
        return sorted((b for b in self.batches if b.live), key=lambda b: b.expires_at)


@dataclass
class Done:
    """A posted request, kept to replay it and to refund it."""

    call: tuple[str, tuple[Any, ...], dict[str, Any]]
    result: PostResult
    undo: dict[str, Any]
    refunded: bool = False


class LedgerMachine(RuleBasedStateMachine):
    template: str = ""
    transit: bool = False

    wallets = Bundle("wallets")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        # A fresh database per example: what one example leaves (an expired batch, a hold) must
        # not change what the next one sees, or Hypothesis cannot replay and shrink.
        self.database = self.run(pgtemplate.clone(self.template))
        self.pool: asyncpg.Pool = self.run(
            db.create_pool(self.database, role=db.app_role("wallet"), max_size=4, init=init_connection)
        )
        self.ledger = Ledger(LedgerStore(self.pool, transit_legs=self.transit), FEES)
        self.model: dict[str, WalletModel] = {}
        self.done: list[Done] = []
        self.prefix = uuid.uuid4().hex[:8]
        self.counter = itertools.count()
        self.expiry_base = datetime.now(UTC) + timedelta(days=1)
        self.revenue = 0  # every fee charged and not refunded

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def key(self) -> str:
        return f"{self.prefix}-{next(self.counter)}"

    def teardown(self) -> None:
        try:
            report = self.run(self.ledger.store.verify())
            assert report.ok, report.problems
        finally:
            self.run(self.pool.close())
            self.run(pgtemplate.drop_database(self.database))
            self.loop.close()

    # -----------------------------------------------------------------------------------------

    @initialize(target=wallets)
    def first_wallet(self) -> str:
        return self._open(0)

    # A second wallet with money from the start, so that payments, transfers and grants between
    # two wallets can run from the first step (the rules for two wallets have it as precondition).
    @initialize(target=wallets, amount=topup_amounts)
    def second_wallet(self, amount: int) -> str:
        wallet = self._open(2)
        self.topup(wallet, amount, "stripe")
        return wallet

    @rule(target=wallets, bucket=st.sampled_from([1, 2, 517, 1023]))
    def open_wallet(self, bucket: int) -> str:
        return self._open(bucket)

    def _open(self, bucket: int) -> str:
        wallet = self.run(self.ledger.open_wallet(f"owner-{self.key()}", bucket=bucket or 1)).wallet_id
        self.model[wallet] = WalletModel(wallet)
        return wallet

    def other(self, data: st.DataObject, wallet: str) -> str:
        """Another wallet than ``wallet`` (the rules that need one have two as precondition)."""
        return data.draw(st.sampled_from(sorted(set(self.model) - {wallet})))

    @rule(wallet=wallets, amount=topup_amounts, provider=st.sampled_from(["stripe", "bank"]))
    def topup(self, wallet: str, amount: int, provider: str) -> None:
        self._post("topup", (self.key(), wallet, amount), {"provider": provider, "actor": "p", "ref": "r"})

    @rule(wallet=wallets, amount=amounts)
    def goodwill(self, wallet: str, amount: int) -> None:
        """A staff credit from the goodwill expense: cash the customer may spend, never refunded
        (a correction is another movement)."""
        self._post("goodwill", (self.key(), wallet, amount), {"actor": "staff:s", "ref": "r"})

    @precondition(lambda self: len(self.model) >= 2)
    @rule(sender=wallets, data=st.data(), amount=amounts)
    def transfer(self, sender: str, data: st.DataObject, amount: int) -> None:
        receiver = self.other(data, sender)
        self._post("transfer", (self.key(), sender, receiver, amount), {"actor": "a", "ref": "r"})

    @precondition(lambda self: len(self.model) >= 2)
    @rule(payer=wallets, data=st.data(), amount=payment_amounts)
    def payment(self, payer: str, data: st.DataObject, amount: int) -> None:
        merchant = self.other(data, payer)
        self._post("payment", (self.key(), payer, merchant, amount), {"actor": "a", "ref": "r"})

    @precondition(lambda self: len(self.model) >= 2 and bool(self._fee_edge_payers()))
    @rule(data=st.data(), edge=st.sampled_from([24, 25, 26]))
    def payment_at_a_fee_edge(self, data: st.DataObject, edge: int) -> None:
        """A payment the payer can afford whose 2 % fee is x.48, x.5 or x.52 kuruş (50k + 24, 25
        or 26 kuruş): posted, always, so the rounding is checked on every run."""
        payer = data.draw(st.sampled_from(self._fee_edge_payers()))
        budget = self._fee_edge_budget(payer)
        assert budget is not None
        amount = 50 * data.draw(st.integers(0, budget)) + edge
        if self.model[payer].cash - self.model[payer].held >= MAX_AMOUNT_MINOR + MAX_AMOUNT_MINOR // 50:
            amount = data.draw(st.sampled_from([amount, MAX_AMOUNT_MINOR]))  # and the largest
        merchant = self.other(data, payer)
        posted = len(self.done)
        self._post("payment", (self.key(), payer, merchant, amount), {"actor": "a", "ref": "r"})
        assert len(self.done) == posted + 1

    def _fee_edge_payers(self) -> list[str]:
        return sorted(w for w in self.model if self._fee_edge_budget(w) is not None)

    def _fee_edge_budget(self, wallet: str) -> int | None:
        """The largest k such that a payment of 50k + 26 and its fee (51k + 27 in all) is within
        the wallet's cash; None if not even k = 0 is."""
        m = self.model[wallet]
        return min((m.cash - m.held - 27) // 51, 10**9) if m.cash - m.held >= 27 else None

    @rule(wallet=wallets, kind=st.sampled_from(["transfer", "payment", "promo_grant"]), amount=amounts)
    def to_itself(self, wallet: str, kind: str, amount: int) -> None:
        """A wallet paying itself is refused before anything is written."""
        before = self.snapshot()
        with pytest.raises(InvalidPosting):
            if kind == "promo_grant":
                expires_at = self.expiry_base
                self.run(
                    self.ledger.promo_grant(
                        self.key(), wallet, amount, expires_at=expires_at, actor="a", ref="r", business=wallet
                    )
                )
            else:
                self.run(getattr(self.ledger, kind)(self.key(), wallet, wallet, amount, actor="a", ref="r"))
        assert self.snapshot() == before

    @rule(customer=wallets, amount=amounts, expired=st.booleans())
    def campaign_promo_grant(self, customer: str, amount: int, expired: bool) -> None:
        self._promo_grant(customer, None, amount, expired)

    @precondition(lambda self: len(self.model) >= 2)
    @rule(customer=wallets, data=st.data(), amount=amounts, expired=st.booleans())
    def business_promo_grant(self, customer: str, data: st.DataObject, amount: int, expired: bool) -> None:
        self._promo_grant(customer, self.other(data, customer), amount, expired)

    def _promo_grant(self, customer: str, business: str | None, amount: int, expired: bool) -> None:
        # An already-expired grant can never be spent and waits for the expiry job; a live one
        # gets its own expiry time, so the spending order is unambiguous.
        n = next(self.counter)
        expires_at = (
            datetime.now(UTC) - timedelta(seconds=1) if expired else self.expiry_base + timedelta(seconds=n)
        )
        self._post(
            "promo_grant",
            (f"{self.prefix}-g{n}", customer, amount),
            {"expires_at": expires_at, "actor": "a", "ref": "r", "business": business},
        )

    @rule()
    def expire_promos(self) -> None:
        expired = self.run(self.ledger.expire_promos(actor="job"))
        count = 0
        for w in self.model.values():
            for b in w.batches:
                if not b.live and b.remaining:
                    if b.funder is not None:
                        self.model[b.funder].cash += b.remaining
                    b.remaining = 0
                    count += 1
        assert expired == count

    @rule(wallet=wallets, amount=amounts)
    def hold(self, wallet: str, amount: int) -> None:
        m = self.model[wallet]
        key = f"h-{self.key()}"
        if m.cash - m.held < amount:
            before = self.snapshot()
            with pytest.raises(InsufficientFunds):
                self.run(self.ledger.hold(wallet, key, amount))
            assert self.snapshot() == before
        else:
            self.run(self.ledger.hold(wallet, key, amount))
            m.held += amount
            m.holds[key] = amount

    def _take_hold(self, data: st.DataObject) -> tuple[str, str, int]:
        """A pending hold drawn from the model, closed there: (wallet, key, amount)."""
        wallet = data.draw(st.sampled_from(sorted(w for w, m in self.model.items() if m.holds)))
        m = self.model[wallet]
        key = data.draw(st.sampled_from(sorted(m.holds)))
        amount = m.holds.pop(key)
        m.held -= amount
        return wallet, key, amount

    @precondition(lambda self: len(self.model) >= 2 and any(m.holds for m in self.model.values()))
    @rule(data=st.data())
    def capture_hold(self, data: st.DataObject) -> None:
        wallet, key, amount = self._take_hold(data)
        dest = self.other(data, wallet)
        taken = data.draw(st.integers(1, amount))
        self.run(self.ledger.capture(wallet, key, taken, dest, actor="a", ref="r"))
        self.model[wallet].cash -= taken
        self.model[dest].cash += taken
        with pytest.raises(HoldNotUsable):
            self.run(self.ledger.release(wallet, key))

    @precondition(lambda self: any(m.holds for m in self.model.values()))
    @rule(data=st.data())
    def release_hold(self, data: st.DataObject) -> None:
        wallet, key, _ = self._take_hold(data)
        self.run(self.ledger.release(wallet, key))
        assert self.run(self.ledger.release(wallet, key)).replayed

    @precondition(lambda self: any(not d.refunded and d.undo for d in self.done))
    @rule(data=st.data())
    def refund(self, data: st.DataObject) -> None:
        done = data.draw(st.sampled_from([d for d in self.done if not d.refunded and d.undo]))
        undo = done.undo
        receiver = self.model[undo["receiver"]]
        if receiver.cash - receiver.held < undo["received"]:
            before = self.snapshot()
            with pytest.raises(InsufficientFunds):
                self.run(self.ledger.refund(done.result.id, actor="a"))
            assert self.snapshot() == before
            return  # refused, and checked: nothing was written
        result = self.run(self.ledger.refund(done.result.id, actor="a"))
        assert not result.replayed
        done.refunded = True
        receiver.cash -= undo["received"]
        self.revenue -= undo["fee"]
        payer = self.model[undo["payer"]]
        payer.cash += undo["cash"]
        for batch, amount in undo["promo"]:
            batch.remaining += amount
        # asked again: the same refund, nothing more
        assert self.run(self.ledger.refund(done.result.id, actor="b")).replayed

    @precondition(lambda self: bool(self.done))
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        done = data.draw(st.sampled_from(self.done))
        name, args, kwargs = done.call
        before = self.snapshot()
        result = self.run(getattr(self.ledger, name)(*args, **kwargs))
        assert result.replayed and result.id == done.result.id and result.lines == done.result.lines
        assert self.snapshot() == before

    @precondition(lambda self: any(d.call[0] in ("transfer", "payment", "topup") for d in self.done))
    @rule(data=st.data(), extra=st.integers(1, 100))
    def reuse_id(self, data: st.DataObject, extra: int) -> None:
        done = data.draw(
            st.sampled_from([d for d in self.done if d.call[0] in ("transfer", "payment", "topup")])
        )
        name, args, kwargs = done.call
        amount = args[-1]  # changed within the valid range, so only the reuse is wrong
        changed = (*args[:-1], amount + extra if amount + extra <= MAX_AMOUNT_MINOR else amount - extra)
        before = self.snapshot()
        with pytest.raises(TransactionIdReused):
            self.run(getattr(self.ledger, name)(*changed, **kwargs))
        assert self.snapshot() == before

    # -----------------------------------------------------------------------------------------

    def _post(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        expected = self._expect(name, args, kwargs)
        if expected is None:  # the model lacks the funds: refused, and nothing written
            before = self.snapshot()
            with pytest.raises(InsufficientFunds):
                self.run(getattr(self.ledger, name)(*args, **kwargs))
            assert self.snapshot() == before
            return
        result = self.run(getattr(self.ledger, name)(*args, **kwargs))
        assert not result.replayed
        self.done.append(Done((name, args, kwargs), result, expected.pop("undo")))
        for apply in expected["apply"]:
            apply()

    def _expect(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """What the model says the posting does, or None if it must be refused for funds."""
        m = self.model
        if name in ("topup", "goodwill"):
            _, wallet, amount = args
            return {"apply": [lambda: setattr(m[wallet], "cash", m[wallet].cash + amount)], "undo": {}}
        if name == "transfer":
            _, s, r, amount = args
            if m[s].cash - m[s].held < amount:
                return None

            def move() -> None:
                m[s].cash -= amount
                m[r].cash += amount

            return {
                "apply": [move],
                "undo": {
                    "payer": s,
                    "receiver": r,
                    "received": amount,
                    "cash": amount,
                    "fee": 0,
                    "promo": [],
                },
            }
        if name == "payment":
            _, payer, merchant, amount = args
            fee = documented_fee(amount, FEES.payment)
            total = amount + fee
            spends: list[tuple[Batch, int]] = []
            left = total
            for b in m[payer].live_promo():
                take = min(left, b.remaining)
                if take:
                    spends.append((b, take))
                left -= take
            if m[payer].cash - m[payer].held < left:
                return None

            def pay() -> None:
                for b, take in spends:
                    b.remaining -= take
                m[payer].cash -= left
                m[merchant].cash += amount
                self.revenue += fee

            return {
                "apply": [pay],
                "undo": {
                    "payer": payer,
                    "receiver": merchant,
                    "received": amount,
                    "cash": left,
                    "fee": fee,
                    "promo": spends,
                },
            }
        if name == "promo_grant":
            key, customer, amount = args
            business = kwargs["business"]
            if business is not None and m[business].cash - m[business].held < amount:
                return None

            def grant() -> None:
                if business is not None:
                    m[business].cash -= amount
                tx_id = f"{int(customer[:4]):04d}:{key}"
                m[customer].batches.append(Batch(tx_id, amount, kwargs["expires_at"], business))

            return {"apply": [grant], "undo": {}}
        raise AssertionError(name)

    def snapshot(self) -> tuple[Any, ...]:
        return self.run(
            self.pool.fetchrow(
                "SELECT (SELECT count(*) FROM ledger.lines), (SELECT count(*) FROM ledger.transactions),"
                " (SELECT sum(balance) FILTER (WHERE role = 'user_wallet') FROM ledger.accounts),"
                " (SELECT sum(held) FROM ledger.accounts)"
            )
        )

    @invariant()
    def wallets_match_the_model(self) -> None:
        for wallet, m in self.model.items():
            b = self.run(self.ledger.store.wallet_balance(wallet))
            assert (b.cash, b.promo, b.held) == (m.cash, m.promo, m.held), wallet

    @invariant()
    def revenue_holds_every_fee(self) -> None:
        revenue = self.run(
            self.pool.fetchval("SELECT coalesce(sum(balance), 0) FROM ledger.accounts WHERE role = 'revenue'")
        )
        assert revenue == self.revenue

    @invariant()
    def ledger_invariants_hold(self) -> None:
        row = self.run(
            self.pool.fetchrow(
                """
                SELECT
                  (SELECT count(*) FROM (SELECT currency FROM ledger.accounts GROUP BY currency
                                          HAVING sum(balance) <> 0) s) AS currencies_off,
                  (SELECT count(*) FROM (SELECT 1 FROM ledger.lines GROUP BY transaction_id, currency
                                          HAVING sum(amount) <> 0) s) AS unbalanced,
                  (SELECT count(*) FROM ledger.accounts WHERE role = 'user_wallet'
                                                          AND (balance < 0 OR held > balance)) AS negative,
                  (SELECT count(*) FROM ledger.accounts a WHERE a.version > 0 AND a.balance <> coalesce(
                      (SELECT sum(amount) FROM ledger.lines l WHERE l.bucket = a.bucket
                                                               AND l.account_id = a.id), 0)) AS drifted
                """
            )
        )
        assert dict(row) == {"currencies_off": 0, "unbalanced": 0, "negative": 0, "drifted": 0}


def test_any_sequence_keeps_every_invariant(wallet_template: str, transit: bool) -> None:
    LedgerMachine.template = wallet_template
    LedgerMachine.transit = transit
    run_state_machine_as_test(
        LedgerMachine,
        # Steps come from the Hypothesis profile (tests/conftest.py), examples are half of its
        # (tests/strength.py: each example is a database): 12 × 30 by default, 100 × 80 with
        # HYPOTHESIS_PROFILE=long. Not derandomized: each run tries other sequences.
        settings=settings(
            max_examples=scaled(0.5),
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
