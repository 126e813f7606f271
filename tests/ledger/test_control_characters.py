"""Text with a control character is refused by the ledger's own rules, for every caller (the
command line, wallet-api's business opening, the coming consumers): a typed InvalidPosting
naming the field, and nothing written. NUL in particular: PostgreSQL cannot store it, and
before this check it reached the database as a data error."""

from __future__ import annotations

import pytest

from hiwallet.ledger.errors import InvalidPosting
from hiwallet.ledger.service import Ledger
from tests.ledger.conftest import TL, funded_wallet, snapshot

CONTROL = ["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f", "\x80", "\x85", "\x9f"]


@pytest.mark.parametrize("char", CONTROL, ids=[f"U+{ord(c):04X}" for c in CONTROL])
@pytest.mark.parametrize("field", ["ref", "actor"])
async def test_a_control_character_in_a_text_is_refused(ledger: Ledger, field: str, char: str) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    args = {"ref": "x", "actor": "alice", field: f"nul{char}byte"}
    before = await snapshot(ledger.store._pool)
    with pytest.raises(InvalidPosting) as err:
        await ledger.transfer("k1", a, b, TL, actor=args["actor"], ref=args["ref"])
    assert err.value.fields["field"] == field
    assert await snapshot(ledger.store._pool) == before


async def test_an_owner_with_a_control_character_is_refused(ledger: Ledger) -> None:
    before = await snapshot(ledger.store._pool)
    with pytest.raises(InvalidPosting) as err:
        await ledger.open_wallet("ali\x00ce", bucket=3)
    assert err.value.fields["field"] == "owner"
    assert await snapshot(ledger.store._pool) == before


async def test_printable_unicode_is_kept(ledger: Ledger) -> None:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=3)
    b = await funded_wallet(ledger, "bob", 0, bucket=4)
    ref = "Kahve ☕ — çay, şeker; \u00a0NBSP and 漢字"
    await ledger.transfer("k1", a, b, TL, actor="alice", ref=ref)
    [line] = [x for x in (await ledger.store.statement(f"{b}:cash")).lines if x.amount == TL]
    assert line.ref == ref
