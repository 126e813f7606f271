"""The ledger's operator commands record who ran them: operator:<login>, the operating-system
user (core.actors), never a fixed or typed name."""

from __future__ import annotations

import os
import pwd

import asyncpg
import pytest
from typer.testing import CliRunner

from hiwallet.cli import app
from hiwallet.contracts.databases import DATABASES
from hiwallet.core import db
from hiwallet.core.settings import get_settings


async def test_a_topup_and_a_transfer_by_hand_are_recorded_as_the_operator(
    wallet_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    monkeypatch.setitem(DATABASES, "wallet", wallet_db)
    get_settings.cache_clear()
    runner = CliRunner()

    def run(*args: str) -> str:
        done = runner.invoke(app, ["ledger", *args])
        assert done.exit_code == 0, done.output
        return done.output

    # each command runs its own event loop: off this test's loop
    sender = (await asyncio.to_thread(run, "open", "ayla")).strip().splitlines()[-1]
    receiver = (await asyncio.to_thread(run, "open", "bora")).strip().splitlines()[-1]
    await asyncio.to_thread(run, "topup", sender, "500")
    await asyncio.to_thread(run, "transfer", sender, receiver, "200")
    conn = await asyncpg.connect(db.owner_dsn(wallet_db))
    try:
        rows = await conn.fetch(
            "SELECT type::text, actor FROM ledger.transactions WHERE type IN ('topup', 'p2p') ORDER BY type"
        )
    finally:
        await conn.close()
    me = f"operator:{pwd.getpwuid(os.getuid()).pw_name}"
    assert {r["type"] for r in rows} == {"p2p", "topup"}
    assert {r["actor"] for r in rows} == {me}
