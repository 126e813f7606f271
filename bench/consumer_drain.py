"""wallet-consumer's capacity alone: how fast it drains top-ups already waiting in its queues.

    .venv/bin/python bench/consumer_drain.py [--messages 20000] [--prefetch 100 --max-batch 100]

N ``TopupRecorded`` messages (as topup-webhook's relay publishes them: routing key = the wallet,
200 wallets over the four partitions) are published and confirmed first; then
``hiwallet run wallet-consumer`` starts with the given prefetch and batch size, and the rate is
N over the span of ``processed_events.processed_at`` (first to last commit), with the consumer's
CPU share of a core over the drain. ``--prefetch 1 --max-batch 1`` is one message per
transaction (SYSTEM.md's prefetch 1). The rate the end-to-end benchmark (topup_bench.py (b))
needs is 1,000 per second. Everything it starts it stops; it makes and drops its own database
and RabbitMQ virtual host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
import uvloop

from cpu import pids_cpu_s
from hiwallet.core import db
from hiwallet.core.broker import Broker, OutgoingMessage, topups_topology
from hiwallet.core.ids import derived_id
from topup_bench import RESULTS, WALLETS, drop, hiwallet, open_wallets, rabbitmqctl

PUBLISH_CHUNK = 500
DRAIN_TIMEOUT_S = 600.0


def body(wallet: str, i: int) -> bytes:
    pi = f"pi_drain_{os.getpid()}_{i}"
    return orjson.dumps(
        {
            "payment_id": derived_id("topup", "stripe", pi),
            "provider": "stripe",
            "provider_payment_id": pi,
            "wallet": wallet,
            "reference": None,
            "amount_minor": 1_000,
            "currency": "TRY",
            "recorded_at": datetime.now(UTC).isoformat(),
            "route": "webhook",
        }
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    pid = os.getpid()
    wallet_db, vhost = f"hiwallet_bench_drain_{pid}", f"hiwallet-drain-{pid}"
    amqp = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    await drop(wallet_db)
    await db.migrate("wallet", database=wallet_db)
    await rabbitmqctl("add_vhost", vhost)
    await rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    consumer = None
    try:
        wallets = await open_wallets(wallet_db, WALLETS)
        broker = Broker(amqp, client_name="drain-bench")
        await broker.start()
        try:
            await broker.declare(topups_topology())
            messages = [
                OutgoingMessage(
                    message_id=str(uuid.uuid4()),
                    exchange="hiwallet.topups",
                    routing_key=wallets[i % len(wallets)],
                    type="TopupRecorded",
                    body=body(wallets[i % len(wallets)], i),
                )
                for i in range(args.messages)
            ]
            for start in range(0, len(messages), PUBLISH_CHUNK):
                await broker.publish(messages[start : start + PUBLISH_CHUNK])
        finally:
            await broker.close()
        env = {
            **os.environ,
            "HIWALLET_AMQP_URL": amqp,
            "HIWALLET_WALLET_CONSUMER_DATABASE": wallet_db,
            "HIWALLET_WALLET_CONSUMER_PREFETCH": str(args.prefetch),
            "HIWALLET_WALLET_CONSUMER_MAX_BATCH": str(args.max_batch),
        }
        load_before = os.getloadavg()
        consumer = hiwallet("wallet-consumer", env)
        started = time.monotonic()
        cpu_before = pids_cpu_s([consumer.proc.pid])
        conn = await asyncpg.connect(db.owner_dsn(wallet_db))
        try:
            while await conn.fetchval("SELECT count(*) FROM public.processed_events") < args.messages:
                if time.monotonic() - started > DRAIN_TIMEOUT_S:
                    raise RuntimeError("not drained in time")
                await asyncio.sleep(0.2)
            wall_s = time.monotonic() - started
            cpu_s = pids_cpu_s([consumer.proc.pid]) - cpu_before
            span_s = await conn.fetchval(
                "SELECT extract(epoch FROM max(processed_at) - min(processed_at))::float8"
                " FROM public.processed_events"
            )
            lines = await conn.fetchval("SELECT count(*) FROM ledger.transactions WHERE type = 'topup'")
        finally:
            await conn.close()
        return {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "messages": args.messages,
            "prefetch": args.prefetch,
            "max_batch": args.max_batch,
            "posted": lines,
            "drained_per_s": round(args.messages / span_s, 1),
            "span_s": round(span_s, 2),
            "cpu_share_of_a_core": round(cpu_s / wall_s, 2),
            "cpu_ms_per_message": round(1000 * cpu_s / args.messages, 3),
            "load_before": load_before,
        }
    finally:
        if consumer is not None:
            consumer.stop()
        await drop(wallet_db)
        await rabbitmqctl("delete_vhost", vhost)


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--prefetch", type=int, default=100)
    parser.add_argument("--max-batch", type=int, default=100)
    args = parser.parse_args()
    report = uvloop.run(run(args))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"drain-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    cli()
