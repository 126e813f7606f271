"""The merchants' webhooks: how many deliveries a second merchant-webhooks makes to a local
receiver (target >= 500/s), and how long from a movement's commit to its delivery (target: p99
under 1 s).

    .venv/bin/python bench/webhook_bench.py [--events 5000] [--rate 200] [--duration 15]

It migrates a fresh wallet database, opens businesses (wallet-api's records, as the owner) each
with one endpoint at a receiver on 127.0.0.1 (its own process: uvicorn with a bare ASGI callable
that answers 204 and notes, for each webhook-id the first time it comes, how long after the
event's commit it arrived), and starts merchant-webhooks as `hiwallet run merchant-webhooks`
runs it (its own role, development's setting that allows 127.0.0.1).

(i) throughput: ``--events`` events committed at once (one transaction, as a burst of payments
would leave them), then the time until the receiver has had every one: deliveries per second,
signed, recorded, each its own HTTP request.
(ii) latency: events committed one by one at ``--rate`` a second for ``--duration`` seconds,
each in its own transaction followed by the pg_notify wallet-api sends after its commits
(core.outbox.RelayHint), as payments are; each event carries the time just before its commit.
The latency is the receiver's clock at arrival minus that (the same machine's clock):
commit, wake-up, fan-out, claim, signing and the HTTP call included.

The events are written as wallet-api's statement writes them (wallet.webhook_events rows), not
through HTTP transfers: what is measured is merchant-webhooks, not wallet-api (its own bench,
bench/ledger_bench.py --wallet-api-only, measures the transfers with the events' statement).

Results as JSON in bench/results/webhooks-<time>.json. Everything it starts it stops; it drops
its database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

import asyncpg
import httpx
import uvloop

import benchlog
from cpu import pids_cpu_s
from hiwallet.contracts import databases
from hiwallet.contracts import merchant_events as me
from hiwallet.core import db
from hiwallet.core.ids import new_id
from hiwallet.core.sealing import KeyRing
from hiwallet.core.settings import get_settings
from topup_bench import Child, drop, free_port, pct

LOG = benchlog.LOG
BUSINESSES = 20

# The receiver: 204 to every POST; per webhook-id, the first arrival's delay after the event's
# commit (the payload's t0). GET /stats answers them.
_RECEIVER = """
import sys, time, orjson, uvicorn
port = int(sys.argv[1])
first = {}
total = [0]
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["method"] == "POST":
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        now = time.time()
        total[0] += 1
        headers = dict(scope["headers"])
        msg_id = headers[b"webhook-id"].decode()
        if msg_id not in first:
            t0 = orjson.loads(body)["data"].get("t0")
            first[msg_id] = now - t0 if t0 else 0.0
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/reset":
        first.clear()
        total[0] = 0
    body = orjson.dumps({"unique": len(first), "total": total[0], "delays_s": list(first.values())}
                        if scope["path"] == "/stats" else {"status": "ready"})
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
"""

INSERT_EVENT = """
INSERT INTO wallet.webhook_events (bucket, id, account_id, type, resource_id, payload, created_at)
SELECT b, 'evt_' || md5(r), a, 'payment.received', r,
       jsonb_build_object('account_id', a, 'transfer_id', r, 'amount_minor', 1250, 'currency', 'TRY',
                          't0', $4::float8),
       now()
  FROM unnest($1::smallint[], $2::text[], $3::text[]) AS x (b, a, r)
