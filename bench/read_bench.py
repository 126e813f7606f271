"""wallet-api's reads against a bare one-query endpoint, in interleaved rounds (issue 26).

    make bench-read   # or: .venv/bin/python bench/read_bench.py [--rounds 6] [--round-s 3] [--concurrency 8]

What a customer's app reads most: ``GET /v1/wallets/{id}`` (the balances), ``GET
/v1/wallets/{id}/overview`` (the home page's: balances, live promo batches, 30 days of cash) and
a statement page (``GET /v1/wallets/{id}/statement``, 50 lines with their counterparties).
Each is compared with the simplest thing that could answer it: a bare endpoint (one uvicorn
process, uvloop and httptools, a plain ASGI callable, no token, no framework) that runs one
query through an asyncpg pool and answers JSON: the ledger's own ``wallet_balance`` query for
the wallet and the overview, its ``statement`` query for the statement page. The ratio (wallet-
api's reads per second over the bare one's) says what wallet-api's token check, membership,
framework, answer model and extra queries cost. Target: >= 0.8.

It starts the identity service and wallet-api as `hiwallet run wallet-api` runs them
(bench/wallet_api_bench.py's processes, fresh databases), opens ``--concurrency`` funded customers
with real tokens, gives each wallet ``--lines`` statement lines (p2p transfers among them through
wallet-api, so each line has a counterparty), loads ``--background-lines`` of other wallets' lines
if asked (bench/growth_loader.py: the planner's choices on a grown ledger), then, ``--rounds``
times, for each read: the bare side and wallet-api's for ``--round-s`` seconds each, closed loop,
one keep-alive connection per customer (bench/httpload.py), the order of the two swapping every
round (ABBA), each side on its own (the other idle). Reported per read: the median of the rounds'
ratios and their spread, both sides' reads/s, p50 and p99 (all rounds merged), and the CPU per
read (µs) of the server process and of the wallet database's PostgreSQL backends (their /proc
times: each side runs alone, so the database's backends' CPU in a round is that side's): on a
shared machine, throughput drifts from minute to minute, CPU per read much less.

With ``--baseline SRC`` (the ``src`` folder of another tree, e.g. ``git archive main src``), a
second wallet-api runs that code on the same database, as a third side in the same rounds (the
three in a rotating order): its ratio to the bare side, and this tree's to it (``vs_baseline``,
the median of the rounds' ratios). Both serve this tree's schema: a comparison of code that
migrates differently needs two runs.

Results as JSON in bench/results/read-<time>.json. Everything it starts it stops; it drops its
databases (``--keep-db``: not the wallet database, for EXPLAIN afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import uvloop

import benchlog
import growth_loader
import httpload
import wallet_api_bench as wb
from cpu import pids_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

TARGET_RATIO = 0.8
STATEMENT_LIMIT = 50

# The bare side: one query, answered as JSON. The queries are the ledger's own (the same text
# wallet-api's store sends), through a pool as the wallet database's application role.
_BARE = """
import sys, asyncpg, uvicorn, orjson
from hiwallet.ledger.store import Q, bucket_of
port, dsn = int(sys.argv[1]), sys.argv[2]
state = {}
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                state["pool"] = await asyncpg.create_pool(dsn, min_size=4, max_size=10)
                await send({"type": "lifespan.startup.complete"})
            else:
                await state["pool"].close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    parts = scope["path"].split("/")
    pool = state["pool"]
    if parts[-1] == "ready":
        body = b'{"status":"ready"}'
    elif parts[-1] == "statement":
        wallet = parts[-2]
        account = wallet + ":cash"
        rows = await pool.fetch(Q["statement"], bucket_of(account), account, 0, 51)
        body = orjson.dumps({"wallet_id": wallet, "lines": [
            {"transaction_id": r["transaction_id"], "type": r["type"], "reference": r["ref"],
             "amount": int(r["amount"]), "currency": r["currency"], "balance_after": int(r["balance_after"]),
             "version": r["version"], "posted_at": r["posted_at"].isoformat()} for r in rows[:50]]})
    else:
        wallet = parts[-1]
        rows = await pool.fetch(Q["wallet_balance"], bucket_of(wallet), [wallet + ":cash", wallet + ":promo"])
        by = {r["purse"]: r for r in rows}
        cash, held = int(by["cash"]["balance"]), int(by["cash"]["held"])
        promo = int(by["promo"]["balance"]) - int(by["promo"]["expired"])
        body = orjson.dumps({"id": wallet, "currency": by["cash"]["currency"], "cash": cash, "promo": promo,
                             "held": held, "available": cash - held + promo})
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning",
            access_log=False)
