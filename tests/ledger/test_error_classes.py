"""Only what a retry can cure is "unavailable": every other database failure is a defect,
LedgerInternalError, carrying the SQLSTATE and constraint, never LedgerUnavailable (issue 9).
The failures are PostgreSQL's own: a real invariant trigger, a real data error, and test
triggers (tests/dbfaults.py) that raise a chosen SQLSTATE or kill the session."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest

from hiwallet.core import uow
from hiwallet.ledger import (
    Ledger,
    LedgerError,
    LedgerInternalError,
    LedgerStore,
    LedgerUnavailable,
    Leg,
    Posting,
    TxType,
    cash_account,
)
from tests import dbfaults
from tests.ledger.conftest import TL, funded_wallet, snapshot


@pytest.fixture
async def faulty(wallet_db: str) -> None:
    await dbfaults.install(wallet_db)


def _unbalanced(a: str, b: str, key: str) -> Posting:
    return Posting(
        id=f"0003:{key}",
        type=TxType.P2P,
        actor="x",
        ref="x",
        legs=(Leg(cash_account(a), -TL, "TRY"), Leg(cash_account(b), 2 * TL, "TRY")),
    )


async def test_an_invariant_trigger_firing_is_an_internal_error(ledger: Ledger, pool: asyncpg.Pool) -> None:
    """The balance trigger (HW011) fires only when the code above it failed: a defect, on every
    path of a posting (coalesced, alone, in the caller's unit of work)."""
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=3)
    before = await snapshot(pool)
    alone = LedgerStore(pool, coalesce_writers=0)
    for n, post in enumerate((ledger.store.post, alone.post)):
        with pytest.raises(LedgerInternalError) as err:
            await post(_unbalanced(a, b, f"bad{n}"))
        assert (err.value.sqlstate, err.value.constraint) == ("HW011", "lines_balanced")
        assert isinstance(err.value.__cause__, asyncpg.PostgresError)
    with pytest.raises(LedgerInternalError) as err:
        async with ledger.store.unit_of_work() as conn:
            await ledger.store.post(_unbalanced(a, b, "bad-uow"), conn=conn)
    assert err.value.sqlstate == "HW011"
    assert await snapshot(pool) == before


async def test_a_data_error_is_an_internal_error(ledger: Ledger, pool: asyncpg.Pool) -> None:
    """Text PostgreSQL cannot store (a NUL in jsonb): retrying cannot help."""
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    posting = ledger.transfer_posting("nul", a, b, TL, "TRY", type_=TxType.P2P, actor="a", ref="r")
    nul = dataclasses.replace(posting, metadata={"note": "nul\x00byte"})
    with pytest.raises(LedgerInternalError) as err:
        await ledger.post(nul)
    assert err.value.sqlstate is not None and err.value.sqlstate.startswith("22"), err.value.sqlstate
    assert not isinstance(err.value, LedgerError)


@pytest.mark.usefixtures("faulty")
@pytest.mark.parametrize(
    "sqlstate",
    [
        "HW010",  # the append-only trigger
        "HW012",  # a line naming no account
        "HW099",  # an HW code this code does not know
        "23514",  # an unmapped constraint
        "22P02",  # a data error
        "XX000",  # an internal error of the server
        "P0001",  # a plain RAISE
    ],
)
async def test_what_a_retry_cannot_cure_is_an_internal_error(ledger: Ledger, sqlstate: str) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    for n in range(2):  # coalesced (the batch's statement), then with options: alone
        with pytest.raises(LedgerInternalError) as err:
            if n == 0:
                await ledger.transfer(f"k{n}", a, b, TL, actor="a", ref=f"fault:{sqlstate}")
            else:
                await ledger.payment(f"k{n}", a, b, TL, actor="a", ref=f"fault:{sqlstate}")
        assert (err.value.sqlstate, err.value.constraint) == (sqlstate, "test_fault")


