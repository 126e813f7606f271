"""Where the top-up path's CPU goes, per top-up and per process: the measure for judging a
change on a shared machine, where absolute rates are noise.

    .venv/bin/python bench/topup_cpu.py [--rate 600] [--duration 20] [--profile DIR]

Starts topup-webhook and wallet-consumer as ``bench/topup_bench.py`` (b) does, sends
``rate`` × ``duration`` signed webhooks (open loop), waits until every one has its ledger line,
and prints CPU milliseconds per top-up of: topup-webhook, wallet-consumer, the PostgreSQL
sessions of each database (pg_stat_activity's pids), RabbitMQ (the whole node: other users of
the machine's broker count too), and this load client; with the end-to-end p50/p99 and the
deepest outbox and queues sampled. ``--profile DIR``: py-spy records both services meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

import pacing
import topup_bench as tb
from cpu import pids_cpu_s, process_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db


def rabbitmq_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "beam.smp"], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def start_profilers(
    folder: str, children: list[tb.Child], duration_s: float
) -> list[subprocess.Popen[bytes]]:
    """py-spy record of each child for ``duration_s``, raw stacks into ``folder``."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    py_spy = str(Path(sys.executable).parent / "py-spy")
    return [
        subprocess.Popen(
            [
                *(py_spy, "record", "--pid", str(child.proc.pid), "--duration", str(int(duration_s))),
                *("--format", "raw", "--rate", "200", "-o", str(Path(folder) / f"{child.name}.txt")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for child in children
    ]


async def backend_pids(owner: asyncpg.Connection, database: str) -> list[int]:
    rows = await owner.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", database
    )
    return [r["pid"] for r in rows]


async def open_loop(
    port: int,
    rate: int,
    duration_s: float,
    request: Any,
    timings: dict[str, list[float]],
    connections: int = tb.CONNECTIONS_OPEN_LOOP,
) -> tuple[dict[int, float], dict[int, int]]:
    """topup_bench.open_loop, also timing each request: ``late`` (sent after it was due: no
    free connection, or this client late) and ``answer`` (sent -> answered), in ms."""
    free: asyncio.Queue[tb.httpload.Connection] = asyncio.Queue()
    for _ in range(connections):
        free.put_nowait(tb.httpload.Connection("127.0.0.1", port))
    due: dict[int, float] = {}
    statuses: dict[int, int] = {}

    async def send(i: int, due_wall: float) -> None:
        conn = await free.get()
        try:
            headers, body = request(i)
            sent = time.time()
            timings["late"].append((sent - due_wall) * 1000)
            status, _ = await conn.request("POST", tb.WEBHOOK_PATH, headers, body)
            timings["answer"].append((time.time() - sent) * 1000)
        except tb.httpload.HttpLoadError:
            status = 0
        finally:
            free.put_nowait(conn)
        statuses[status] = statuses.get(status, 0) + 1
        if 200 <= status < 300:
            due[i] = due_wall

    await pacing.open_loop(rate, duration_s, send)
    while not free.empty():
        free.get_nowait().close()
    return due, statuses


async def stage_latencies(topup_db: str, wallet_db: str, due: dict[str, float]) -> dict[str, Any]:
    """Where the latency goes: due -> the outbox row (its transaction's start: the HTTP queue
    and the ingest), -> sent_at (the relay's claim), -> the ledger line (publish, RabbitMQ,
    wallet-consumer). p50 and p99 of each, in ms."""
    topup = await asyncpg.connect(db.owner_dsn(topup_db))
    wallet = await asyncpg.connect(db.owner_dsn(wallet_db))
    try:
        outbox = await topup.fetch(
            "SELECT body->>'provider_payment_id' AS ref, extract(epoch FROM created_at)::float8 AS made,"
            " extract(epoch FROM sent_at)::float8 AS sent FROM topup.outbox"
        )
        lines = await wallet.fetch(
            "SELECT ref, extract(epoch FROM posted_at)::float8 AS at FROM ledger.transactions"
            " WHERE type = 'topup'"
        )
    finally:
        await topup.close()
        await wallet.close()
    posted = {r["ref"]: r["at"] for r in lines}
    parts: dict[str, list[float]] = {"ingest": [], "outbox": [], "to_ledger": []}
    for r in outbox:
        if r["ref"] not in due or r["ref"] not in posted or r["sent"] is None:
            continue
        parts["ingest"].append((r["made"] - due[r["ref"]]) * 1000)
        parts["outbox"].append((r["sent"] - r["made"]) * 1000)
        parts["to_ledger"].append((posted[r["ref"]] - r["sent"]) * 1000)
    return {k: (round(tb.pct(v, 0.5), 1), round(tb.pct(v, 0.99), 1)) for k, v in parts.items()}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    pid = os.getpid()
    topup_db, wallet_db = f"hiwallet_bench_topup_{pid}", f"hiwallet_bench_wallet_{pid}"
    vhost = f"hiwallet-bench-{pid}"
    amqp = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    await tb.drop(topup_db, wallet_db)
    await databases.migrate("topup", database=topup_db)
    await databases.migrate("wallet", database=wallet_db)
    await tb.rabbitmqctl("add_vhost", vhost)
    await tb.rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    base = {**os.environ, "HIWALLET_AMQP_URL": amqp}
    children: list[tb.Child] = []
    profilers: list[subprocess.Popen[bytes]] = []
    secret = tb.SECRET.encode()
    try:
        wallets = await tb.open_wallets(wallet_db, tb.WALLETS)
        webhook = tb.hiwallet("topup-webhook", {**base, "HIWALLET_TOPUP_DATABASE": topup_db})
        consumer = tb.hiwallet("wallet-consumer", {**base, "HIWALLET_WALLET_CONSUMER_DATABASE": wallet_db})
        children += [webhook, consumer]
        await asyncio.gather(webhook.ready(), consumer.ready())

        def request(i: int) -> tuple[dict[str, str], bytes]:
            return tb.signed_event(wallets[i % len(wallets)], f"pi_bench_{pid}_{i}", secret)

        # A warm-up: pools filled, code paths hot, before anything is counted.
        due, _ = await tb.open_loop(webhook.port, args.rate, 2.0, request)
        await tb.ledger_latencies(wallet_db, {f"pi_bench_{pid}_{i}": t for i, t in due.items()})
        offset = 10_000_000

        owner = await asyncpg.connect(db.owner_dsn("postgres"))
        try:
            groups = {
                "topup-webhook": lambda: [webhook.proc.pid],
                "wallet-consumer": lambda: [consumer.proc.pid],
                "rabbitmq": rabbitmq_pids,
            }
            pg_before = {d: await backend_pids(owner, d) for d in (topup_db, wallet_db)}
            before = {name: pids_cpu_s(f()) for name, f in groups.items()}
            pg_cpu_before = {d: {p: pids_cpu_s([p]) for p in pids} for d, pids in pg_before.items()}
            client_before = process_cpu_s()
            if args.profile:
                profilers = start_profilers(args.profile, [webhook, consumer], args.duration)
            sampler = tb.Sampler(topup_db, amqp)
            sampling = asyncio.create_task(sampler.run())
            started = time.monotonic()
            timings: dict[str, list[float]] = {"late": [], "answer": []}
            due, statuses = await open_loop(
                webhook.port,
                args.rate,
                args.duration,
                lambda i: request(offset + i),
                timings,
                args.connections,
            )
            due_by_ref = {f"pi_bench_{pid}_{offset + i}": t for i, t in due.items()}
            latency = await tb.ledger_latencies(wallet_db, due_by_ref)
            elapsed = time.monotonic() - started
            client_cpu = process_cpu_s() - client_before
            after = {name: pids_cpu_s(f()) for name, f in groups.items()}
            pg_after = {d: await backend_pids(owner, d) for d in (topup_db, wallet_db)}
            sampler.stop.set()
            await sampling
        finally:
            await owner.close()
        stages = await stage_latencies(topup_db, wallet_db, due_by_ref)
        for name, values in timings.items():
            stages[f"client {name}"] = (round(tb.pct(values, 0.5), 1), round(tb.pct(values, 0.99), 1))
        count = latency["posted"]
        per_ms = {name: (after[name] - before[name]) * 1000 / count for name in groups}
        for database, label in ((topup_db, "pg topup"), (wallet_db, "pg wallet")):
            cpu = sum(pids_cpu_s([p]) - pg_cpu_before[database].get(p, 0.0) for p in pg_after[database])
            per_ms[label] = cpu * 1000 / count
        per_ms["load client"] = client_cpu * 1000 / count
        per_ms["total (excl. client)"] = sum(v for k, v in per_ms.items() if k != "load client")
        result = {
            "rate": args.rate,
            "duration_s": args.duration,
            "elapsed_s": round(elapsed, 1),
            "statuses": statuses,
            "latency": latency,
            "cpu_ms_per_topup": {k: round(v, 3) for k, v in per_ms.items()},
            "stages_p50_p99_ms": stages,
            "max_outbox_unsent": max((s["outbox_unsent"] for s in sampler.samples), default=0),
            "max_queue_depth": max((s["queue_depth"] for s in sampler.samples), default=0),
            "load": os.getloadavg(),
        }
        for p in profilers:
            with suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)
        return result
    finally:
        for child in children:
            child.stop()
        with suppress(Exception):
            await tb.rabbitmqctl("delete_vhost", vhost)
        await tb.drop(topup_db, wallet_db)


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=600)
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--profile", help="a folder: py-spy's raw stacks of both services")
    parser.add_argument(
        "--connections",
        type=int,
        default=tb.CONNECTIONS_OPEN_LOOP,
        help="the open loop's connections at most",
    )
    result = uvloop.run(main(parser.parse_args()))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    cli()
