"""wallet.transfer_batch's CPU in the database, before a change and after it, in alternating
rounds; and what a call is made of (issue 26: wallet-api's database sessions spend about as much
CPU a transfer as wallet-api itself).

    git archive main | tar -x -C /tmp/before
    .venv/bin/python bench/transfer_batch_cpu.py --before /tmp/before [--transfers 4 16 --rounds 12]
    .venv/bin/python bench/transfer_batch_cpu.py --parts      # the call, the posting alone, a commit
    .venv/bin/python bench/transfer_batch_cpu.py --explain 300 [--analyze]  # its statements' times
    .venv/bin/python bench/transfer_batch_cpu.py --perf 15    # perf record of the backend

wallet-api's bench database (bench/wallet_api_bench.py's ``serving``: 32 funded, verified
senders and 1,000 receivers, opened as wallet-api opens them; wallet-api itself stays idle), and
the ``wallet.transfer_batch`` of the tree before (from its ``migrations/wallet/schema.sql``)
beside it as ``wallet.transfer_batch_before``: both must take the same arguments. Each round
builds, for each batch size, ``--calls`` batches of p2p transfers from distinct senders as
wallet-api builds them (``Transfers._transfer_item``'s fields: keys, membership, tiers, the
monthly limit, the view, the posting) and calls each side with its own (the same senders and
receivers, new keys and ids; the order alternating each round), every call committed, as
wallet-api's role on one session. The figure is the backend's CPU a transfer, from
/proc/PID/schedstat (ns; the server must run on this machine), not the time: on a shared,
loaded machine the time measures the neighbours. The answers are compared (but the lines'
versions and times). wallet-api's own CPU is not in it.

``--parts``: the call (this tree's) against ``ledger_api.post_batch`` alone with the same
postings (what the ledger's own p2p pays), the same twice a transaction, and a one-row insert
committed (a transaction's fixed cost). ``--explain N``: after N warming calls, the function's
statements' times over 50 calls (auto_explain, loaded in this superuser session only), or one
call's plans with ``--analyze``. ``--perf S``: ``perf record -g`` of the backend for S seconds
of calls; the data file's name is printed (``perf report -i FILE``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

from hiwallet.core import db
from hiwallet.core.ids import new_id
from hiwallet.core.settings import get_settings
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection
from hiwallet.wallet_api import domain
from hiwallet.wallet_api.adapters import Q
from hiwallet.wallet_api.idempotency import lock_key, request_hash
from wallet_api_bench import serving

SENDERS = 32


def before_function(tree: Path) -> str:
    """The tree's wallet.transfer_batch, renamed, from its schema dump."""
    schema = (tree / "migrations" / "wallet" / "schema.sql").read_text()
    start = schema.index("CREATE FUNCTION wallet.transfer_batch(")
    end = schema.index("END $$;", start) + len("END $$;")
    return schema[start:end].replace("wallet.transfer_batch(", "wallet.transfer_batch_before(", 1)


def backend_cpu_s(pid: int) -> float:
    """The backend's time on a CPU, in ns from the scheduler (/proc/PID/schedstat), not in
    /proc/PID/stat's ticks of 10 ms: a side's round is a few hundred ms."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


class Parties:
    """The senders and receivers as wallet-api's cache holds them."""

    def __init__(self, senders: list[asyncpg.Record], receivers: list[asyncpg.Record]) -> None:
        self.senders, self.receivers = senders, receivers


async def parties(conn: asyncpg.Connection, sender_wallets: list[str]) -> Parties:
    senders = await conn.fetch(
        """SELECT w.id, w.bucket, w.account_id, w.number, w.currency, a.tier, m.issuer, m.subject
             FROM wallet.wallets w JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
             JOIN wallet.members m ON m.bucket = w.bucket AND m.account_id = w.account_id
            WHERE w.id = ANY ($1::text[]) ORDER BY w.id""",
        sender_wallets,
    )
    receivers = await conn.fetch(
        """SELECT w.id, w.bucket, w.account_id, w.number, w.currency, a.tier
             FROM wallet.wallets w JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
            WHERE a.kind = 'personal' AND NOT (w.id = ANY ($1::text[])) ORDER BY w.id""",
        sender_wallets,
    )
    return Parties(list(senders), list(receivers))


