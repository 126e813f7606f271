"""bench/growth_loader.py at a tiny scale: the books it writes are the size asked, the heavy wallet
has its lines, the ledger verifies clean, and a second run finds the database at its size."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import asyncpg
import pytest

from hiwallet.core import db
from hiwallet.ledger.accounts import bucket_of, cash_account
from hiwallet.ledger.store import LedgerStore, init_connection

BENCH = Path(__file__).parents[2] / "bench"


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # the bench's scripts import their siblings (benchlog) as top-level modules
    monkeypatch.syspath_prepend(str(BENCH))
    import growth_loader

    assert growth_loader.__file__ == str(BENCH / "growth_loader.py")
    yield growth_loader
    sys.modules.pop("growth_loader", None)


async def test_loader_fills_to_size_and_is_reused(loader: ModuleType, wallet_db: str) -> None:
    report = await loader.load(wallet_db, lines=2_000, wallets=100, heavy_lines=300, writers=3, quiet=True)

    owner = await asyncpg.connect(db.owner_dsn(wallet_db))
    try:
        lines = await owner.fetchval("SELECT count(*) FROM ledger.lines")
        wallets = await owner.fetchval(
            "SELECT count(*) FROM ledger.accounts WHERE owner = 'growth' AND purse = 'cash'"
        )
        heavy = cash_account(report["heavy_wallet"])
        heavy_lines = await owner.fetchval(
            "SELECT count(*) FROM ledger.lines WHERE bucket = $1 AND account_id = $2", bucket_of(heavy), heavy
        )
    finally:
        await owner.close()
    # at least the size asked, past it by less than one batch's last transfers
    assert 2_000 <= lines < 2_100
    assert report["now"]["lines"] == lines
    assert wallets == 100
    assert heavy_lines == 300
    assert report["refused"] == 0

    pool = await db.create_pool(wallet_db, role=db.app_role("wallet"), init=init_connection)
    try:
        verified = await LedgerStore.from_settings(pool).verify()
    finally:
        await pool.close()
    assert verified.problems == []
    assert verified.lines == lines

    again = await loader.load(wallet_db, lines=2_000, wallets=100, heavy_lines=300, writers=3, quiet=True)
    assert again["lines_posted"] == 0
    assert again["found"] == again["now"] == {"lines": lines, "wallets": 100, "heavy_lines": 300}
    assert again["heavy_wallet"] == report["heavy_wallet"]

    # topped up to a larger size asked
    more = await loader.load(wallet_db, lines=3_000, wallets=120, heavy_lines=300, writers=3, quiet=True)
    assert more["now"]["wallets"] == 120
    assert 3_000 <= more["now"]["lines"] < 3_100