"""

READS = ("wallet", "overview", "statement")


def api_path(read: str, wallet: str) -> str:
    if read == "wallet":
        return f"/v1/wallets/{wallet}"
    if read == "overview":
        return f"/v1/wallets/{wallet}/overview?days=30"
    return f"/v1/wallets/{wallet}/statement?limit={STATEMENT_LIMIT}"


def bare_path(read: str, wallet: str) -> str:
    return f"/bare/wallets/{wallet}/statement" if read == "statement" else f"/bare/wallets/{wallet}"


async def backend_pids(conn: asyncpg.Connection, database: str) -> list[int]:
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", database
    )
    return [int(r["pid"]) for r in rows]


async def side_round(
    port: int,
    paths: list[tuple[str, dict[str, str]]],
    duration_s: float,
    server_pids: list[int],
    observer: asyncpg.Connection,
    database: str,
    latencies: list[float],
) -> dict[str, Any]:
    """One side for ``duration_s``: each connection reads its own customer's path in a loop."""
    statuses: dict[int, int] = {}
    deadline = time.perf_counter() + duration_s
    count = 0

    async def worker(path: str, headers: dict[str, str]) -> None:
        nonlocal count
        conn = httpload.Connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                status, _ = await conn.request("GET", path, headers)
                if status == 200:
                    latencies.append((time.perf_counter() - started) * 1000)
                    count += 1
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            conn.close()

    backends = await backend_pids(observer, database)
    server_before, db_before = pids_cpu_s(server_pids), pids_cpu_s(backends)
    started = time.perf_counter()
    await asyncio.gather(*(worker(path, headers) for path, headers in paths))
    elapsed = time.perf_counter() - started
    # A backend that started during the round counts all its CPU, one that ended counts nothing.
    backends_after = await backend_pids(observer, database)
    db_after = pids_cpu_s(backends_after) - pids_cpu_s([p for p in backends_after if p not in backends])
    db_new = pids_cpu_s([p for p in backends_after if p not in backends])
    per = max(count, 1)
    return {
        "reads_per_s": round(count / elapsed, 1),
        "reads": count,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "server_cpu_us": round((pids_cpu_s(server_pids) - server_before) / per * 1e6),
        "db_cpu_us": round((db_after - db_before + db_new) / per * 1e6),
    }


def merged(rounds: list[dict[str, Any]], latencies: list[float]) -> dict[str, Any]:
    return {
        "reads_per_s_median": statistics.median(r["reads_per_s"] for r in rounds),
        "p50_ms": round(wb.pct(latencies, 0.5), 2),
        "p99_ms": round(wb.pct(latencies, 0.99), 2),
        "server_cpu_us_median": statistics.median(r["server_cpu_us"] for r in rounds),
        "db_cpu_us_median": statistics.median(r["db_cpu_us"] for r in rounds),
        "errors": sum(v for r in rounds for k, v in r["statuses"].items() if k != "200"),
        "rounds": rounds,
    }


