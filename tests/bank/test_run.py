"""``hiwallet run bank-webhook``: the process starts, answers /ready with its database alone (it
has no broker), keeps a signed callback, refuses a forged one, and stops."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import asyncpg
import httpx

from tests.bank.conftest import callback_body, inbox, outbox, post_callback, signed
from tests.servers import free_port


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
            for _ in range(200):
                try:
                    if (await client.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
            ready = await client.get("/ready")
            assert (ready.status_code, ready.json()["checks"]) == (200, {"database": "ok"})
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
