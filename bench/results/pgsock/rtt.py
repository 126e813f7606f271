"""One connection per side, SELECT 1 in a loop, sides alternating every 2 s, 8 rounds: wall and
this process's CPU a round trip (the transport's cost alone)."""
import asyncio, resource, statistics, time, asyncpg, uvloop
DSN = {"tcp": "postgresql://localhost:5432/postgres", "sock": "postgresql:///postgres?host=/var/run/postgresql&port=5432"}
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
async def main():
    conns = {k: await asyncpg.connect(v) for k, v in DSN.items()}
    res = {k: [] for k in DSN}
    for n in range(16):
        for side in (["tcp", "sock"] if n % 2 == 0 else ["sock", "tcp"]):
            c = conns[side]; st = await c.prepare("SELECT 1")
            k = 0; c0 = cpu(); t0 = time.perf_counter(); end = t0 + 2
            while time.perf_counter() < end:
                await st.fetchval(); k += 1
            wall = time.perf_counter() - t0; used = cpu() - c0
            res[side].append((wall / k * 1e6, used / k * 1e6))
    for side, rs in res.items():
        print(side, "wall us/rt median", round(statistics.median(r[0] for r in rs), 1), "spread", round(min(r[0] for r in rs), 1), round(max(r[0] for r in rs), 1), "client cpu us/rt median", round(statistics.median(r[1] for r in rs), 1))
    rat = sorted(s[0] / t[0] for s, t in zip(res["sock"], res["tcp"]))
    print("sock/tcp wall ratio median", round(statistics.median(rat), 3), "spread", round(rat[0], 3), round(rat[-1], 3), "rounds sock faster", sum(r < 1 for r in rat), "/", len(rat))
    rat = sorted(s[1] / t[1] for s, t in zip(res["sock"], res["tcp"]))
    print("sock/tcp client cpu ratio median", round(statistics.median(rat), 3), "spread", round(rat[0], 3), round(rat[-1], 3))
uvloop.run(main())
