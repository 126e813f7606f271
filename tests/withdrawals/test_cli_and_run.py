"""``hiwallet withdrawals …`` (the review and the scan by hand) and ``hiwallet run
withdrawal-orchestrator`` (the process starts, serves, says it is not ready without a broker,
and stops)."""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
import sys
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest
from typer.testing import CliRunner

from hiwallet.cli import app
from hiwallet.contracts.withdrawals import Requester, command_id
from hiwallet.core.settings import get_settings
from hiwallet.withdrawals import cli as withdrawals_cli
from hiwallet.withdrawals.app import database_spec
from hiwallet.withdrawals.metrics import WithdrawalMetrics
from hiwallet.withdrawals.service import WithdrawalService
from tests.servers import free_port, until_serving
from tests.withdrawals.conftest import IBAN, result, settings_for


async def _in_thread(runner: CliRunner, *args: str, code: int = 0) -> str:
    """The command runs its own event loop (asyncio.run), so it runs off this test's loop."""
    outcome = await asyncio.to_thread(runner.invoke, app, list(args))
    assert outcome.exit_code == code, outcome.output
    return outcome.output


async def test_an_operator_reviews_releases_cancels_and_scans(
    withdrawal_db: str, owner: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(withdrawal_db)
    monkeypatch.setattr(withdrawals_cli, "get_withdrawal_settings", lambda: settings)
    pool = await database_spec(settings).create_pool(get_settings(), max_size=2)
    try:
        service = WithdrawalService(pool, settings, WithdrawalMetrics())
        big = settings.review_above_minor + 1
        sagas = []
        for _ in range(2):
            answer = await service.request(
                Requester(issuer="http://i", subject="s"),
                "customer:s",
                str(uuid.uuid4()),
                wallet="0421:w:x",
                amount_minor=big,
                currency="TRY",
                destination_iban=IBAN,
            )
            s = answer.saga_id
            body = {
                "command_id": command_id(s, "debit"),
                "saga_id": s,
                "transaction_id": f"tx-{s}",
                "amount_minor": big,
                "fee_minor": 200,
                "currency": "TRY",
            }
            async with pool.acquire() as conn, conn.transaction():
                await service.handle(conn, result("WithdrawalDebited", body))
            sagas.append(s)
    finally:
        await pool.close()
    runner = CliRunner()
    listed = await _in_thread(runner, "withdrawals", "review")
    assert all(s in listed for s in sagas)
    assert "TR** **** **** 1326" in listed and IBAN not in listed
    assert "2 withdrawal(s) under review" in listed

    # nobody can be named on the command line: the decision is the OS user's, operator:<login>
    named = await _in_thread(runner, "withdrawals", "release", sagas[0], "--actor", "staff:ayse", code=2)
    assert "No such option" in named
    released = await _in_thread(runner, "withdrawals", "release", sagas[0])
    assert "bank_transfer_pending" in released
    cancelled = await _in_thread(runner, "withdrawals", "cancel", sagas[1])
    assert "cancelling" in cancelled
    refused = await _in_thread(runner, "withdrawals", "release", sagas[1], code=1)
    assert "refused" in refused and "cancelling" in refused
    missing = await _in_thread(runner, "withdrawals", "release", str(uuid.uuid4()), code=1)
    assert "refused" in missing

    me = f"operator:{pwd.getpwuid(os.getuid()).pw_name}"
    shown = await _in_thread(runner, "withdrawals", "show", sagas[1])
    assert f"under_review -> cancelling  by {me}" in shown
    assert f"reviewed by: {me}" in shown
    actors = await owner.fetch(
        "SELECT DISTINCT actor FROM withdrawal.transitions WHERE actor LIKE 'operator:%'"
    )
    assert [r["actor"] for r in actors] == [me]
    states = dict(await owner.fetch("SELECT id, state FROM withdrawal.sagas"))
    assert states == {sagas[0]: "bank_transfer_pending", sagas[1]: "cancelling"}

    assert "published 0 command(s) again" in await _in_thread(runner, "withdrawals", "scan")
    await owner.execute("UPDATE withdrawal.sagas SET last_published_at = now() - interval '1 hour'")
    assert "published 2 command(s) again" in await _in_thread(runner, "withdrawals", "scan")
    kinds = [
        r["message_type"] for r in await owner.fetch("SELECT message_type FROM withdrawal.outbox ORDER BY id")
    ]
    assert set(kinds[-2:]) == {"RefundWithdrawal", "StartBankTransfer"}


async def test_the_process_serves_and_stops(withdrawal_db: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "HIWALLET_WITHDRAWAL_DATABASE": withdrawal_db,
        "HIWALLET_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/",
    }
    hiwallet = str(Path(sys.executable).parent / "hiwallet")
    proc = await asyncio.create_subprocess_exec(
        hiwallet,
        "run",
        "withdrawal-orchestrator",
        "--port",
        str(port),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await until_serving(client, "withdrawal-orchestrator")
            ready = await client.get("/ready")
            assert (ready.status_code, ready.json()["checks"]) == (
                503,
                {"broker": "unavailable", "consumers": "unavailable"},
            )
            anonymous = await client.post("/v1/withdrawals", json={}, headers={"Idempotency-Key": "k"})
            assert anonymous.status_code in (401, 422)
            assert "hiwallet_withdrawal_sagas" in (await client.get("/metrics")).text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) in (0, -signal.SIGTERM)
