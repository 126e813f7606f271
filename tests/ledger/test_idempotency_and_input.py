"""Idempotency by transaction id, and bad input: each a typed error, nothing written."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from hiwallet.ledger import errors, rules
from hiwallet.ledger.accounts import cash_account
from hiwallet.ledger.errors import (
    AccountNotFound,
    CurrencyMismatch,
    InsufficientFunds,
    InvalidPosting,
    LedgerInternalError,
    TransactionIdReused,
)
from hiwallet.ledger.model import Leg, Posting, TxType
from hiwallet.ledger.service import Ledger
from tests.ledger.conftest import TL, assert_verified, cash, funded_wallet, snapshot


async def test_same_id_same_content_is_replayed(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    first = await ledger.transfer("k1", a, b, 10 * TL, actor="alice", ref="x")
    before = await snapshot(ledger.store._pool)
    again = await ledger.transfer("k1", a, b, 10 * TL, actor="alice", ref="x")
    assert again.replayed and not first.replayed
    assert (again.id, again.lines, again.posted_at) == (first.id, first.lines, first.posted_at)
    assert await snapshot(ledger.store._pool) == before


@pytest.mark.parametrize(
    "change", [{"amount": 11 * TL}, {"ref": "y"}, {"actor": "mallory"}, {"receiver": "other"}]
)
async def test_same_id_other_content_is_refused_as_reused(ledger: Ledger, change: dict[str, Any]) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    c = await funded_wallet(ledger, "carol", 0, bucket=5)
    await ledger.transfer("k1", a, b, 10 * TL, actor="alice", ref="x")
    before = await snapshot(ledger.store._pool)
    args: dict[str, Any] = {"amount": 10 * TL, "ref": "x", "actor": "alice", "receiver": b}
    args.update(change)
    if args["receiver"] == "other":
        args["receiver"] = c
    with pytest.raises(TransactionIdReused) as err:
        await ledger.transfer("k1", a, args["receiver"], args["amount"], actor=args["actor"], ref=args["ref"])
    assert err.value.code == "transaction-id-reused"
    assert await snapshot(ledger.store._pool) == before


async def test_refused_for_balance_leaves_nothing_and_the_id_can_be_retried(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 5 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    before = await snapshot(ledger.store._pool)
    with pytest.raises(InsufficientFunds) as err:
        await ledger.transfer("k1", a, b, 10 * TL, actor="alice", ref="x")
    assert err.value.fields == {
        "account": cash_account(a),
        "balance": 5 * TL,
        "available": 5 * TL,
        "amount": 10 * TL,
    }
    assert await snapshot(ledger.store._pool) == before
    await ledger.topup("more", a, 5 * TL, provider="stripe", actor="s", ref="pi")
    r = await ledger.transfer("k1", a, b, 10 * TL, actor="alice", ref="x")
    assert not r.replayed and await cash(ledger, b) == 10 * TL
    await assert_verified(ledger.store)


async def test_ids_are_scoped_by_home_bucket(ledger: Ledger) -> None:
    """The same client key from wallets in two buckets is two transactions (ids are scoped)."""
    a = await funded_wallet(ledger, "alice", 10 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 10 * TL, bucket=4)
    c = await funded_wallet(ledger, "carol", 0, bucket=5)
    r1 = await ledger.transfer("same-key", a, c, TL, actor="alice", ref="x")
    r2 = await ledger.transfer("same-key", b, c, TL, actor="bob", ref="x")
    assert r1.id != r2.id and not r2.replayed


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("amount", [0, -1, -100 * TL, 1.5, 100.0, "100", None, True, 10**16, 2**63])
async def test_amount_must_be_a_positive_integer(ledger: Ledger, amount: Any) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    before = await snapshot(ledger.store._pool)
    with pytest.raises(InvalidPosting) as err:
        await ledger.transfer("k1", a, b, amount, actor="alice", ref="x")
    assert err.value.fields["field"] == "amount"
    assert await snapshot(ledger.store._pool) == before


async def test_unknown_account_is_refused(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    ghost = "0004:w:00000000-0000-7000-8000-000000000000"
    before = await snapshot(ledger.store._pool)
    with pytest.raises(AccountNotFound) as err:
        await ledger.transfer("k1", a, ghost, TL, actor="alice", ref="x")
    assert err.value.fields["account"] == cash_account(ghost)
    with pytest.raises(AccountNotFound):
        await ledger.store.wallet_balance(ghost)
    assert await snapshot(ledger.store._pool) == before


@pytest.mark.parametrize("bad", ["", "x", "99999:w:abc", "abcd:w:x", "0001:w:x y", "0001:" + "a" * 200])
async def test_malformed_account_ids_are_refused(ledger: Ledger, bad: str) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    with pytest.raises(InvalidPosting):
        await ledger.transfer("k1", a, bad, TL, actor="alice", ref="x")


async def test_currency_mismatch_is_refused(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    usd = (await ledger.open_wallet("bob", "USD", bucket=4)).wallet_id
    before = await snapshot(ledger.store._pool)
    with pytest.raises(CurrencyMismatch) as err:
        await ledger.transfer("k1", a, usd, TL, "TRY", actor="alice", ref="x")
    assert err.value.fields == {"account": cash_account(usd), "account_currency": "USD", "currency": "TRY"}
    with pytest.raises(InvalidPosting):
        await ledger.transfer("k2", a, usd, TL, "try", actor="alice", ref="x")
    with pytest.raises(InvalidPosting):
        await ledger.transfer("k3", a, usd, TL, "TRYX", actor="alice", ref="x")
    assert await snapshot(ledger.store._pool) == before


async def test_transfer_to_itself_is_refused(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    before = await snapshot(ledger.store._pool)
    with pytest.raises(InvalidPosting) as err:
        await ledger.transfer("k1", a, a, TL, actor="alice", ref="x")
    assert err.value.fields["field"] == "to"
    with pytest.raises(InvalidPosting):
        await ledger.payment("k2", a, a, TL, actor="alice", ref="x")
    assert await snapshot(ledger.store._pool) == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ref", "r" * 201),
        ("actor", "a" * 201),
        ("key", "k" * 91),
        ("ref", ""),
        ("actor", "  "),
        ("key", "no spaces"),
        ("key", "new\nline"),
    ],
)
async def test_oversized_or_empty_fields_are_refused(ledger: Ledger, field: str, value: str) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    args = {"key": "k1", "ref": "x", "actor": "alice"}
    args[field] = value
    before = await snapshot(ledger.store._pool)
    with pytest.raises(InvalidPosting) as err:
        await ledger.transfer(args["key"], a, b, TL, actor=args["actor"], ref=args["ref"])
    assert err.value.fields["field"] == field
    assert await snapshot(ledger.store._pool) == before


async def test_the_database_refuses_an_unbalanced_posting(ledger: Ledger, pool: asyncpg.Pool) -> None:
    """Even a posting built around the rules (and their assertion) cannot commit unbalanced."""
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=3)
    bad = Posting(
        id="0003:bad",
        type=TxType.P2P,
        actor="x",
        ref="x",
        legs=(Leg(cash_account(a), -TL, "TRY"), Leg(cash_account(b), 2 * TL, "TRY")),
    )
    before = await snapshot(pool)
    with pytest.raises(LedgerInternalError, match="unbalanced") as err:
        await ledger.store.post(bad)
    assert (err.value.sqlstate, err.value.constraint) == ("HW011", "lines_balanced")
    assert await snapshot(pool) == before


async def test_the_database_refuses_to_rewrite_history(ledger: Ledger, owner_pool: asyncpg.Pool) -> None:
    # As the owner: the application role may not even try (tests/core/test_roles.py).
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    for statement in (
        "UPDATE ledger.lines SET amount = amount + 1",
        "DELETE FROM ledger.lines",
        "TRUNCATE ledger.lines CASCADE",
        "UPDATE ledger.transactions SET ref = 'x'",
        "DELETE FROM ledger.transactions",
        "DELETE FROM ledger.accounts",
        "TRUNCATE ledger.accounts CASCADE",
    ):
        with pytest.raises(asyncpg.PostgresError, match="append-only"):
            await owner_pool.execute(statement)
    # and a customer's balance cannot go below zero whatever writes it
    with pytest.raises(asyncpg.CheckViolationError, match="accounts_customer_not_negative"):
        await owner_pool.execute("UPDATE ledger.accounts SET balance = -1 WHERE id = $1", cash_account(a))


@pytest.mark.parametrize("missing", ["account", "transaction"])
async def test_the_database_refuses_a_line_that_belongs_to_nothing(
    ledger: Ledger, pool: asyncpg.Pool, owner_pool: asyncpg.Pool, missing: str
) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    tx = (await ledger.store.statement(cash_account(a))).lines[0].transaction_id
    account = "0003:w:ghost:cash" if missing == "account" else cash_account(a)
    transaction = tx if missing == "account" else "0003:ghost"
    before = await snapshot(pool)
    with pytest.raises(asyncpg.PostgresError, match=f"names no {missing}"):
        # two lines that balance each other: only the missing owner is wrong
        await owner_pool.execute(
            "INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,"
            " balance_after, type, ref, posted_at, hash)"
            " VALUES (3, $1, 99, $2, 1, 'TRY', 1, 'p2p', 'x', now(), '\\x'),"
            "        (3, $1, 100, $2, -1, 'TRY', 0, 'p2p', 'x', now(), '\\x')",
            account,
            transaction,
        )
    assert await snapshot(pool) == before


async def test_a_rule_cannot_build_unbalanced_legs() -> None:
    # A guard that raises (python -O keeps it), as a defect: never a refusal of the request.
    with pytest.raises(errors.LedgerInternalError, match="unbalanced"):
        rules.assert_balanced([Leg("0001:a", 1, "TRY"), Leg("0001:b", -2, "TRY")])