"""


async def businesses(owner: asyncpg.Connection, receiver_url: str, count: int) -> list[tuple[int, str]]:
    """Business accounts (wallet-api's records), each with one endpoint at the receiver."""
    ring = KeyRing.parse(me.DEV_SECRET_KEYS)
    made = []
    for i in range(count):
        bucket = 1 + i % 1000
        account = f"{bucket:04d}:a:{new_id()}"
        await owner.execute(
            "INSERT INTO wallet.accounts (bucket, id, kind, tier, name, opened_by, created_at, updated_at)"
            " VALUES ($1, $2, 'business', NULL, 'Bench', 'bench', now(), now())",
            bucket,
            account,
        )
        endpoint = f"{bucket:04d}:we:{new_id()}"
        secret = "whsec_" + "YmVuY2gtc2VjcmV0LWJlbmNoLXNlY3JldC0zMmJ5dGVz"
        await owner.execute(
            "INSERT INTO wallet.webhook_endpoints (bucket, id, account_id, url, event_types, secret_sealed,"
            " created_at, updated_at) VALUES ($1, $2, $3, $4, '{payment.received}', $5, now(), now())",
            bucket,
            endpoint,
            account,
            receiver_url,
            ring.seal(secret.encode(), me.secret_place(endpoint)),
        )
        made.append((bucket, account))
    return made


async def stats(client: httpx.AsyncClient) -> dict[str, Any]:
    data: dict[str, Any] = (await client.get("/stats")).json()
    return data


async def until_received(client: httpx.AsyncClient, count: int, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (await stats(client))["unique"] >= count:
            return time.time()
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the receiver did not get {count} webhooks in {timeout_s} s (log: {LOG})")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    database = f"hwb_webhooks_{uuid.uuid4().hex[:8]}"
    await databases.migrate("wallet", database=database, settings=settings)
    owner = await asyncpg.connect(db.owner_dsn(database, settings))
    children: list[Child] = []
    try:
        receiver_port = free_port()
        receiver = Child(
            "receiver",
            receiver_port,
            [sys.executable, "-c", _RECEIVER, str(receiver_port)],
            dict(os.environ),
            log_path=LOG,
        )
        children.append(receiver)
        await receiver.ready()
        shops = await businesses(owner, f"{receiver.url}/hook", BUSINESSES)
        port = free_port()
        env = {
            **os.environ,
            "HIWALLET_MERCHANT_WEBHOOKS_DATABASE": database,
            "HIWALLET_MERCHANT_WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true",
            "HIWALLET_ACCESS_LOG": "false",
        }
        service = Child(
            "merchant-webhooks",
            port,
            [sys.executable, "-m", "hiwallet.cli", "run", "merchant-webhooks", "--port", str(port)],
            env,
            log_path=LOG,
        )
        children.append(service)
        await service.ready()

        async with httpx.AsyncClient(base_url=receiver.url, timeout=10) as client:

            async def commit(n: int, t0: float | None) -> None:
                picks = [shops[i % len(shops)] for i in range(n)]
                await owner.execute(
                    INSERT_EVENT,
                    [b for b, _ in picks],
                    [a for _, a in picks],
                    [f"{b:04d}:payment-{new_id()}" for b, _ in picks],
                    t0 if t0 is not None else 0.0,
                )

            # (i) a burst: every event committed at once
            print(f"(i) {args.events} events at once ...", flush=True)
            cpu_before = pids_cpu_s([service.pid])
            async with owner.transaction():
                await commit(args.events, None)
            started = time.time()
            await owner.execute("SELECT pg_notify($1, '')", me.NOTIFY_CHANNEL)
            with benchlog.phase("(i) burst", args.events / 500):
                ended = await until_received(client, args.events, 120)
            cpu = pids_cpu_s([service.pid]) - cpu_before
            burst = {
                "events": args.events,
                "deliveries_per_s": round(args.events / (ended - started), 1),
                "seconds": round(ended - started, 2),
                "server_cpu_ms_per_delivery": round(cpu * 1000 / args.events, 3),
                "requests": (await stats(client))["total"],
            }
            print(f"  {burst}", flush=True)

            # (ii) latency: one by one at the rate, each its own commit and hint
            await client.get("/reset")
            total = int(args.rate * args.duration)
            print(f"(ii) {args.rate}/s for {args.duration} s ...", flush=True)
            begin = time.monotonic()
            with benchlog.phase("(ii) latency", args.duration):
                for i in range(total):
                    due = begin + i / args.rate
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    async with owner.transaction():
                        await commit(1, time.time())
                    await owner.execute("SELECT pg_notify($1, '')", me.NOTIFY_CHANNEL)
                await until_received(client, total, 60)
            delays_ms = [d * 1000 for d in (await stats(client))["delays_s"]]
            latency = {
                "events": total,
                "rate_per_s": args.rate,
                "p50_ms": round(pct(delays_ms, 0.50), 1),
                "p99_ms": round(pct(delays_ms, 0.99), 1),
                "max_ms": round(max(delays_ms), 1),
            }
            print(f"  {latency}", flush=True)
        service.sample()
        delivered = await owner.fetchval(
            "SELECT count(*) FROM wallet.webhook_deliveries WHERE status = 'delivered'"
        )
        attempts = await owner.fetchval("SELECT count(*) FROM wallet.webhook_attempts")
        return {
            "what": "merchant-webhooks, local receiver: deliveries/s of a burst, commit-to-delivery latency",
            "businesses": BUSINESSES,
            "burst": burst,
            "latency": latency,
            "delivered": delivered,
            "attempts_recorded": attempts,
            "targets": {"deliveries_per_s_min": 500, "p99_ms_max": 1000},
            "targets_met": {
                "deliveries_per_s": burst["deliveries_per_s"] >= 500,
                "p99_ms": latency["p99_ms"] < 1000,
            },
            "merchant_webhooks_peak_mb": round(service.peak_mb, 1),
            "load_1m": os.getloadavg()[0],
        }
    finally:
        for child in reversed(children):
            child.stop()
        await owner.close()
        await drop(database)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=5000, help="events of the burst (default 5000)")
    parser.add_argument("--rate", type=int, default=200, help="events a second in (ii) (default 200)")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of (ii) (default 15)")
    args = parser.parse_args()
    benchlog.to_file()
    result = uvloop.run(main(args))
    path = benchlog.save("webhooks", result)
    print(json.dumps(result, indent=2))
    print(f"results: {path}")
