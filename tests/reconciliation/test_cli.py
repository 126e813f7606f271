"""``hiwallet reconcile``: a round run by an operator finds a planted discrepancy, the finding is
listed and resolved by operator:<login>, and the summary is computed and printed as CSV."""

from __future__ import annotations

import asyncio
import os
import pwd

import asyncpg
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from hiwallet.cli import app
from hiwallet.contracts.databases import DATABASES
from hiwallet.core.ids import new_id
from hiwallet.ledger import Ledger, cash_account
from hiwallet.reconciliation import cli as reconcile_cli
from hiwallet.reconciliation import list_findings
from tests.reconciliation.conftest import TL

ME = f"operator:{pwd.getpwuid(os.getuid()).pw_name}"


async def _cli(*args: str) -> Result:
    # typer runs asyncio.run: in a thread, away from the test's loop
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))


@pytest.fixture(autouse=True)
def _the_test_database(wallet_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DATABASES, "wallet", wallet_db)
    monkeypatch.setattr(reconcile_cli, "console", Console(emoji=False, soft_wrap=True, width=400))


async def test_an_operator_runs_a_round_and_resolves_what_it_found(
    ledger: Ledger, pool: asyncpg.Pool, owner: asyncpg.Connection
) -> None:
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    await ledger.topup(new_id(), wallet, 25 * TL, provider="stripe", actor="test", ref="fund")
    clean = await _cli("reconcile", "run")
    assert clean.exit_code == 0, clean.output
    assert "nothing found" in clean.output  # stripe's window (days) has not passed
    await owner.execute(
        "UPDATE ledger.accounts SET balance = balance - 3 WHERE id = $1", cash_account(wallet)
    )
    found = await _cli("reconcile", "run")
    assert found.exit_code == 0, found.output
    assert "balance_mismatch" in found.output and "new findings: 1" in found.output
    listed = await _cli("reconcile", "findings")
    [finding] = (await list_findings(pool)).findings
    assert finding.id in listed.output and cash_account(wallet) in listed.output
    done = await _cli("reconcile", "resolve", finding.id, "--note", "planted by a test")
    assert done.exit_code == 0, done.output
    assert ME in done.output
    again = await _cli("reconcile", "resolve", finding.id, "--note", "twice")
    assert again.exit_code == 1 and "already resolved" in again.output
    summary = await _cli("reconcile", "summary", "--refresh", "--csv", "--days", "2")
    assert summary.exit_code == 0, summary.output
    lines = summary.output.strip().splitlines()
    assert lines[0] == "day,currency,account_id,transactions,volume_in_minor,volume_out_minor,fees_minor"
    assert lines[1].endswith(f",TRY,total,1,{25 * TL},0,0")