def batch_args(the_ledger: Ledger, p: Parties, size: int, seed: int) -> tuple[Any, ...]:
    """wallet.transfer_batch's arguments for ``size`` p2p transfers, as Transfers builds them."""
    month = datetime.now(UTC).date().replace(day=1)
    kind = domain.LimitKind.TRANSFER
    rows: list[dict[str, Any]] = []
    for k in range(size):
        s = p.senders[(seed + k) % len(p.senders)]
        r = p.receivers[(seed * 7 + k * 13) % len(p.receivers)]
        scope = f"{s['issuer']}#{s['subject']}"
        key = str(uuid.uuid4())
        payload = {
            "from_wallet": s["id"],
            "to_wallet_number": r["number"],
            "amount": 100,
            "currency": s["currency"],
            "reference": None,
        }
        ref = f"p2p to {r['number']}"
        posting = the_ledger.transfer_posting(
            new_id(),
            s["id"],
            r["id"],
            100,
            s["currency"],
            type_=domain.TxType.P2P,
            actor=f"customer:{s['subject']}",
            ref=ref,
        )
        rows.append(
            {
                "bucket": s["bucket"],
                "scope": scope,
                "key": key,
                "lock": lock_key(s["bucket"], scope, key),
                "hash": request_hash("transfer", payload),
                "issuer": s["issuer"],
                "subject": s["subject"],
                "src": s["account_id"],
                "src_tier": s["tier"],
                "dst_bucket": r["bucket"],
                "dst": r["account_id"],
                "dst_tier": r["tier"],
                "month": month,
                "kind": kind.value,
                "limit_lock": lock_key(
                    s["bucket"], f"limit:{s['account_id']}", f"{month}:{kind}:{s['currency']}"
                ),
                "currency": s["currency"],
                "amount": 100,
                "limit": 10**15,
                "view": {"type": "p2p", "ref": ref, "metadata": posting.metadata, "currency": s["currency"]},
                "posting": posting,
            }
        )
    fields = ("bucket", "scope", "key", "lock", "hash", "issuer", "subject", "src", "src_tier", "dst_bucket")
    fields += ("dst", "dst_tier", "month", "kind", "limit_lock", "currency", "amount", "limit", "view")
    return (
        *([row[f] for row in rows] for f in fields),
        the_ledger.batch_arguments([row["posting"] for row in rows]),
    )


def comparable(answers: list[Any]) -> list[Any]:
    """The answers without what differs from call to call (the time, the lines' versions)."""
    out = []
    for a in answers:
        if "result" in a:
            out.append({"result": {"lines": len(a["result"]["lines"]), "replayed": a["result"]["replayed"]}})
        else:
            out.append(a)
    return out


