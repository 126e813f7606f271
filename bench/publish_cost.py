"""CPU of core.broker's publishing, in this process, per message: ``Broker.publish`` of
``--messages`` messages in batches of ``--batch`` (the relay's shape), with confirms, to a
consistent-hash exchange over 4 queues like hiwallet.topups (quorum, or ``--classic``).
Also RabbitMQ's CPU per message (the whole node: other users of the broker count too).

    .venv/bin/python bench/publish_cost.py [--messages 20000] [--batch 20] [--classic 1|2] [--consume]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import aio_pika.abc
import orjson
import uvloop

import topup_bench as tb
from cpu import pids_cpu_s, process_cpu_s
from hiwallet.core.broker import Broker, OutgoingMessage, Topology, partitioned_topology
from hiwallet.core.ids import new_id
from topup_cpu import rabbitmq_pids

TASKS: set[asyncio.Task[None]] = set()


async def consume_all(broker: Broker, topology: Topology, total: int, done: asyncio.Event) -> None:
    """A consumer per partition queue (prefetch 200), acking what it got every 5 ms with one
    multiple ack, as wallet-consumer acks a batch; ``done`` once ``total`` were acked."""
    count = 0
    for spec in topology.queues:
        if spec.name.endswith(".dead"):
            continue
        channel = await broker.consumer_channel(prefetch=200)
        queue = await channel.get_queue(spec.name)
        got: list[aio_pika.abc.AbstractIncomingMessage] = []

        async def on_message(
            message: aio_pika.abc.AbstractIncomingMessage,
            got: list[aio_pika.abc.AbstractIncomingMessage] = got,
        ) -> None:
            got.append(message)

        async def ack_loop(got: list[aio_pika.abc.AbstractIncomingMessage] = got) -> None:
            nonlocal count
            while True:
                await asyncio.sleep(0.005)
                if got:
                    last, taken = got[-1], len(got)
                    got.clear()
                    await last.ack(multiple=True)
                    count += taken
                    if count >= total:
                        done.set()

        await queue.consume(on_message)
        TASKS.add(asyncio.create_task(ack_loop()))


async def main(args: argparse.Namespace) -> None:
    vhost = f"hiwallet-pubcost-{os.getpid()}"
    await tb.rabbitmqctl("add_vhost", vhost)
    await tb.rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    broker = Broker(f"amqp://guest:guest@127.0.0.1:5672/{vhost}", client_name="publish-cost")
    try:
        await broker.start()
        topology = partitioned_topology(
            "bench.topups",
            partitions=4,
            dead_letter_exchange="bench.dlx",
            dead_letter_key="bench",
            dead_letter_queue="bench.dead",
        )
        if args.classic:
            from dataclasses import replace

            topology = replace(
                topology,
                queues=tuple(
                    replace(
                        q,
                        arguments={
                            "x-queue-type": "classic",
                            "x-queue-version": args.classic,
                            "x-single-active-consumer": True,
                        },
                    )
                    if q.name.startswith("bench.topups")
                    else q
                    for q in topology.queues
                ),
            )
        await broker.declare(topology)
        body = orjson.dumps(
            {"payment": "x" * 40, "wallet": new_id(), "amount_minor": 1000, "currency": "TRY"}
        )

        def batch() -> list[OutgoingMessage]:
            return [
                OutgoingMessage(new_id(), "bench.topups", new_id(), "TopupRecorded", body, correlation_id="c")
                for _ in range(args.batch)
            ]

        for _ in range(20):  # warm-up
            await broker.publish(batch())
        beam = rabbitmq_pids()
        batches = [batch() for _ in range(args.messages // args.batch)]
        n = len(batches) * args.batch
        consumed = asyncio.Event()
        if args.consume:
            await consume_all(broker, topology, n + 20 * args.batch, consumed)
        cpu0, rmq0, t0 = process_cpu_s(), pids_cpu_s(beam), time.perf_counter()
        for b in batches:
            await broker.publish(b)
        if args.consume:
            await asyncio.wait_for(consumed.wait(), 120)
        cpu1, rmq1, t1 = process_cpu_s(), pids_cpu_s(beam), time.perf_counter()
        kind = f"classic v{args.classic}" if args.classic else "quorum"
        print(
            f"batch {args.batch} {kind}{' +consume' if args.consume else ''}: {n / (t1 - t0):,.0f} msg/s, "
            f"client {1e6 * (cpu1 - cpu0) / n:.1f} µs/msg, rabbitmq {1e6 * (rmq1 - rmq0) / n:.1f} µs/msg"
        )
    finally:
        await broker.close()
        await tb.rabbitmqctl("delete_vhost", vhost)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument(
        "--classic", type=int, choices=[1, 2], help="classic queues of this version, not quorum"
    )
    parser.add_argument("--consume", action="store_true", help="consume and ack meanwhile")
    uvloop.run(main(parser.parse_args()))
