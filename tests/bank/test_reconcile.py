"""The bank reconciliation: transfers pending for longer than the stale age are asked about at the
bank (``GET /v1/transfers/{reference}``); a final status is recorded through the same function as
a callback (once, announced once, source ``reconciliation``); ``hiwallet bank reconcile`` runs a
round by hand, under the job's lock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from click.testing import Result
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from hiwallet.bank.adapter import RECONCILE_LOCK_KEY
from hiwallet.bank.client import BankClient
from hiwallet.bank.metrics import AdapterMetrics
from hiwallet.bank.reconcile import Reconciler
from hiwallet.bank.settings import get_bank_settings
from hiwallet.bank.store import BankStore
from hiwallet.cli import app as cli
from hiwallet.contracts.withdrawals import BankTransferFailed, BankTransferSucceeded
from hiwallet.core import db
from tests.bank.conftest import (
    StubBank,
    bank_settings,
    body_of,
    callback_body,
    outbox,
    post_callback,
    start_command,
    transfers,
    webhook_client,
)
from tests.servers import serve, stop

EXCHANGE = "hwtest.withdrawals"


class Setup:
    def __init__(self, pool: asyncpg.Pool, bank: StubBank, client: BankClient) -> None:
        self.pool = pool
        self.bank = bank
        self.store = BankStore(pool, EXCHANGE)
        self.metrics = AdapterMetrics(CollectorRegistry())
        self.client = client

    def reconciler(self, stale_after_s: float = 0.0, batch: int = 100) -> Reconciler:
        return Reconciler(self.store, self.client, self.metrics, stale_after_s=stale_after_s, batch=batch)

    async def pending(self) -> str:
        """A transfer the bank took and we recorded pending: its reference."""
        command = start_command()
        answer = await self.client.start_transfer(command)
        reference: str = answer.reference  # type: ignore[union-attr]
        async with self.pool.acquire() as conn, conn.transaction():
            await self.store.record_transfer(
                conn,
                command_id=command.command_id,
                saga_id=command.saga_id,
                amount_minor=command.amount_minor,
                currency=command.currency,
                destination_iban=command.destination_iban,
                bank_reference=reference,
            )
        return reference


@pytest.fixture
async def setup(bank_db: str, bank: StubBank) -> AsyncIterator[Setup]:
    pool = await db.create_pool(bank_db, role=db.app_role("bank"), max_size=2)
    client = BankClient.from_settings(bank_settings(bank_db), bank.transport())
    try:
        yield Setup(pool, bank, client)
    finally:
        await client.aclose()
        await pool.close()


def found(s: Setup, outcome: str) -> float:
    return s.metrics.reconciliation_found.labels(outcome)._value.get()


async def test_decided_transfers_are_recorded_once_and_announced(
    setup: Setup, owner: asyncpg.Connection
) -> None:
    ok, no, still = await setup.pending(), await setup.pending(), await setup.pending()
    setup.bank.decide(ok, "succeeded")
    setup.bank.decide(no, "failed", "account_closed")

    assert await setup.reconciler().run() == 2
    by_reference = {r["bank_reference"]: r for r in await transfers(owner)}
    assert (by_reference[ok]["state"], by_reference[ok]["outcome_source"]) == ("succeeded", "reconciliation")
    assert (by_reference[no]["state"], by_reference[no]["reason"]) == ("failed", "account_closed")
    assert by_reference[still]["state"] == "pending"
    messages = {m["message_type"]: body_of(m) for m in await outbox(owner)}
    assert BankTransferSucceeded.model_validate(messages["BankTransferSucceeded"]).bank_reference == ok
    assert BankTransferFailed.model_validate(messages["BankTransferFailed"]).reason == "account_closed"
    assert (found(setup, "succeeded"), found(setup, "failed")) == (1, 1)

    # a second round finds nothing new: the bank is asked about the pending one only
    setup.bank.gets.clear()
    assert await setup.reconciler().run() == 0
    assert setup.bank.gets == [still]
    assert len(await outbox(owner)) == 2


async def test_only_transfers_older_than_the_stale_age_are_asked_about(setup: Setup) -> None:
    reference = await setup.pending()
    setup.bank.decide(reference, "succeeded")
    assert await setup.reconciler(stale_after_s=3_600).run() == 0
    assert setup.bank.gets == []
    assert await setup.reconciler(stale_after_s=0).run() == 1


async def test_a_callback_after_the_reconciliation_announces_nothing_more(
    setup: Setup, bank_db: str, owner: asyncpg.Connection
) -> None:
    reference = await setup.pending()
    setup.bank.decide(reference, "succeeded")
    assert await setup.reconciler().run() == 1
    async with webhook_client(bank_settings(bank_db, exchange=EXCHANGE)) as client:
        assert (
            await post_callback(client, callback_body("transfer.succeeded", reference))
        ).status_code == 202
    assert len(await outbox(owner)) == 1


async def test_a_bank_that_does_not_answer_ends_the_round_without_harm(
    setup: Setup, owner: asyncpg.Connection
) -> None:
    await setup.pending()
    setup.bank.down = True
    assert await setup.reconciler().run() == 0
    assert setup.metrics.bank_unavailable._value.get() == 1
    assert [r["state"] for r in await transfers(owner)] == ["pending"]


async def test_the_batch_bounds_a_round(setup: Setup) -> None:
    for _ in range(3):
        setup.bank.decide(await setup.pending(), "succeeded")
    assert await setup.reconciler(batch=2).run() == 2
    assert await setup.reconciler(batch=2).run() == 1


async def test_hiwallet_bank_reconcile_runs_one_round(
    setup: Setup, bank_db: str, owner: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command, against the bank on a socket; busy while another instance holds the lock."""
    reference = await setup.pending()
    setup.bank.decide(reference, "succeeded")
    url, server, thread = serve(setup.bank.app, "stub-bank")
    try:
        for name, value in {
            "HIWALLET_BANK_DATABASE": bank_db,
            "HIWALLET_BANK_BANK_URL": url,
            "HIWALLET_BANK_EXCHANGE": EXCHANGE,
        }.items():
            monkeypatch.setenv(name, value)
        get_bank_settings.cache_clear()
        runner = CliRunner()

        # another instance's round holds the lock
        holder: asyncpg.Connection = await asyncpg.connect(db.owner_dsn(bank_db))
        try:
            assert await holder.fetchval("SELECT pg_try_advisory_lock($1)", RECONCILE_LOCK_KEY)
            busy = await _invoke(runner, ["bank", "reconcile", "--stale-after-s", "0"])
            assert busy.exit_code == 1 and "busy" in busy.output
        finally:
            await holder.close()

        done = await _invoke(runner, ["bank", "reconcile", "--stale-after-s", "0"])
        assert done.exit_code == 0, done.output
        assert "recorded 1 transfer outcome(s)" in done.output
        [row] = await transfers(owner)
        assert (row["state"], row["outcome_source"]) == ("succeeded", "reconciliation")
    finally:
        stop(server, thread)
        get_bank_settings.cache_clear()


async def _invoke(runner: CliRunner, args: list[str]) -> Result:
    # the command runs its own event loop: in a thread of its own
    return await asyncio.to_thread(runner.invoke, cli, args)
