"""wallet-consumer's capacity alone: how fast it drains top-ups already waiting in its queues.

    .venv/bin/python bench/consumer_drain.py [--messages 20000] [--prefetch 100 --max-batch 100]

N ``TopupRecorded`` messages (as topup-webhook's relay publishes them: routing key = the wallet,
200 wallets over the four partitions) are published and confirmed first; then
``hiwallet run wallet-consumer`` starts with the given prefetch and batch size, and the rate is
N over the span of ``processed_events.processed_at`` (first to last commit), with the consumer's
CPU share of a core over the drain. ``--prefetch 1 --max-batch 1`` is one message per
transaction (prefetch 1). The rate the end-to-end benchmark (topup_bench.py (b))
needs is 1,000 per second. Everything it starts it stops; it makes and drops its own database
and RabbitMQ virtual host.

``--rate R --seconds S`` measures the consumer at a fixed rate instead: it starts first, then
R messages a second are published for S seconds (open loop, a confirmed batch every 10 ms), and
each message's latency is its ledger transaction's posted_at minus the moment it was due to be
published (publish, confirm, delivery, the consumer); the queues' depth is sampled every second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import aio_pika
import asyncpg
import orjson
import uvloop

import benchlog
from cpu import pids_cpu_s
from hiwallet.contracts import databases
from hiwallet.contracts.topups import topups_topology
from hiwallet.core import db
from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.ids import derived_id
from topup_bench import PARTITIONS, WALLETS, drop, hiwallet, open_wallets, pct, rabbitmqctl

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
    await databases.migrate("wallet", database=wallet_db)
    await rabbitmqctl("add_vhost", vhost)
    await rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    consumer = None
    try:
        wallets = await open_wallets(wallet_db, WALLETS)
        if args.rate:
            return await at_rate(args, wallets, wallet_db, amqp)
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


def _env(args: argparse.Namespace, wallet_db: str, amqp: str) -> dict[str, str]:
    return {
        **os.environ,
        "HIWALLET_AMQP_URL": amqp,
        "HIWALLET_WALLET_CONSUMER_DATABASE": wallet_db,
        "HIWALLET_WALLET_CONSUMER_PREFETCH": str(args.prefetch),
        "HIWALLET_WALLET_CONSUMER_MAX_BATCH": str(args.max_batch),
    }


async def at_rate(args: argparse.Namespace, wallets: list[str], wallet_db: str, amqp: str) -> dict[str, Any]:
    consumer = hiwallet("wallet-consumer", _env(args, wallet_db, amqp))
    broker = Broker(amqp, client_name="drain-bench")
    try:
        await consumer.ready()
        await broker.start()
        total = int(args.rate * args.seconds)
        due: dict[str, float] = {}
        depths: list[int] = []
        done = asyncio.Event()

        async def sample() -> None:
            # A plain connection (topup_bench's Sampler does the same): a robust channel's
            # passive declare of the same queue again does not report a fresh count.
            connection = await aio_pika.connect(amqp, timeout=10)
            try:
                channel = await connection.channel()
                while not done.is_set():
                    depth = 0
                    for name in PARTITIONS:
                        queue = await channel.declare_queue(name, passive=True)
                        result = queue.declaration_result
                        depth += int(result.message_count or 0) if result is not None else 0
                    depths.append(depth)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), 1.0)
            finally:
                await connection.close()

        sampler = asyncio.create_task(sample())
        tick_s = 0.01
        pending: set[asyncio.Task[None]] = set()
        confirmed_lag_ms: list[float] = []
        cpu_before = pids_cpu_s([consumer.proc.pid])
        started = time.monotonic()
        sent = 0
        while sent < total:
            due_mono = started + (sent / args.rate)
            await asyncio.sleep(max(0.0, due_mono - time.monotonic()))
            upto = min(total, int((time.monotonic() - started) * args.rate) + 1)
            batch = []
            now = time.time() - (time.monotonic() - due_mono)  # when the first was due, wall clock
            for i in range(sent, upto):
                wallet = wallets[i % len(wallets)]
                pi = f"pi_drain_{os.getpid()}_{i}"
                due[pi] = now + (i - sent) / args.rate
                batch.append(
                    OutgoingMessage(
                        message_id=str(uuid.uuid4()),
                        exchange="hiwallet.topups",
                        routing_key=wallet,
                        type="TopupRecorded",
                        body=body(wallet, i),
                    )
                )
            sent = upto

            async def publish(batch: list[OutgoingMessage] = batch, due_at: float = due_mono) -> None:
                await broker.publish(batch)
                confirmed_lag_ms.append((time.monotonic() - due_at) * 1000)

            task = asyncio.create_task(publish())
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(tick_s)
        await asyncio.gather(*pending)
        conn = await asyncpg.connect(db.owner_dsn(wallet_db))
        try:
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while (
                await conn.fetchval("SELECT count(*) FROM ledger.transactions WHERE type = 'topup'") < total
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("not drained in time")
                await asyncio.sleep(0.2)
            wall_s = time.monotonic() - started
            cpu_s = pids_cpu_s([consumer.proc.pid]) - cpu_before
            rows = await conn.fetch(
                "SELECT ref, extract(epoch FROM posted_at)::float8 AS at FROM ledger.transactions"
                " WHERE type = 'topup'"
            )
        finally:
            await conn.close()
        done.set()
        await sampler
        latencies = [(r["at"] - due[r["ref"]]) * 1000 for r in rows if r["ref"] in due]
        by_second: dict[int, list[float]] = {}
        first_due = min(due.values())
        for r in rows:
            if r["ref"] in due:
                by_second.setdefault(int(due[r["ref"]] - first_due), []).append(
                    (r["at"] - due[r["ref"]]) * 1000
                )
        return {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "rate_per_s": args.rate,
            "seconds": args.seconds,
            "prefetch": args.prefetch,
            "max_batch": args.max_batch,
            "posted": len(latencies),
            "p50_ms": round(pct(latencies, 0.5), 1),
            "p99_ms": round(pct(latencies, 0.99), 1),
            "max_ms": round(max(latencies, default=0.0), 1),
            "queue_depth_each_s": depths,
            # the publisher's own lag: confirmed minus due (a late publisher shows here, not the consumer)
            "publish_confirmed_p50_ms": round(pct(confirmed_lag_ms, 0.5), 1),
            "publish_confirmed_p99_ms": round(pct(confirmed_lag_ms, 0.99), 1),
            "p99_ms_each_s": [round(pct(v, 0.99)) for _, v in sorted(by_second.items())],
            "cpu_share_of_a_core": round(cpu_s / wall_s, 2),
            "load_before": os.getloadavg(),
        }
    finally:
        await broker.close()
        consumer.stop()


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--prefetch", type=int, default=100)
    parser.add_argument("--max-batch", type=int, default=100)
    parser.add_argument("--rate", type=int, default=0, help="messages a second (0: drain a backlog)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long at --rate")
    args = parser.parse_args()
    report = uvloop.run(run(args))
    benchlog.save("drain", report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    cli()
