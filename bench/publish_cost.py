"""CPU of core.broker's publishing, in this process, per message: ``Broker.publish`` of
``--messages`` messages in batches of ``--batch`` (the relay's shape), with confirms, to a
consistent-hash exchange over 4 queues like hiwallet.topups (quorum, or ``--classic``).
Also RabbitMQ's CPU per message (the whole node: other users of the broker count too).

    .venv/bin/python bench/publish_cost.py [--messages 20000] [--batch 20] [--classic]
"""

from __future__ import annotations

import argparse
import os
import time

import orjson
import uvloop

import topup_bench as tb
from cpu import pids_cpu_s, process_cpu_s
from hiwallet.core.broker import Broker, OutgoingMessage, partitioned_topology
from hiwallet.core.ids import new_id
from topup_cpu import rabbitmq_pids


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
                    replace(q, arguments={"x-queue-type": "classic", "x-single-active-consumer": True})
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
        cpu0, rmq0, t0 = process_cpu_s(), pids_cpu_s(beam), time.perf_counter()
        for b in batches:
            await broker.publish(b)
        cpu1, rmq1, t1 = process_cpu_s(), pids_cpu_s(beam), time.perf_counter()
        n = len(batches) * args.batch
        print(
            f"batch {args.batch} {'classic' if args.classic else 'quorum'}: {n / (t1 - t0):,.0f} msg/s, "
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
    parser.add_argument("--classic", action="store_true")
    uvloop.run(main(parser.parse_args()))
