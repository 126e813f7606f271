"""``hiwallet run bank-webhook``: the process starts, answers /ready with its database alone (it
has no broker), keeps a signed callback, refuses a forged one, and stops. ``hiwallet run
bank-adapter``: it consumes hiwallet.withdrawals.bank, asks the bank, records the transfer, and
stops."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import asyncpg
import httpx
import orjson

from hiwallet.contracts.withdrawals import WITHDRAWALS_EXCHANGE
from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.ids import new_id
from tests.bank.conftest import (
    API_KEY,
    StubBank,
    callback_body,
    inbox,
    outbox,
    post_callback,
    signed,
    start_command,
    transfers,
)
from tests.e2e import harness
from tests.servers import free_port, serve, stop, until_serving


async def test_the_webhook_process_serves_callbacks_and_stops(
    bank_db: str, owner: asyncpg.Connection
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "HIWALLET_BANK_DATABASE": bank_db,
        # it must not need one: a broker address that leads nowhere
        "HIWALLET_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/",
    }
    hiwallet = str(Path(sys.executable).parent / "hiwallet")
    proc = await asyncio.create_subprocess_exec(
        hiwallet, "run", "bank-webhook", "--port", str(port), env=env, stdout=asyncio.subprocess.DEVNULL
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await until_serving(client, "bank-webhook")
            ready = await client.get("/ready")
            checks = {"database": "ok", "background": "ok"}
            assert (ready.status_code, ready.json()["checks"]) == (200, checks)
            body = callback_body("transfer.succeeded", "trf_process")
            assert (await post_callback(client, body)).status_code == 202
            forged = signed(body, secrets=["whsec_Zm9yZ2VkLXNlY3JldC1mb3ItdGVzdGluZy0wMTIz"])
            assert (await client.post("/v1/webhooks/bank", content=body, headers=forged)).status_code == 400
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) in (0, -signal.SIGTERM)
    [row] = await inbox(owner)
    assert row["bank_reference"] == "trf_process"
    assert await outbox(owner) == []  # no transfer of that reference yet


async def test_the_adapter_process_consumes_the_real_queue_and_stops(
    bank_db: str, owner: asyncpg.Connection
) -> None:
    """``hiwallet run bank-adapter`` with its default names (contracts.withdrawals' topology), in a
    virtual host of its own (the names are fixed; other runs must not see this one's queue)."""
    vhost = f"hwtest-bank-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(vhost)
    bank = StubBank()
    bank_url, bank_server, bank_thread = serve(bank.app, "stub-bank")
    port = free_port()
    env = {
        **os.environ,
        "HIWALLET_BANK_DATABASE": bank_db,
        "HIWALLET_BANK_BANK_URL": bank_url,
        "HIWALLET_BANK_BANK_API_KEY": API_KEY,
        "HIWALLET_AMQP_URL": harness.amqp_url(vhost),
    }
    hiwallet = str(Path(sys.executable).parent / "hiwallet")
    proc = await asyncio.create_subprocess_exec(
        hiwallet, "run", "bank-adapter", "--port", str(port), env=env, stdout=asyncio.subprocess.DEVNULL
    )
    broker = Broker(harness.amqp_url(vhost), client_name="hiwallet-tests", confirm_timeout_s=5.0)
    command = start_command()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:

            async def ready() -> bool:
                try:
                    return (await client.get("/ready")).status_code == 200
                except httpx.TransportError:
                    return False

            await harness.until(ready, 30, "bank-adapter ready")
            await broker.start()
            await broker.publish(
                [
                    OutgoingMessage(
                        message_id=new_id(),
                        exchange=WITHDRAWALS_EXCHANGE,
                        routing_key="StartBankTransfer",
                        type="StartBankTransfer",
                        body=orjson.dumps(command.model_dump(mode="json")),
                        correlation_id=command.saga_id,
                    )
                ]
            )
            await harness.until(lambda: transfers(owner), 15, "the transfer recorded")
            assert "hiwallet_bank_transfer_commands_total" in (await client.get("/metrics")).text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert await asyncio.wait_for(proc.wait(), 30) in (0, -signal.SIGTERM)
        finally:
            await broker.close()
            stop(bank_server, bank_thread)
            await harness.delete_vhost(vhost)
    [row] = await transfers(owner)
    assert (row["command_id"], row["state"]) == (command.command_id, "pending")
    assert bank.posts == [command.command_id]
