"""`hiwallet run wallet-consumer` as its own process: health, readiness (database, broker and
the consumer) and metrics on its port; it credits what it consumes; SIGTERM stops it cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import asyncpg
import httpx
import orjson

from hiwallet.core.broker import Broker
from hiwallet.ledger import Ledger
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.servers import free_port
from tests.wallet_consumer.conftest import TL, cash, outgoing, topup_body, until, verified

HIWALLET = Path(sys.executable).parent / "hiwallet"


async def test_the_process_serves_consumes_and_stops_on_sigterm(
    wallet_db: str,
    pool: asyncpg.Pool,
    ledger: Ledger,
    broker: Broker,
    settings: WalletConsumerSettings,
    tmp_path: Path,
) -> None:
    port = free_port()
    log_file = tmp_path / "wallet-consumer.jsonl"
    env = {
        **os.environ,
        "HIWALLET_WALLET_CONSUMER_DATABASE": wallet_db,
        "HIWALLET_WALLET_CONSUMER_EXCHANGE": settings.exchange,
        "HIWALLET_WALLET_CONSUMER_DEAD_LETTER_EXCHANGE": settings.dead_letter_exchange,
        "HIWALLET_WALLET_CONSUMER_DEAD_LETTER_KEY": settings.dead_letter_key,
        "HIWALLET_WALLET_CONSUMER_DEAD_LETTER_QUEUE": settings.dead_letter_queue,
        "HIWALLET_WALLET_CONSUMER_WITHDRAWALS_EXCHANGE": settings.withdrawals_exchange,
        "HIWALLET_WALLET_CONSUMER_WITHDRAWALS_QUEUE_PREFIX": settings.withdrawals_queue_prefix,
        "HIWALLET_WALLET_CONSUMER_WITHDRAWALS_DEAD_LETTER_KEY": settings.withdrawals_dead_letter_key,
        "HIWALLET_WALLET_CONSUMER_WITHDRAWALS_DEAD_LETTER_QUEUE": settings.withdrawals_dead_letter_queue,
        "HIWALLET_WALLET_CONSUMER_EVENTS_EXCHANGE": settings.events_exchange,
        "HIWALLET_WALLET_CONSUMER_EVENTS_QUEUE_PREFIX": settings.events_queue_prefix,
        "HIWALLET_WALLET_CONSUMER_EVENTS_DEAD_LETTER_KEY": settings.events_dead_letter_key,
        "HIWALLET_WALLET_CONSUMER_EVENTS_DEAD_LETTER_QUEUE": settings.events_dead_letter_queue,
    }
    process = await asyncio.create_subprocess_exec(
        str(HIWALLET),
        "run",
        "wallet-consumer",
        "--port",
        str(port),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log_file.open("wb"),
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2.0) as client:

            async def ready() -> bool:
                try:
                    return (await client.get("/ready")).status_code == 200
                except httpx.TransportError:
                    return False

            await until(ready, 30)
            assert (await client.get("/health")).json() == {"status": "ok"}
            wallet = (await ledger.open_wallet("ayla")).wallet_id
            await broker.publish([outgoing(settings, topup_body(wallet, 21 * TL))])

            async def credited() -> bool:
                return await cash(ledger, wallet) == 21 * TL

            await until(credited)
            assert "hiwallet_consumer_messages_total" in (await client.get("/metrics")).text
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = await asyncio.wait_for(process.wait(), 30)
        # uvicorn shuts down, then re-raises the signal it caught: killed by SIGTERM, after
        # the lifespan's end (the consumer stopped, its channels closed)
        assert code in (0, -signal.SIGTERM) and time.monotonic() - started < 20
        lines = [orjson.loads(line) for line in log_file.read_bytes().splitlines() if line.startswith(b"{")]
        events = [line["event"] for line in lines if line.get("service") == "wallet-consumer"]
        stopped = events[events.index("Waiting for application shutdown.") :]
        # the three consumers (top-ups, withdrawal commands, settlements) stopped before the
        # process's end; the relay's task is cancelled between
        end = stopped.index("stopped")
        assert stopped[0] == "Waiting for application shutdown."
        assert stopped[1:end].count("consumer stopped") == 3, stopped
        assert "Application shutdown complete." in stopped
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    await verified(ledger)
