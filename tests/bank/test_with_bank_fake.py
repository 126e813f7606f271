"""bank-adapter and bank-webhook against the real bank-fake (CONTRACT-11 Part D), each on a socket:
a StartBankTransfer published → bank-fake's transfer → its signed callback to bank-webhook → one
BankTransferSucceeded / BankTransferFailed on the saga's exchange; a lost callback found by the
reconciliation; duplicated callbacks announced once. Each test its own destination IBAN (the
fake's rules match on it) and its own broker names."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
import httpx
import orjson
from schwifty import IBAN

from hiwallet.bank.adapter import create_bank_adapter_app
from hiwallet.bank.settings import BankSettings
from hiwallet.bank.webhook import PATH, create_bank_webhook_app
from hiwallet.contracts.withdrawals import BankTransferFailed, BankTransferSucceeded
from hiwallet.core.broker import Broker
from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from tests.bank.conftest import (
    BANK_SECRET,
    Names,
    bank_settings,
    command_message,
    consuming,
    start_command,
    transfers,
)
from tests.core import spine
from tests.fakes.conftest import FAST
from tests.servers import serve, stop
from tests.waiting import until

FAKE_KEY = "bank_fake_test_key"


def fresh_iban() -> str:
    return str(
        IBAN.generate("TR", bank_code="00061", account_code=str(random.randint(10**15, 10**16 - 1))).compact
    )


@contextmanager
def served(database: str, names: Names, **fake: Any) -> Iterator[tuple[BankSettings, httpx.Client]]:
    """bank-webhook and bank-fake on free ports, the fake calling the webhook back; the
    settings bank-adapter uses, and a client of the fake's control API."""
    webhook_settings = bank_settings(database, names)
    webhook_url, webhook_server, webhook_thread = serve(
        create_bank_webhook_app(webhook_settings), "bank-webhook"
    )
    fake_settings = BankFakeSettings(
        transfer_callback_url=f"{webhook_url}{PATH}",
        signing_secrets=[BANK_SECRET],
        api_key=FAKE_KEY,
        **{**FAST, "transfer_decide_after_s": 0.1, **fake},
    )
    fake_url, fake_server, fake_thread = serve(create_bank_fake_app(fake_settings), "bank-fake")
    try:
        settings = bank_settings(database, names, bank_url=fake_url, bank_api_key=FAKE_KEY)
        with httpx.Client(base_url=fake_url, timeout=5) as control:
            yield settings, control
    finally:
        stop(fake_server, fake_thread)
        stop(webhook_server, webhook_thread)


def rule(control: httpx.Client, iban: str, **behaviour: Any) -> None:
    answer = control.post("/_control/transfers", json={"destination_iban": iban, **behaviour})
    assert answer.status_code == 201, answer.text


async def test_an_accepted_transfer_ends_in_one_success(
    bank_db: str, names: Names, broker: Broker, owner: asyncpg.Connection
) -> None:
    command = start_command(iban=fresh_iban())
    with served(bank_db, names) as (settings, _):
        app = create_bank_adapter_app(settings, topology=names.topology(), reconcile=False)
        async with app.router.lifespan_context(app):
            await consuming(app)
            await broker.publish([command_message(names, command)])
            [message] = await spine.collect(broker, [names.results_queue], 1, timeout_s=15)
    result = BankTransferSucceeded.model_validate(orjson.loads(message.body))
    [row] = await transfers(owner)
    assert (result.command_id, result.saga_id, result.bank_reference) == (
        command.command_id,
        command.saga_id,
        row["bank_reference"],
    )
    assert (row["state"], row["outcome_source"]) == ("succeeded", "callback")
    assert row["bank_reference"].startswith("trf_")


async def test_a_rejected_transfer_ends_in_one_failure_with_the_banks_reason(
    bank_db: str, names: Names, broker: Broker
) -> None:
    iban = fresh_iban()
    command = start_command(iban=iban)
    with served(bank_db, names) as (settings, control):
        rule(control, iban, outcome="reject", failure_reason="AC04")
        app = create_bank_adapter_app(settings, topology=names.topology(), reconcile=False)
        async with app.router.lifespan_context(app):
            await consuming(app)
            await broker.publish([command_message(names, command)])
            [message] = await spine.collect(broker, [names.results_queue], 1, timeout_s=15)
    assert message.type == "BankTransferFailed"
    assert BankTransferFailed.model_validate(orjson.loads(message.body)).reason == "AC04"


async def test_duplicated_callbacks_announce_one_outcome(
    bank_db: str, names: Names, broker: Broker, owner: asyncpg.Connection
) -> None:
    iban = fresh_iban()
    command = start_command(iban=iban)
    with served(bank_db, names) as (settings, control):
        rule(control, iban, duplicate_callback=3, duplicate_distinct_ids=True)
        app = create_bank_adapter_app(settings, topology=names.topology(), reconcile=False)
        async with app.router.lifespan_context(app):
            await consuming(app)
            await broker.publish([command_message(names, command)])
            got = await spine.collect(broker, [names.results_queue], 2, timeout_s=4)
            inbox_rows = await owner.fetchval("SELECT count(*) FROM bank.inbox")
    assert [m.type for m in got] == ["BankTransferSucceeded"]
    assert inbox_rows == 3


async def test_a_lost_callback_is_found_by_the_reconciliation(
    bank_db: str, names: Names, broker: Broker, owner: asyncpg.Connection
) -> None:
    iban = fresh_iban()
    command = start_command(iban=iban)
    with served(bank_db, names) as (settings, control):
        rule(control, iban, lose_callback=True)
        settings = settings.model_copy(update={"reconcile_stale_after_s": 0.0})
        app = create_bank_adapter_app(settings, topology=names.topology(), reconcile=False)
        async with app.router.lifespan_context(app):
            await consuming(app)
            await broker.publish([command_message(names, command)])

            async def decided_at_the_bank() -> bool:  # recorded pending, then decided (no callback)
                rows = await transfers(owner)
                if not rows:
                    return False
                found = control.get(f"/v1/transfers/{rows[0]['bank_reference']}", headers=_auth())
                return bool(found.json()["status"] != "pending")

            await until(decided_at_the_bank, 10, "the transfer decided at the bank", interval_s=0.05)
            assert (await transfers(owner))[0]["state"] == "pending"
            assert await app.state.reconciler.run() == 1
            [message] = await spine.collect(broker, [names.results_queue], 1, timeout_s=10)
    assert message.type == "BankTransferSucceeded"
    [row] = await transfers(owner)
    assert (row["state"], row["outcome_source"]) == ("succeeded", "reconciliation")


def _auth() -> dict[str, str]:
    return {"authorization": f"Bearer {FAKE_KEY}"}