async def statement_lines(api: str, people: list[tuple[str, str, str]], lines: int) -> None:
    """About ``lines`` lines on each customer's cash: p2p transfers among them (each transfer
    is a line of its sender and one of its receiver), so each line has a counterparty."""
    host, port = api.removeprefix("http://").rsplit(":", 1)
    rounds = max(1, lines // 2)

    async def sender(i: int) -> None:
        token, wallet, _ = people[i]
        conn = httpload.Connection(host, int(port))
        try:
            for n in range(rounds):
                to = people[(i + 1 + n % (len(people) - 1)) % len(people)][2]
                body = json.dumps({"from_wallet": wallet, "to_wallet_number": to, "amount": 1}).encode()
                headers = {
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/json",
                    "Idempotency-Key": str(uuid.uuid4()),
                }
                status, answer = await conn.request("POST", "/v1/transfers", headers, body)
                if status != 201:
                    raise RuntimeError(f"a set-up transfer answered {status}: {answer[:200]!r}")
        finally:
            conn.close()

    await asyncio.gather(*(sender(i) for i in range(len(people))))


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    tag = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
    wallet_db, identity_db = f"hiwallet_bench_read_{tag}", f"hiwallet_bench_read_idp_{tag}"
    await databases.migrate("wallet", database=wallet_db)
    await databases.migrate("identity", database=identity_db)
    idp_port, api_port, bare_port = wb.free_port(), wb.free_port(), wb.free_port()
    idp, api = f"http://127.0.0.1:{idp_port}", f"http://127.0.0.1:{api_port}"
    procs = [wb._start(wb._IDENTITY, str(idp_port), identity_db)]
    pool = await db.create_pool(
        wallet_db, role=db.app_role("wallet"), min_size=1, max_size=2, init=init_connection
    )
    observer = await asyncpg.connect(db.owner_dsn(wallet_db))
    report: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(timeout=30.0) as client:
            await wb._wait_ready(client, idp, procs[0])
            procs.append(wb._start(wb._WALLET_API, str(api_port), wallet_db, idp))
            await wb._wait_ready(client, api, procs[1])
            bare_dsn = db.service_dsn(wallet_db, db.app_role("wallet"))
            procs.append(wb._start(_BARE, str(bare_port), bare_dsn))
            await wb._wait_ready(client, f"http://127.0.0.1:{bare_port}", procs[2])
            if args.baseline:
                base_port = wb.free_port()
                procs.append(
                    wb._start(wb._WALLET_API, str(base_port), wallet_db, idp, src=Path(args.baseline))
                )
                await wb._wait_ready(client, f"http://127.0.0.1:{base_port}", procs[3])
            ledger = Ledger(LedgerStore.from_settings(pool), Fees.from_settings())
            print(f"{args.concurrency} customers, {args.lines} lines each ...", flush=True)
            people = await wb._customers(client, idp, api, ledger, args.concurrency)
            await statement_lines(api, people, args.lines)
        if args.background_lines:
            # Other wallets' lines (the growth loader's: p2p transfers among its own wallets),
            # so that the planner plans for a ledger that has grown, not for 1,000 lines (on
            # those it rightly scanned ledger.lines whole rather than probe its indexes).
            count = await observer.fetchval("SELECT count(*) FROM ledger.lines")
            print(f"{args.background_lines} background lines ...", flush=True)
            loaded = await growth_loader.load(
                wallet_db,
                lines=count + args.background_lines,
                wallets=max(args.background_lines // 20, 6),
                heavy_lines=1,
                quiet=True,
            )
            report["background"] = {k: loaded[k] for k in ("now", "lines_posted", "seconds")}
        # Statistics, as a database in use has them (autovacuum's analyze comes minutes after a
        # load): without them the planner took the freshly loaded lines for a handful and
        # answered the overview's 30 daily probes by scanning each wallet's lines in key order
        # 30 times (EXPLAIN: 1.2 ms) instead of probing lines_by_time.
        await observer.execute("ANALYZE")
        api_pids = [procs[1].pid, *wb._children(procs[1].pid)]
        bare_pids = [procs[2].pid]
        sides: dict[str, dict[str, Any]] = {}
        for read in READS:
            api_paths = [(api_path(read, w), {"Authorization": f"Bearer {t}"}) for t, w, _ in people]
            bare_paths = [(bare_path(read, w), {}) for _, w, _ in people]
            sides[read] = {
                "wallet-api": (api_port, api_paths, api_pids),
                "bare": (bare_port, bare_paths, bare_pids),
            }
            if args.baseline:
                base_pids = [procs[3].pid, *wb._children(procs[3].pid)]
                sides[read]["baseline"] = (base_port, api_paths, base_pids)
        names = list(sides[READS[0]])
        # Two sides: ABBA. Three: each round another of the six orders, so that each side is
        # first, between and last as often as the others.
        orders = (
            [tuple(names), tuple(reversed(names))] if len(names) == 2 else list(itertools.permutations(names))
        )
        # Warm-up: plans prepared, tokens verified, caches filled, on both sides.
        for read in READS:
            for side, (port, paths, pids) in sides[read].items():
                warm = await side_round(port, paths, 1.0, pids, observer, wallet_db, [])
                if not warm["reads"]:
                    raise RuntimeError(f"{side}'s {read} answered no 200 in the warm-up: {warm['statuses']}")
        results: dict[str, dict[str, Any]] = {
            read: {"ratios": [], "base_ratios": [], "vs_baseline": [], "lat": {k: [] for k in names}}
            | {k: [] for k in names}
            for read in READS
        }
        total_s = args.rounds * len(READS) * len(names) * args.round_s
        print(
            f"{args.rounds} rounds of {len(READS)} reads x {len(names)} sides x {args.round_s} s ...",
            flush=True,
        )
        with benchlog.phase("interleaved rounds", total_s):
            for n in range(args.rounds):
                for read in READS:
                    order = orders[n % len(orders)]
                    got: dict[str, dict[str, Any]] = {}
                    for side in order:
                        port, paths, pids = sides[read][side]
                        lat = results[read]["lat"][side]
                        got[side] = await side_round(
                            port, paths, args.round_s, pids, observer, wallet_db, lat
                        )
                        results[read][side].append(got[side])
                    ratio = got["wallet-api"]["reads_per_s"] / max(got["bare"]["reads_per_s"], 1e-9)
                    results[read]["ratios"].append(round(ratio, 3))
                    shown = ""
                    if "baseline" in got:
                        base = got["baseline"]["reads_per_s"]
                        results[read]["base_ratios"].append(
                            round(base / max(got["bare"]["reads_per_s"], 1e-9), 3)
                        )
                        vs = got["wallet-api"]["reads_per_s"] / max(base, 1e-9)
                        results[read]["vs_baseline"].append(round(vs, 3))
                        shown = f", baseline {base}/s (after/before {vs:.2f})"
                    print(
                        f"  round {n + 1} {read}: bare {got['bare']['reads_per_s']}/s,"
                        f" wallet-api {got['wallet-api']['reads_per_s']}/s ({ratio:.2f}){shown}",
                        flush=True,
                    )
        for read in READS:
            r = results[read]
            report[read] = {
                "ratio_median": round(statistics.median(r["ratios"]), 3),
                "ratio_spread": [min(r["ratios"]), max(r["ratios"])],
                "ratios": r["ratios"],
                **{side: merged(r[side], r["lat"][side]) for side in names},
            }
            report[read]["cpu_us_per_read"] = {
                f"{side} (process + its db backends)": report[read][side]["server_cpu_us_median"]
                + report[read][side]["db_cpu_us_median"]
                for side in names
            }
            if args.baseline:
                report[read]["baseline_ratio_median"] = round(statistics.median(r["base_ratios"]), 3)
                report[read]["vs_baseline_median"] = round(statistics.median(r["vs_baseline"]), 3)
                report[read]["vs_baseline_spread"] = [min(r["vs_baseline"]), max(r["vs_baseline"])]
                report[read]["vs_baseline"] = r["vs_baseline"]
        report["rss_mb_wallet_api"] = round(wb.rss_tree_mb(procs[1].pid)[0], 1)
        return report
    finally:
        await observer.close()
        await pool.close()
        for proc in reversed(procs):
            wb._stop(proc)
        if args.keep_db:  # for EXPLAIN and the like afterwards: the owner drops it
            print(f"kept the wallet database {wallet_db}", flush=True)
            report["kept_database"] = wallet_db
            await wb._drop(identity_db)
        else:
            await wb._drop(wallet_db, identity_db)


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument(
        "--round-s", type=float, default=3.0, help="seconds of each side in a round (default 3)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="customers, one connection each (default 8)"
    )
    parser.add_argument("--lines", type=int, default=120, help="statement lines per wallet (default 120)")
    parser.add_argument(
        "--background-lines",
        type=int,
        default=0,
        help="other wallets' lines loaded before the rounds (bench/growth_loader.py; default 0)",
    )
    parser.add_argument(
        "--baseline",
        help="the src folder of other code (e.g. `git archive main src`): its wallet-api as a third "
        "side in the same rounds, on the same database",
    )
    parser.add_argument(
        "--keep-db",
        action="store_true",
        help="keep the wallet database (its name printed) for EXPLAIN and the like; drop it yourself",
    )
    args = parser.parse_args()
    if (
        not 2 <= args.concurrency <= 64
        or not 1 <= args.rounds <= 50
        or not 0.5 <= args.round_s <= 60
        or not 0 <= args.background_lines <= 50_000_000
    ):
        parser.error("--concurrency 2..64, --rounds 1..50, --round-s 0.5..60, --background-lines 0..50M")
    benchlog.to_file()
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "load_before": os.getloadavg()},
        "settings": vars(args),
    }
    try:
        report |= uvloop.run(measure(args))
    except Exception as exc:  # the figures measured so far are kept, with what stopped the run
        report["failed"] = f"{type(exc).__name__}: {exc}"
    report["machine"]["load_after"] = os.getloadavg()
    summary = {
        read: {
            "ratio_median": report[read]["ratio_median"],
            "ratio_spread": report[read]["ratio_spread"],
            "cpu_us_per_read": report[read]["cpu_us_per_read"],
            "p99_ms (wallet-api, bare)": [
                report[read]["wallet-api"]["p99_ms"],
                report[read]["bare"]["p99_ms"],
            ],
            "target_met": report[read]["ratio_median"] >= TARGET_RATIO,
            **{
                k: report[read][k]
                for k in ("baseline_ratio_median", "vs_baseline_median", "vs_baseline_spread")
                if k in report[read]
            },
        }
        for read in READS
        if read in report
    }
    report["summary"] = {"target_ratio": TARGET_RATIO, **summary}
    benchlog.finish("read", report)


if __name__ == "__main__":
    cli()