@pytest.mark.usefixtures("faulty")
@pytest.mark.parametrize("sqlstate", ["40P01", "40001", "55P03", "57014", "08006"])
async def test_what_a_retry_can_cure_is_unavailable(ledger: Ledger, sqlstate: str) -> None:
    """A deadlock or serialization failure (after the store's own retries), a lock or
    statement timeout, a connection failure."""
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    with pytest.raises(LedgerUnavailable):
        await ledger.transfer("k", a, b, TL, actor="a", ref=f"fault:{sqlstate}")
    with pytest.raises(LedgerUnavailable):
        await ledger.payment("k2", a, b, TL, actor="a", ref=f"fault:{sqlstate}")


@pytest.mark.usefixtures("faulty")
@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
async def test_a_deadlock_or_serialization_failure_is_retried_first(
    ledger: Ledger, wallet_db: str, sqlstate: str
) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    first = await ledger.transfer("k", a, b, TL, actor="a", ref=f"fault-once:{sqlstate}")
    assert await dbfaults.fired_once(wallet_db)
    await dbfaults.rearm(wallet_db)
    second = await ledger.payment("k2", a, b, TL, actor="a", ref=f"fault-once:{sqlstate}")
    assert await dbfaults.fired_once(wallet_db)
    assert not first.replayed and not second.replayed


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
async def test_a_conflict_each_time_is_tried_as_the_one_policy_says_then_unavailable(
    ledger: Ledger, wallet_db: str, sqlstate: str
) -> None:
    """The ledger keeps no retry loop of its own: a posting that meets a deadlock or a
    serialization failure every time is tried the unit of work's number of times
    (core.uow.DEFAULT_POLICY), on both paths (the coalesced batch's statement, a posting
    alone), then answered unavailable with the driver's error as its cause."""
    await dbfaults.install(wallet_db)
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    attempts = uow.DEFAULT_POLICY.attempts
    for n, path in enumerate((ledger.transfer, ledger.payment), 1):
        with pytest.raises(LedgerUnavailable) as err:
            await path(f"k{n}", a, b, TL, actor="a", ref=f"fault:{sqlstate}")
        assert isinstance(err.value.__cause__, asyncpg.PostgresError)
        assert err.value.__cause__.sqlstate == sqlstate
        assert await dbfaults.fired(wallet_db) == n * attempts


async def test_a_lock_timeout_is_not_tried_again(ledger: Ledger, wallet_db: str) -> None:
    """Something held a lock far too long: another attempt would only wait as long again."""
    await dbfaults.install(wallet_db)
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    with pytest.raises(LedgerUnavailable):
        await ledger.payment("k", a, b, TL, actor="a", ref="fault:55P03")
    assert await dbfaults.fired(wallet_db) == 1


@pytest.mark.usefixtures("faulty")
async def test_a_session_killed_mid_posting_is_unavailable(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    with pytest.raises(LedgerUnavailable):
        await ledger.payment("k", a, b, TL, actor="a", ref="fault:terminate")
    # the pool serves the next posting
    result = await ledger.payment("k2", a, b, TL, actor="a", ref="fine")
    assert not result.replayed


def test_an_unknown_refusal_in_the_posting_functions_answer_is_an_internal_error() -> None:
    """ledger.post answers a refusal as JSON; one whose SQLSTATE this code does not map is a
    defect (it was LedgerUnavailable: "retry", forever)."""
    answer = {"error": {"sqlstate": "HW099", "message": "new refusal", "detail": None}}
    with pytest.raises(LedgerInternalError) as err:
        Ledger.answer(answer)
    assert err.value.sqlstate == "HW099"


def test_internal_errors_are_outside_the_refusals() -> None:
    """No `except LedgerError` (a refusal's handler) can catch a defect, and it is not "retry"."""
    assert not issubclass(LedgerInternalError, LedgerError)
    assert not issubclass(LedgerInternalError, LedgerUnavailable)
