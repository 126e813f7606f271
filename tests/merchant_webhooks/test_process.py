"""`hiwallet run merchant-webhooks` as its own process: ready and metrics on its port, woken by
wallet-api's commits; killed mid-flight (SIGKILL, attempts in the receiver's hands), it loses
nothing: the next process sends again what was in flight once its lease ends, and a receiver
that deduplicates by webhook-id has every event once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx

from hiwallet.contracts import merchant_events as me
from tests.merchant_webhooks.conftest import Receiver, deliveries, register
from tests.servers import free_port
from tests.waiting import until
from tests.wallet_api.conftest import TL, WalletApi

HIWALLET = Path(sys.executable).parent / "hiwallet"


async def start(database: str, port: int, log: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "HIWALLET_MERCHANT_WEBHOOKS_DATABASE": database,
        "HIWALLET_MERCHANT_WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true",
        "HIWALLET_MERCHANT_WEBHOOKS_LEASE_S": "3",
        "HIWALLET_MERCHANT_WEBHOOKS_REQUEST_TIMEOUT_S": "60",
    }
    return await asyncio.create_subprocess_exec(
        str(HIWALLET),
        "run",
        "merchant-webhooks",
        "--port",
        str(port),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


async def until_ready(port: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2.0) as client:

        async def ready() -> bool:
            try:
                return (await client.get("/ready")).status_code == 200
            except httpx.TransportError:
                return False

        await until(ready, 30, "merchant-webhooks ready")


async def test_the_dispatcher_killed_mid_flight_loses_nothing(
    api: WalletApi, receiver: Receiver, tmp_path: Path
) -> None:
    payer = await api.customer(funds=1_000 * TL)
    shop = await api.business()
    await register(api, shop, receiver.url)
    log = tmp_path / "merchant-webhooks.jsonl"
    port = free_port()
    first = await start(api.database, port, log)
    try:
        await until_ready(port)
        # woken by the commit: delivered while the process runs
        one = (await api.transfer(payer, shop.number, 1 * TL)).json()["id"]
        await until(lambda: len(receiver.requests) == 1, 20, "the first delivery")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (
                'hiwallet_webhook_attempts_total{outcome="delivered"} 1.0'
                in (await client.get("/metrics")).text
            )
        # the receiver now holds every request: the attempts are in flight when the process dies
        receiver.hold_s = 30.0
        more = [(await api.transfer(payer, shop.number, (i + 2) * TL)).json()["id"] for i in range(8)]
        await until(lambda: len(receiver.requests) >= 9, 20, "attempts in flight")
        first.send_signal(signal.SIGKILL)
        await first.wait()
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    pending = [d for d in await deliveries(api) if d["status"] == "pending"]
    assert len(pending) == 8  # nothing recorded for what was in flight
    receiver.hold_s = 0.0
    second = await start(api.database, port, log)
    try:
        await until_ready(port)

        async def all_delivered() -> bool:
            return {d["status"] for d in await deliveries(api)} == {"delivered"}

        await until(all_delivered, 30, "every delivery delivered after the lease")
    finally:
        second.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then re-raises the signal it caught
        assert await asyncio.wait_for(second.wait(), 30) in (0, -signal.SIGTERM)
    kept = receiver.unique()
    assert set(kept) == {me.event_id("payment.received", t) for t in [one, *more]}
    assert len(receiver.requests) >= 17  # the 8 in flight were sent again
