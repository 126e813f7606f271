"""`verify` finds what was changed behind the ledger's back, and names it."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
from typer.testing import CliRunner

from hiwallet.contracts.databases import DATABASES
from hiwallet.ledger.accounts import cash_account
from hiwallet.ledger.service import Ledger
from tests.ledger.conftest import TL, funded_wallet

Tamper = Callable[[asyncpg.Connection, str], Awaitable[object]]


async def _behind_the_back(pool: asyncpg.Pool, sql: str, *args: object) -> None:
    """As a superuser with triggers off: what an attacker who got past the database's roles,
    or a bad script run by the owner, could do (the pool's own role may not: test_roles.py)."""
    from hiwallet.core import db

    conn = await asyncpg.connect(db.owner_dsn(await pool.fetchval("SELECT current_database()")))
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute(sql, *args)
    finally:
        await conn.close()


async def _history(ledger: Ledger) -> tuple[str, str]:
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=21)
    b = await funded_wallet(ledger, "bob", 0, bucket=22)
    for i in range(3):
        await ledger.transfer(f"t{i}", a, b, 10 * TL, actor="alice", ref=f"r{i}")
    return cash_account(a), cash_account(b)


async def test_clean_ledger_verifies(ledger: Ledger) -> None:
    await _history(ledger)
    report = await ledger.store.verify()
    assert report.ok and report.transactions >= 4 and report.lines >= 8


# verify names an account as "line <account> v<version>: ..." or "account <account>: ...".
_NAMED_ACCOUNT = re.compile(r"^(?:line (\S+) v\d+|account (\S+)): ")


def _named_account(problem: str) -> str | None:
    match = _NAMED_ACCOUNT.match(problem)
    return (match[1] or match[2]) if match else None


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # an amount changed, with balance_after fixed up to match: only the hash tells
        (
            "UPDATE ledger.lines SET amount = amount - 1, balance_after = balance_after - 1"
            " WHERE account_id = $1 AND version = 2",
            "hash does not match",
        ),
        # a line deleted
        ("DELETE FROM ledger.lines WHERE account_id = $1 AND version = 2", "a line is missing"),
        # a ref rewritten
        (
            "UPDATE ledger.lines SET ref = 'innocent' WHERE account_id = $1 AND version = 3",
            "hash does not match",
        ),
        # a balance edited
        ("UPDATE ledger.accounts SET balance = balance + 500 WHERE id = $1", "but the lines add up to"),
        # a line moved to a transaction that does not exist
        (
            "UPDATE ledger.lines SET transaction_id = '0021:ghost' WHERE account_id = $1 AND version = 2",
            "names no transaction part",
        ),
        # a held amount with no hold
        ("UPDATE ledger.accounts SET held = 100 WHERE id = $1", "pending holds sum to"),
        # the newest line removed and the account rolled back to match
        (
            "WITH d AS (DELETE FROM ledger.lines WHERE account_id = $1 AND version = 4 RETURNING amount)"
            " UPDATE ledger.accounts SET version = 3, balance = balance - (SELECT amount FROM d)"
            " WHERE id = $1",
            "hash chain head",
        ),
    ],
)
async def test_tampering_is_found(ledger: Ledger, pool: asyncpg.Pool, sql: str, expected: str) -> None:
    sender, _ = await _history(ledger)
    await _behind_the_back(pool, sql, sender)
    report = await ledger.store.verify()
    assert not report.ok
    # The difference is named on the tampered account, by its exact id; and no other account is
    # blamed (a transaction left unbalanced is named by its transaction id, not an account).
    assert {_named_account(p) for p in report.problems if expected in p} == {sender}, report.problems
    assert {_named_account(p) for p in report.problems} - {None} == {sender}, report.problems


async def test_an_unbalanced_transaction_and_money_made_from_nothing_are_found(
    ledger: Ledger, pool: asyncpg.Pool
) -> None:
    _, receiver = await _history(ledger)
    # money made: a receiver's line grows (and its balance with it), the sender's does not
    await _behind_the_back(
        pool,
        "UPDATE ledger.lines SET amount = amount + 1, balance_after = balance_after + 1"
        " WHERE account_id = $1 AND version = 3",
        receiver,
    )
    await _behind_the_back(pool, "UPDATE ledger.accounts SET balance = balance + 1 WHERE id = $1", receiver)
    problems = (await ledger.store.verify()).problems
    assert any("sums to 1" in p and "transaction" in p for p in problems), problems
    assert any("all accounts in TRY sum to 1" in p for p in problems), problems


def test_cli_verify_exits_non_zero_naming_the_difference(
    wallet_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from hiwallet.cli import app
    from hiwallet.core import db
    from hiwallet.core.settings import get_settings

    async def tamper() -> None:
        conn = await asyncpg.connect(db.owner_dsn(wallet_db))
        try:
            await conn.execute("UPDATE ledger.accounts SET balance = 5 WHERE id = '0000:sys:nostro:TRY'")
        finally:
            await conn.close()

    # The CLI reads the database by its service name; point the server URL's default at the
    # test database through the one setting that names it.
    monkeypatch.setitem(DATABASES, "wallet", wallet_db)
    get_settings.cache_clear()
    runner = CliRunner()
    clean = runner.invoke(app, ["ledger", "verify"])
    assert clean.exit_code == 0, clean.output
    asyncio.run(tamper())
    dirty = runner.invoke(app, ["ledger", "verify"])
    assert dirty.exit_code == 1
    assert "0000:sys:nostro:TRY" in dirty.output and "balance 5" in dirty.output