async def measure(args: argparse.Namespace, before_sql: str | None) -> dict[str, Any]:
    async with serving(SENDERS) as served:
        owner = await asyncpg.connect(db.owner_dsn(served.database, get_settings()))
        if before_sql is not None:
            await owner.execute(before_sql)
            await owner.execute(
                "ALTER FUNCTION wallet.transfer_batch_before SECURITY DEFINER "
                "SET search_path = pg_catalog, wallet, pg_temp"
            )
            await owner.execute(
                f"GRANT EXECUTE ON FUNCTION wallet.transfer_batch_before TO {db.app_role('wallet')}"
            )
        # A table for --parts' one-row commits (WAL-logged, as the transfers' are).
        await owner.execute("CREATE TABLE IF NOT EXISTS public.bench_noop (x int)")
        await owner.execute(f"GRANT INSERT ON public.bench_noop TO {db.app_role('wallet')}")
        # No ANALYZE: wallet-api's bench database has none either (the server runs without
        # autovacuum here), and statistics taken now, with 32 transactions in the ledger, make
        # generic plans that scan ledger.transactions whole as it grows.
        if args.explain:
            await owner.execute("LOAD 'auto_explain'")
            conn = owner  # a superuser's session: LOAD needs it
        else:
            await owner.close()
            conn = await asyncpg.connect(
                db.service_dsn(served.database, db.app_role("wallet"), get_settings())
            )
        try:
            await init_connection(conn)
            the_ledger = Ledger(LedgerStore(None, coalesce_writers=0), Fees.from_settings())  # type: ignore[arg-type]
            p = await parties(conn, [w for _, w, _ in served.people])
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            query = Q["transfer_batch"]

            async def call(function: str, arguments: tuple[Any, ...]) -> list[Any]:
                # Committed, as wallet-api's: rolled back, the tables would stay as small as
                # their statistics say while their dead rows pile up (seq scans of bloat).
                return list(
                    await conn.fetchval(query.replace("wallet.transfer_batch(", f"{function}("), *arguments)
                )

            if args.explain:
                # The function's statements' plans, with their times and buffers (auto_explain,
                # loaded in this session only), after warming calls like the measured ones.
                for w in range(args.explain):
                    await call("wallet.transfer_batch", batch_args(the_ledger, p, args.transfers[-1], w))
                notices: list[str] = []
                conn.add_log_listener(lambda _c, m: notices.append(m.message))
                explainer = conn
                for setting in (
                    "auto_explain.log_min_duration = 0",
                    "auto_explain.log_nested_statements = on",
                    f"auto_explain.log_analyze = {'on' if args.analyze else 'off'}",
                    f"auto_explain.log_buffers = {'on' if args.analyze else 'off'}",
                    "auto_explain.log_level = notice",
                    "client_min_messages = notice",
                ):
                    await explainer.execute(f"SET {setting}")
                for c in range(1 if args.analyze else 50):
                    arguments = batch_args(the_ledger, p, args.transfers[-1], 1000 + c)
                    await explainer.fetchval(Q["transfer_batch"], *arguments)
                if args.analyze:
                    return {"plans": notices}
                # Each statement's time over the calls, by its first line.
                times: dict[str, list[float]] = {}
                for notice in notices:
                    head, _, rest = notice.partition("\n")
                    text = rest.removeprefix("Query Text: ").split("\n", 1)[0].strip()[:90]
                    times.setdefault(text, []).append(float(head.split()[1]))
                calls = 50
                return {
                    "plans": [
                        f"{sum(v) / calls * 1000:8.0f} us a call  {len(v) / calls:5.1f} x  {k}"
                        for k, v in sorted(times.items(), key=lambda kv: -sum(kv[1]))
                    ]
                }
            if args.perf:
                arguments = batch_args(the_ledger, p, args.transfers[-1], 0)
                for _ in range(20):
                    await call("wallet.transfer_batch", arguments)
                data = f"/tmp/transfer_batch_cpu-{os.getpid()}.perf"
                perf = await asyncio.create_subprocess_exec(
                    *("perf", "record", "-g", "-F", "999", "-o", data, "-p", str(pid)),
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
                await asyncio.sleep(0.5)
                deadline = time.monotonic() + args.perf
                calls = 0
                while time.monotonic() < deadline:
                    arguments = batch_args(the_ledger, p, args.transfers[-1], calls)
                    await call("wallet.transfer_batch", arguments)
                    calls += 1
                perf.send_signal(signal.SIGINT)
                await perf.wait()
                return {"perf_data": data, "calls": calls}

            sides: tuple[str, ...] = ("before", "after") if before_sql is not None else ("after",)
            if args.parts:
                # What the call is made of: the posting alone (ledger_api.post_batch with the
                # same postings, as the ledger's own p2p posts them), and a statement that
                # writes one row and commits (the fixed cost of a transaction).
                # And the posting twice a transaction: PL/pgSQL prepares each simple expression
                # of a function once a transaction, so a fixed cost a call that halves here
                # is that preparation (ledger.post_batch has a few hundred).
                sides = ("after", "post_only", "post_two_a_tx", "commit_only")
            cpu: dict[int, dict[str, list[float]]] = {n: {k: [] for k in sides} for n in args.transfers}
            # Warm both sides' plans first.
            for n in args.transfers:
                for side in sides:
                    fn = "wallet.transfer_batch_before" if side == "before" else "wallet.transfer_batch"
                    for w in range(10):
                        await call(fn, batch_args(the_ledger, p, n, w))
            for r in range(args.rounds):
                for n in args.transfers:
                    answers = {}
                    for side in sides if r % 2 == 0 else tuple(reversed(sides)):
                        fn = "wallet.transfer_batch_before" if side == "before" else "wallet.transfer_batch"
                        # The same senders and receivers each side, new keys and ids (committed).
                        batches = [
                            batch_args(the_ledger, p, n, r * args.calls + c) for c in range(args.calls)
                        ]
                        started = backend_cpu_s(pid)
                        for b in batches:
                            if side == "post_two_a_tx":
                                continue
                            if side == "post_only":
                                await conn.fetchval("SELECT ledger_api.post_batch($1)", b[-1])
                            elif side == "commit_only":
                                await conn.execute("INSERT INTO public.bench_noop VALUES (1)")
                            else:
                                answers[side] = await call(fn, b)
                        if side == "post_two_a_tx":
                            for k in range(0, len(batches) - 1, 2):
                                async with conn.transaction():
                                    await conn.fetchval("SELECT ledger_api.post_batch($1)", batches[k][-1])
                                    await conn.fetchval(
                                        "SELECT ledger_api.post_batch($1)", batches[k + 1][-1]
                                    )
                        cpu[n][side].append((backend_cpu_s(pid) - started) / (args.calls * n))
                    if before_sql is not None and comparable(answers["before"]) != comparable(
                        answers["after"]
                    ):
                        raise SystemExit(f"round {r}: the two functions answered differently: {answers}")
                    if any("result" not in a for a in answers["after"]):
                        raise SystemExit(f"round {r}: not every transfer posted: {answers['after']}")
        finally:
            await conn.close()
    report: dict[str, Any] = {
        "rounds": args.rounds,
        "calls": args.calls,
        "load_avg": [round(x, 1) for x in os.getloadavg()],
    }
    for n, sides_cpu in cpu.items():
        entry: dict[str, Any] = {k: round(statistics.median(v) * 1e6) for k, v in sides_cpu.items() if v}
        if before_sql is not None:
            ratios = sorted(
                a / b for a, b in zip(sides_cpu["after"], sides_cpu["before"], strict=True) if b > 0
            )
            entry["after_vs_before"] = round(statistics.median(ratios), 2)
            entry["spread"] = [round(ratios[0], 2), round(ratios[-1], 2)]
        report[f"cpu_us_a_transfer_at_{n}"] = entry
    return report


def args_analyze(plan: str) -> bool:
    return "\n" in plan


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", help="a tree of the code before (its schema.sql's function)")
    parser.add_argument("--transfers", type=int, nargs="+", default=[8, 24], help="transfers a call")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=40, help="calls a side a round and size")
    parser.add_argument("--explain", type=int, default=0, help="warming calls, then one call's plans")
    parser.add_argument("--analyze", action="store_true", help="with --explain: one call, EXPLAIN ANALYZE")
    parser.add_argument(
        "--parts", action="store_true", help="the call against the posting alone and a commit"
    )
    parser.add_argument("--perf", type=float, default=0.0, help="seconds under perf record instead")
    args = parser.parse_args()
    before_sql = before_function(Path(args.before)) if args.before else None
    report = uvloop.run(measure(args, before_sql))
    if "plans" in report:
        for plan in report["plans"]:
            print(plan, end="\n\n" if args_analyze(plan) else "\n")
    else:
        print(report, flush=True)


if __name__ == "__main__":
    cli()
