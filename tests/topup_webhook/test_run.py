"""``hiwallet run topup-webhook``: the process starts, serves, answers /ready without a broker
(the broker address here leads nowhere: this test touches no RabbitMQ object), and stops."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import asyncpg
import httpx

from tests.servers import free_port, until_serving
from tests.topup_webhook.conftest import post_stripe, stored, stripe_events, wallet_id


async def test_the_process_serves_webhooks_and_stops(topup_db: str, owner: asyncpg.Connection) -> None:
    port = free_port()
    env = {
        **os.environ,
        "HIWALLET_TOPUP_DATABASE": topup_db,
        "HIWALLET_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/",
    }
    hiwallet = str(Path(sys.executable).parent / "hiwallet")
    proc = await asyncio.create_subprocess_exec(
        hiwallet, "run", "topup-webhook", "--port", str(port), env=env, stdout=asyncio.subprocess.DEVNULL
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await until_serving(client, "topup-webhook")
            ready = await client.get("/ready")
            assert (ready.status_code, ready.json()["checks"]) == (503, {"broker": "unavailable"})
            assert (await post_stripe(client, stripe_events(wallet=wallet_id())[0])).status_code == 202
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn stops gracefully, then raises the signal it caught again (as wallet-api's test)
        assert await asyncio.wait_for(proc.wait(), 20) in (0, -signal.SIGTERM)
    s = await stored(owner)
    assert (len(s.inbox), len(s.payments), len(s.outbox)) == (1, 1, 1)
    assert s.outbox[0]["sent_at"] is None  # kept until a broker is there
