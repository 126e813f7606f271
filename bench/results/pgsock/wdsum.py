import json, re, statistics, sys
log = open(sys.argv[1]).read()
sides = re.findall(r"== (\w+) .*?results: \S+/(withdrawal-\S+\.json)", log, re.S)
rows = []
for side, f in sides:
    r = json.load(open(f"/work/wt-pgsock/bench/results/{f}"))
    t = r["throughput"]; c = t["completed_per_s"]
    cpu = {k: round(v / c * 1000, 2) for k, v in t["cpu_share_of_a_core"].items()}
    tot = round(sum(v for k, v in cpu.items() if k != "load client (this)"), 2)
    rows.append((side, f, c, r["latency"].get("latency_p99_ms") or r["summary"].get("latency_p99_ms"), tot, cpu))
    print(side, f, c, "p99", rows[-1][3], "cpu ms/saga", tot, cpu)
