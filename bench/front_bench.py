"""The front doors' benchmark: transfers through personal-mobile-api against wallet-api alone, in
the same run, with real tokens, real Redis (the shared rate limit is asked on every request)
and real processes.

    .venv/bin/python bench/front_bench.py [--duration 10] [--concurrency 8 32] [--rounds 2]

For each concurrency it starts the identity service, wallet-api, personal-mobile-api and
business-api as their own processes (fresh databases), opens funded customers as
bench/wallet_api_bench.py does, then alternates ``rounds`` times: p2p transfers straight to
wallet-api, then the same through personal-mobile-api (same customers, same receivers), each
for ``duration`` seconds. It reports both sides' transfers/s, p50 and p99, the ratio, what the
front door adds (p50 and p99 differences, and the front's own time per request from its
/metrics beside wallet-api's), the front's CPU per transfer and the peak RSS of each front
process (business-api after a few hundred requests of its own). Results: bench/results/front-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvloop

import benchlog
import wallet_api_bench as wb
from cpu import pids_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

# As `hiwallet run personal-mobile-api` / `business-api` run them, pointed at this run's
# identity and wallet-api; the per-customer limit far above what the bench sends (Redis is
# still asked, once a lease: with a quota this large, every 32 requests of a customer).
_FRONT = """
import os, sys
kind, port, idp, api = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
baseline = sys.argv[5:6] == ["baseline"]
source = sys.argv[6] if len(sys.argv) > 6 else ""
if source:  # the baseline is another tree's code (e.g. `git archive main src`), not a patch
    sys.path.insert(0, source)
prefix = {"personal": "HIWALLET_PERSONAL_MOBILE_API_", "business": "HIWALLET_BUSINESS_API_"}[kind]
if baseline and not source:  # as before 2026-12-04: Redis asked on every request (leases of 1)
    import hiwallet.core.edge.limits as limits
    limits.LEASE_MAX = 1
os.environ.update({prefix + "PORT": port, prefix + "ISSUER_BASE": idp, prefix + "WALLET_API_URL": api,
                   prefix + "RATE_LIMIT_SUBJECT": str(10**9)})
if kind == "personal" and os.environ.get("FRONT_BENCH_LEAN"):  # --lean: the bench's lean server
    sys.path.insert(0, os.environ["FRONT_BENCH_LEAN"])
    from lean_server import serve
    from hiwallet.core.http import settle_heap_once_started
    from hiwallet.core.logging import configure_logging
    from hiwallet.personal_mobile_api.app import create_personal_mobile_api_app
    configure_logging("personal-mobile-api")
    serve(settle_heap_once_started(create_personal_mobile_api_app()), "127.0.0.1", int(port), lifespan=True)
    raise SystemExit
if kind == "personal":
    from hiwallet.personal_mobile_api.app import run_personal_mobile_api as run
else:
    from hiwallet.business_api.app import run_business_api as run
