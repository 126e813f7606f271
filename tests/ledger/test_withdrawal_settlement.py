"""One withdrawal settled in its own bucket (the withdrawal saga, issue 11): the bucket's bank
clearing sub-account −amount, the central nostro +amount, in the caller's unit of work; the
central settlement of many (after the sweep) unchanged."""

from __future__ import annotations

import pytest

from hiwallet.ledger.accounts import Role, system_account
from hiwallet.ledger.errors import InvalidPosting
from hiwallet.ledger.rules import settlement_withdrawal
from hiwallet.ledger.service import Ledger
from tests.ledger.conftest import TL, assert_verified, funded_wallet


async def test_a_withdrawal_is_settled_from_its_buckets_clearing(ledger: Ledger) -> None:
    w = await funded_wallet(ledger, "alice", 200 * TL, bucket=42)
    await ledger.withdrawal("wd1", w, 100 * TL, actor="alice", ref="saga-1")
    clearing = system_account(Role.CLEARING, "TRY", bucket=42, provider="bank")
    assert (await ledger.store.account(clearing)).balance == 100 * TL

    async with ledger.unit_of_work() as conn:
        settled = await ledger.settle_withdrawals(
            "settle:saga-1", "bank", owed=100 * TL, actor="saga", ref="saga-1", bucket=42, conn=conn
        )
    again = await ledger.settle_withdrawals(
        "settle:saga-1", "bank", owed=100 * TL, actor="saga", ref="saga-1", bucket=42
    )

    assert settled.id == "0042:settle:saga-1" and again.replayed and again.id == settled.id
    nostro = system_account(Role.NOSTRO, "TRY")
    moved = {line.account: line.amount for line in settled.lines if ":transit:" not in line.account}
    assert moved == {clearing: -100 * TL, nostro: 100 * TL}
    assert (await ledger.store.account(clearing)).balance == 0
    assert await ledger.store.system_balance(Role.CLEARING, "TRY", "bank") == 0
    await assert_verified(ledger.store)


@pytest.mark.parametrize("bucket", [-1, 1024, True])
def test_a_bucket_that_does_not_exist_is_refused(bucket: int) -> None:
    with pytest.raises(InvalidPosting, match="bucket"):
        settlement_withdrawal("k", "bank", "TRY", owed=TL, actor="a", ref="r", bucket=bucket)


def test_the_default_is_the_central_clearing() -> None:
    posting = settlement_withdrawal("k", "bank", "TRY", owed=TL, actor="a", ref="r")
    assert posting.id == "0000:k"
    assert posting.legs[0].account == system_account(Role.CLEARING, "TRY", provider="bank")
