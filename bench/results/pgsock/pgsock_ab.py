"""TCP vs Unix socket, interleaved in one run: the ledger's in-process p2p at 8 clients (one
pool per side, same database) and pgbench tpcb-like prepared at 8 clients (same database, DSN
per side). Usage: cd bench && ../.venv/bin/python /tmp/pgsock/pgsock_ab.py ROUNDS ROUND_S"""
import asyncio, json, os, statistics, sys, time
from datetime import UTC, datetime
sys.path.insert(0, os.getcwd())
import asyncpg, uvloop
import ledger_bench as lb
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import Settings
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.store import LedgerStore, init_connection

TCP = "postgresql://localhost:5432"
SOCK = "postgresql:///?host=/var/run/postgresql&port=5432"

async def main(rounds: int, round_s: float) -> None:
    st = {"tcp": Settings(database_url=TCP), "sock": Settings(database_url=SOCK)}
    database = f"hiwallet_bench_pgsock_{os.getpid()}"
    await databases.migrate("wallet", database=database, settings=st["tcp"])
    pools = {k: await db.create_pool(database, role=db.app_role("wallet"), settings=s, min_size=8, max_size=10, init=init_connection) for k, s in st.items()}
    owner = await asyncpg.connect(db.owner_dsn(database, st["tcp"]))
    benches = {k: lb.Bench(p, Ledger(LedgerStore.from_settings(p), Fees.from_settings()), f"{k}{time.strftime('%H%M%S')}") for k, p in pools.items()}
    wallets = await benches["tcp"].open_wallets(lb.WALLETS)
    await owner.execute("ANALYZE")
    pg = lb.PgbenchDb(1)
    pgdsn = {}
    runs = {"p2p": {"tcp": [], "sock": []}, "pgbench": {"tcp": [], "sock": []}}
    try:
        with pg:
            for k, s in st.items():
                pgdsn[k] = db.owner_dsn(pg.name, s)
            for k in st:  # warm
                await benches[k].spread(wallets, 8, 2, "warm")
            for n in range(rounds):
                order = ["tcp", "sock"] if n % 2 == 0 else ["sock", "tcp"]
                line = []
                for side in order:
                    await owner.execute("CHECKPOINT", timeout=600)
                    r = await benches[side].spread(wallets, 8, round_s, f"r{n}{side}")
                    runs["p2p"][side].append(r)
                    line.append(f"p2p {side} {r['transfers_per_s']:.0f} ({r['client_cpu_us']} us client, {r['machine_cpu_us']} us machine)")
                for side in order:
                    pg.dsn = pgdsn[side]
                    tps = await pg.run(round_s, 8)
                    runs["pgbench"][side].append({"tps": tps})
                    line.append(f"pgbench {side} {tps:.0f}")
                print(f"round {n+1}: " + "; ".join(line), flush=True)
    finally:
        for p in pools.values():
            await p.close()
        await owner.close()
        admin = await asyncpg.connect(db.owner_dsn("postgres", st["tcp"]))
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()
    def ratio(a, b, key):
        rs = sorted(x[key] / y[key] for x, y in zip(a, b))
        return {"median": round(statistics.median(rs), 3), "spread": [round(rs[0], 3), round(rs[-1], 3)], "agree": sum(r > 1 for r in rs)}
    med = lambda rs, k: round(statistics.median(r[k] for r in rs), 1)
    summary = {
        "p2p_sock_vs_tcp": ratio(runs["p2p"]["sock"], runs["p2p"]["tcp"], "transfers_per_s"),
        "pgbench_sock_vs_tcp": ratio(runs["pgbench"]["sock"], runs["pgbench"]["tcp"], "tps"),
        "p2p_vs_pgbench_tcp": ratio(runs["p2p"]["tcp"], runs["pgbench"]["tcp"], None) if False else None,
    }
    for side in ("tcp", "sock"):
        summary[side] = {k: med(runs["p2p"][side], k) for k in ("transfers_per_s", "p50_ms", "p99_ms", "client_cpu_us", "machine_cpu_us")}
        summary[side]["pgbench_tps"] = med(runs["pgbench"][side], "tps")
        rs = sorted(a["transfers_per_s"] / b["tps"] for a, b in zip(runs["p2p"][side], runs["pgbench"][side]))
        summary[side]["p2p_vs_pgbench"] = {"median": round(statistics.median(rs), 3), "spread": [round(rs[0], 3), round(rs[-1], 3)]}
    del summary["p2p_vs_pgbench_tcp"]
    print(json.dumps(summary, indent=1))
    out = f"results/pgsock-ab-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    with open(out, "w") as f:
        json.dump({"rounds": rounds, "round_s": round_s, "summary": summary, "runs": runs}, f, indent=1)
    print(out)

uvloop.run(main(int(sys.argv[1]), float(sys.argv[2])))