run(int(port), "127.0.0.1")
"""


# Where bench/lean_server.py is (the --lean front imports it from there).
_BENCH_DIR = str(Path(__file__).resolve().parent)


async def _run(
    url: str, people: Any, receivers: list[str], concurrency: int, duration_s: float, pid: int, api_pid: int
) -> dict[str, Any]:
    """wallet_api_bench's run against ``url`` (the front's CPU from ``pid``), with wallet-api's
    own CPU a transfer over the same seconds (what a hop's transport costs it shows there too)."""
    before, switches = pids_cpu_s([api_pid]), _switches(pid)
    run = await wb._run(url, people, receivers, concurrency, duration_s, pid)
    per = max(run["transfers"], 1)
    run["wallet_api_cpu_us"] = round((pids_cpu_s([api_pid]) - before) / per * 1e6)
    # The server's wake-ups a transfer (voluntary context switches: it slept, waiting for input).
    run["server_wakeups"] = round((_switches(pid) - switches) / per, 2)
    return run


def _switches(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


async def _mean_time(client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    return await wb._server_time(client, url)


async def _business_rss(client: httpx.AsyncClient, idp: str, url: str, pid: int) -> float:
    """business-api's RSS after 300 requests of a merchant's token (its accounts)."""
    token_url = f"{idp}/realms/hiwallet/protocol/openid-connect/token"
    answer = await client.post(
        token_url,
        auth=("merchant-demo", "dev-merchant-demo-secret"),
        data={"grant_type": "client_credentials"},
    )
    answer.raise_for_status()
    headers = {"Authorization": f"Bearer {answer.json()['access_token']}"}
    for _ in range(300):
        await client.get(f"{url}/v1/accounts", headers=headers)
    return wb.rss_mb(pid)


async def measure(
    concurrency: int,
    duration_s: float,
    rounds: int,
    baseline: bool,
    source: str = "",
    uds: bool = False,
    lean_server: bool = False,
    baseline_uds: bool = False,
) -> dict[str, Any]:
    tag = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
    wallet_db, identity_db = f"hiwallet_bench_front_{tag}", f"hiwallet_bench_front_idp_{tag}"
    await databases.migrate("wallet", database=wallet_db)
    await databases.migrate("identity", database=identity_db)
    idp_port, api_port, front_port, business_port, base_port = (wb.free_port() for _ in range(5))
    base_front = f"http://127.0.0.1:{base_port}"
    idp, api = f"http://127.0.0.1:{idp_port}", f"http://127.0.0.1:{api_port}"
    front, business = f"http://127.0.0.1:{front_port}", f"http://127.0.0.1:{business_port}"
    # --uds: wallet-api also on a Unix socket, today's personal-mobile-api forwarding through it
    # (the baseline front and the direct client stay on TCP).
    sock_dir = tempfile.mkdtemp(prefix="front-bench-") if uds else ""
    api_env = {"HIWALLET_WALLET_API_UDS": f"{sock_dir}/wallet-api.sock"} if uds else None
    front_api = f"unix:{sock_dir}/wallet-api.sock" if uds else api
    procs = [wb._start(wb._IDENTITY, str(idp_port), identity_db)]
    pool = await db.create_pool(
        wallet_db, role=db.app_role("wallet"), min_size=1, max_size=2, init=init_connection
    )
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    try:
        async with httpx.AsyncClient(timeout=30.0, limits=limits) as client:
            await wb._wait_ready(client, idp, procs[0])
            procs.append(wb._start(wb._WALLET_API, str(api_port), wallet_db, idp, env=api_env))
            await wb._wait_ready(client, api, procs[1])
            lean = {"FRONT_BENCH_LEAN": _BENCH_DIR} if lean_server else None
            procs.append(wb._start(_FRONT, "personal", str(front_port), idp, front_api, env=lean))
            procs.append(wb._start(_FRONT, "business", str(business_port), idp, api))
            await wb._wait_ready(client, front, procs[2])
            await wb._wait_ready(client, business, procs[3])
            if baseline:
                base_args = ("baseline", source) if source else ("baseline",)
                # --baseline-uds: the baseline forwards over the same socket as today's (a
                # comparison of the doors' code alone); otherwise over TCP.
                base_api = front_api if baseline_uds else api
                procs.append(wb._start(_FRONT, "personal", str(base_port), idp, base_api, *base_args))
                await wb._wait_ready(client, base_front, procs[4])
            ledger = Ledger(LedgerStore.from_settings(pool), Fees.from_settings())
            people = await wb._customers(client, idp, api, ledger, concurrency)
            receivers = [w for _, _, w in people] + await wb._receivers(
                client, idp, api, wb.WALLETS - len(people)
            )
            for token, wallet, _ in people:  # warm: each token verified once by both
                headers = {"Authorization": f"Bearer {token}"}
                (await client.get(f"{api}/v1/wallets/{wallet}", headers=headers)).raise_for_status()
                (await client.get(f"{front}/v1/wallets/{wallet}", headers=headers)).raise_for_status()
                if baseline:
                    (
                        await client.get(f"{base_front}/v1/wallets/{wallet}", headers=headers)
                    ).raise_for_status()
            direct: list[dict[str, Any]] = []
            through: list[dict[str, Any]] = []
            based: list[dict[str, Any]] = []

            async def through_baseline(r: int) -> None:
                with benchlog.phase(
                    f"through the baseline front, concurrency {concurrency}, round {r + 1}", duration_s
                ):
                    based.append(
                        await _run(
                            base_front, people, receivers, concurrency, duration_s, procs[4].pid, procs[1].pid
                        )
                    )

            for r in range(rounds):
                with benchlog.phase(
                    f"wallet-api alone, concurrency {concurrency}, round {r + 1}", duration_s
                ):
                    direct.append(
                        await _run(
                            api, people, receivers, concurrency, duration_s, procs[1].pid, procs[1].pid
                        )
                    )
                if baseline and r % 2 == 1:
                    # Every other round the baseline goes before today's door (a side that always
                    # ran last would meet the database and the machine a few seconds older).
                    await through_baseline(r)
                api_before = await _mean_time(client, api)
                front_before = await _mean_time(client, front)
                with benchlog.phase(
                    f"through personal-mobile-api, concurrency {concurrency}, round {r + 1}", duration_s
                ):
                    run = await _run(
                        front, people, receivers, concurrency, duration_s, procs[2].pid, procs[1].pid
                    )
                api_after = await _mean_time(client, api)
                front_after = await _mean_time(client, front)
                if api_after[1] > api_before[1] and front_after[1] > front_before[1]:
                    api_ms = 1000 * (api_after[0] - api_before[0]) / (api_after[1] - api_before[1])
                    front_ms = 1000 * (front_after[0] - front_before[0]) / (front_after[1] - front_before[1])
                    run["wallet_api_server_mean_ms"] = round(api_ms, 2)
                    run["front_server_mean_ms"] = round(front_ms, 2)
                    run["front_own_mean_ms"] = round(front_ms - api_ms, 2)
                through.append(run)
                if baseline and r % 2 == 0:
                    await through_baseline(r)
            business_rss = await _business_rss(client, idp, business, procs[3].pid)
        verified = await ledger.store.verify()
        summary = _summary(concurrency, direct, through, business_rss, verified.ok)
        if baseline:
            summary["baseline_front"] = _baseline(direct, through, based)
        return summary
    finally:
        await pool.close()
        for proc in reversed(procs):
            wb._stop(proc)
        await wb._drop(wallet_db, identity_db)
        if sock_dir:
            shutil.rmtree(sock_dir, ignore_errors=True)


def _total(runs: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in runs) / len(runs)


def _baseline(
    direct: list[dict[str, Any]], through: list[dict[str, Any]], based: list[dict[str, Any]]
) -> dict[str, Any]:
    """The baseline front beside today's, from the same rounds: each one's ratio to wallet-api
    alone (the median of the rounds') and its CPU per transfer."""

    def ratios(runs: list[dict[str, Any]]) -> list[float]:
        return [
            t["transfers_per_s"] / d["transfers_per_s"]
            for d, t in zip(direct, runs, strict=True)
            if d["transfers_per_s"]
        ]

    return {
        "ratio_median": round(statistics.median(ratios(based)), 3),
        "today_ratio_median": round(statistics.median(ratios(through)), 3),
        "cpu_us_per_transfer_median": round(statistics.median(r["server_cpu_us"] for r in based)),
        "today_cpu_us_per_transfer_median": round(statistics.median(r["server_cpu_us"] for r in through)),
        "wallet_api_cpu_us_median": round(statistics.median(r["wallet_api_cpu_us"] for r in based)),
        "today_wallet_api_cpu_us_median": round(statistics.median(r["wallet_api_cpu_us"] for r in through)),
        "p50_ms": round(_total(based, "p50_ms"), 2),
        "p99_ms": round(_total(based, "p99_ms"), 2),
        # Paired by round: today's CPU a transfer minus the baseline's, and each side's ratio.
        "cpu_us_diff_by_round": [
            t["server_cpu_us"] - b["server_cpu_us"] for t, b in zip(through, based, strict=True)
        ],
        "ratio_by_round": {
            "baseline": [round(x, 3) for x in ratios(based)],
            "today": [round(x, 3) for x in ratios(through)],
        },
        "rounds": based,
    }


def _summary(
    concurrency: int,
    direct: list[dict[str, Any]],
    through: list[dict[str, Any]],
    business_rss: float,
    ok: bool,
) -> dict[str, Any]:
    d_tps, t_tps = _total(direct, "transfers_per_s"), _total(through, "transfers_per_s")
    return {
        "concurrency": concurrency,
        "wallet_api_alone": {
            "transfers_per_s": round(d_tps, 1),
            "p50_ms": round(_total(direct, "p50_ms"), 2),
            "p99_ms": round(_total(direct, "p99_ms"), 2),
            "wallet_api_cpu_us_per_transfer": round(_total(direct, "wallet_api_cpu_us")),
        },
        "through_personal_mobile_api": {
            "transfers_per_s": round(t_tps, 1),
            "p50_ms": round(_total(through, "p50_ms"), 2),
            "p99_ms": round(_total(through, "p99_ms"), 2),
            "front_cpu_us_per_transfer": round(_total(through, "server_cpu_us")),
            "wallet_api_cpu_us_per_transfer": round(_total(through, "wallet_api_cpu_us")),
            "front_own_mean_ms": round(_total(through, "front_own_mean_ms"), 2)
            if all("front_own_mean_ms" in r for r in through)
            else None,
        },
        "ratio": round(t_tps / d_tps, 3) if d_tps else None,
        "edge_adds_p50_ms": round(_total(through, "p50_ms") - _total(direct, "p50_ms"), 2),
        "edge_adds_p99_ms": round(_total(through, "p99_ms") - _total(direct, "p99_ms"), 2),
        "rss_mb": {
            "personal-mobile-api": round(max(r["rss_mb"] for r in through), 1),
            "business-api": round(business_rss, 1),
        },
        "errors": {"direct": sum(r["errors"] for r in direct), "through": sum(r["errors"] for r in through)},
        "rounds": {"direct": direct, "through": through},
        "ledger_verified": ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also a front as before 2026-12-04 (Redis asked on every request), in the same rounds",
    )
    parser.add_argument(
        "--baseline-src",
        default="",
        help="the baseline front runs this source tree's code instead (a directory holding the "
        "hiwallet package, e.g. from `git archive main src`); implies --baseline",
    )
    # The Unix socket is the default because it is what `hiwallet up` deploys (the door and
    # wallet-api on one host); --tcp measures the door forwarding over loopback TCP, as it does
    # when wallet-api is on another host.
    uds = parser.add_mutually_exclusive_group()
    uds.add_argument(
        "--uds",
        dest="uds",
        action="store_true",
        default=True,
        help="(the default, as `hiwallet up` runs them) wallet-api also on a Unix socket, "
        "today's personal-mobile-api forwarding through it",
    )
    uds.add_argument(
        "--tcp",
        dest="uds",
        action="store_false",
        help="today's personal-mobile-api forwarding to wallet-api over TCP",
    )
    parser.add_argument(
        "--baseline-uds",
        action="store_true",
        help="the baseline front forwards over the same Unix socket as today's (with --uds; "
        "otherwise it forwards over TCP, as main's did before 2026-12-06)",
    )
    parser.add_argument(
        "--lean",
        action="store_true",
        help="today's personal-mobile-api served by bench/lean_server.py, not uvicorn (an experiment)",
    )
    args = parser.parse_args()
    source = os.path.abspath(args.baseline_src) if args.baseline_src else ""
    benchlog.to_file()
    started = datetime.now(UTC)
    baseline = args.baseline or bool(source)
    same_hop = args.baseline_uds and args.uds
    results = [
        uvloop.run(measure(c, args.duration, args.rounds, baseline, source, args.uds, args.lean, same_hop))
        for c in args.concurrency
    ]
    result = {
        "bench": "front",
        "started": started.isoformat(),
        "duration_s": args.duration,
        "rounds": args.rounds,
        "baseline_src": source or None,
        "uds": args.uds,
        "lean": args.lean,
        "baseline_uds": same_hop,
        "machine": {"cpus": os.cpu_count()},
        "results": results,
    }
    path = benchlog.save("front", result, at=started)
    for r in results:
        shown = {k: v for k, v in r.items() if k != "rounds"}
        if "baseline_front" in shown:
            shown["baseline_front"] = {k: v for k, v in shown["baseline_front"].items() if k != "rounds"}
        print(json.dumps(shown), flush=True)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
