"""The cyclic collector's share of the front door's path: bench/door_cost.py's in-process loop
with the heap settled as a process entry point settles it (core.http.runtime.settle_heap:
``gc.freeze`` and the young threshold), the collections and their time a request counted by
``gc.callbacks``.

    .venv/bin/python bench/door_gc.py [--threshold 20000] [--requests 8000] [--rounds 3] 2>/dev/null

Prints the best round's CPU a request, the collections by generation and their µs a request.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import uvloop

import door_cost
from hiwallet.core.http.runtime import settle_heap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=int, default=20_000, help="the young generation's threshold")
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts, seconds, began = [0, 0, 0], [0.0, 0.0, 0.0], [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            counts[info["generation"]] += 1
            seconds[info["generation"]] += time.perf_counter() - began[0]

    cpu_s = door_cost.process_cpu_s
    calls = [0]

    def settled_then_cpu_s() -> float:
        # door_cost's first CPU reading comes after the app's start and its warm-up: the
        # heap is settled there, as settle_heap_once_started does before the first request.
        calls[0] += 1
        if calls[0] == 1:
            settle_heap()
            _, older, oldest = gc.get_threshold()
            gc.set_threshold(args.threshold, older, oldest)
            gc.callbacks.append(timed)
        return cpu_s()

    door_cost.process_cpu_s = settled_then_cpu_s
    port = door_cost._free_port()
    directory = tempfile.mkdtemp(prefix="door-gc-")
    unix = f"{directory}/upstream.sock"
    upstream = subprocess.Popen([sys.executable, "-c", door_cost._UPSTREAM, str(port), unix])
    try:
        rounds = uvloop.run(door_cost.measure(port, args.requests, args.rounds, unix=unix))
    finally:
        upstream.terminate()
        upstream.wait(timeout=5)
        shutil.rmtree(directory, ignore_errors=True)
    n = args.requests * args.rounds
    print(
        f"threshold {args.threshold}: µs of CPU a request, best {min(rounds):.1f}; collections by "
        f"generation {counts}; µs a request in them {[round(s / n * 1e6, 3) for s in seconds]}",
        flush=True,
    )
    os._exit(0)  # the app's pools are not closed: nothing to wait for


if __name__ == "__main__":
    main()
