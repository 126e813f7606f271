"""The HTTP server's own cost: CPU per request of a plain endpoint under each server that fits.

    .venv/bin/python bench/server_cost.py [--servers uvicorn uvicorn-lean lean …] [--rounds 6]
        [--round-s 3] [--concurrency 8]

The endpoint is the least an answer can be (a POST whose body is read, a small JSON answer with
its Content-Length, as wallet-api's transfer answers), so what differs between the servers is
theirs: parsing, the ASGI calls, the socket writes. Each server runs as its own process on one
core's worth of work (one worker) and is loaded in turn by bench/httpload.py's lean client,
``--rounds`` short rounds alternating the servers (this machine's speed drifts within minutes:
only figures from the same rounds compare). Reported per server: the median over the rounds of
its process's CPU µs per request (``/proc`` times, bench/cpu.py), requests/s, and each round's.

- ``uvicorn``: uvicorn with httptools and uvloop, as the services run it (core.http.serve;
  before 2026-12-06 this was ``uvicorn.run``'s defaults, now ``uvicorn-proxy``: its
  proxy-header middleware on, which serve leaves off);
- ``uvicorn-lean``: uvicorn's server with core.http.protocol's LeanHttpProtocol, as the front
  doors run it (``serve(http="lean")``);
- ``one-write``: the same with bench/one_write.py's protocol (the head and body in one write: a
  candidate, not adopted);
- ``lean``: bench/lean_server.py, the least an ASGI server over httptools can be (a bound on
  what a lean server under the front door could save; a candidate, not adopted);
- ``granian``: granian's ASGI interface (Rust HTTP/1.1, one worker, uvloop), if installed (it
  is not a dependency: ``pip install granian`` into the venv to measure it).

Results: bench/results/server-cost-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

import benchlog
import httpload
from cpu import pids_cpu_s
from wallet_api_bench import free_port

_APP = """
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    body = b'{"id":"0192f1a2-7c3e-7b1d-9a55-3f0e6c1d2b4a","status":"posted","amount":100}'
    await send({"type": "http.response.start", "status": 201, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"x-request-id", b"0192f1a2-7c3e-7b1d-9a55-3f0e6c1d2b4a")]})
    await send({"type": "http.response.body", "body": body})
"""

_SERVE = {
    # As every service runs it: core.http.serve (uvicorn, httptools, uvloop, no proxy headers).
    "uvicorn": _APP
    + """
import sys
from hiwallet.core.http import serve
serve(app, host="127.0.0.1", port=int(sys.argv[1]))
""",
    # uvicorn's server with core.http.protocol's LeanHttpProtocol, as the front doors run it
    # (core.http.serve(http="lean")).
    "uvicorn-lean": _APP
    + """
import sys
from hiwallet.core.http import serve
serve(app, host="127.0.0.1", port=int(sys.argv[1]), http="lean")
""",
    # What this bench called uvicorn before 2026-12-06: uvicorn.run's defaults, which wrap the
    # app in uvicorn's proxy-header middleware (core.http.serve does not).
    "uvicorn-proxy": _APP
    + """
import sys, uvicorn
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http="httptools", loop="uvloop",
            log_config=None, access_log=False, lifespan="on")
""",
    "one-write": _APP
    + """
import sys, uvicorn
sys.path.insert(0, sys.argv[2])
from one_write import OneWriteHttpToolsProtocol
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http=OneWriteHttpToolsProtocol,
            loop="uvloop", log_config=None, access_log=False, lifespan="on")
""",
    "lean": _APP
    + """
import sys
sys.path.insert(0, sys.argv[2])
from lean_server import serve
serve(app, "127.0.0.1", int(sys.argv[1]))
""",
    "granian": _APP
    + """
import sys
from granian.server import Server
from granian.constants import Interfaces, Loops
Server("__main__:app", address="127.0.0.1", port=int(sys.argv[1]), interface=Interfaces.ASGI,
       workers=1, loop=Loops.uvloop, log_enabled=False).serve()
""",
}


def _tree(pid: int) -> list[int]:
    """The process and its descendants (granian serves from a child process)."""
    found = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.extend(_tree(int(entry.name)))
    return found


def _start(name: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", _SERVE[name], str(port), str(Path(__file__).parent)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


async def _ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = httpload.Connection("127.0.0.1", port)
            await conn.request("POST", "/", {"Content-Type": "application/json"}, b"{}")
            conn.close()
            return
        except (OSError, httpload.HttpLoadError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _round(port: int, pids: list[int], concurrency: int, round_s: float) -> tuple[float, float]:
    """(requests/s, server CPU µs per request) of one round."""
    body = json.dumps({"from_wallet": "w1", "to_wallet_number": "1234567890", "amount": 100}).encode()
    headers = {"Authorization": "Bearer " + "x" * 800, "Content-Type": "application/json"}
    done = 0
    deadline = time.monotonic() + round_s

    async def worker() -> None:
        nonlocal done
        conn = httpload.Connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                status, _ = await conn.request("POST", "/v1/transfers", headers, body)
                if status == 201:
                    done += 1
        finally:
            conn.close()

    cpu_before, started = pids_cpu_s(pids), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed, cpu_s = time.monotonic() - started, pids_cpu_s(pids) - cpu_before
    return done / elapsed, cpu_s / max(done, 1) * 1e6


async def measure(servers: list[str], rounds: int, round_s: float, concurrency: int) -> dict[str, Any]:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    try:
        for name in servers:
            ports[name] = free_port()
            procs[name] = _start(name, ports[name])
            await _ready(ports[name])
        pids = {name: _tree(proc.pid) for name, proc in procs.items()}
        for name in servers:  # warm
            await _round(ports[name], pids[name], concurrency, 1.0)
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
        for r in range(rounds):
            order = servers if r % 2 == 0 else list(reversed(servers))
            for name in order:
                runs[name].append(await _round(ports[name], pids[name], concurrency, round_s))
        return {
            name: {
                "cpu_us_per_request": round(statistics.median(cpu for _, cpu in runs[name]), 1),
                "requests_per_s": round(statistics.median(rps for rps, _ in runs[name]), 1),
                "rounds": [
                    {"requests_per_s": round(rps, 1), "cpu_us": round(cpu, 1)} for rps, cpu in runs[name]
                ],
            }
            for name in servers
        }
    finally:
        for proc in procs.values():
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--servers", nargs="+", default=["uvicorn", "one-write", "granian"], choices=list(_SERVE)
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    started = datetime.now(UTC)
    servers = [s for s in args.servers if s != "granian" or _has_granian()]
    figures = uvloop.run(measure(servers, args.rounds, args.round_s, args.concurrency))
    result = {
        "bench": "server-cost",
        "started": started.isoformat(),
        "concurrency": args.concurrency,
        "round_s": args.round_s,
        "load_average": os.getloadavg(),
        "servers": figures,
    }
    path = benchlog.save("server-cost", result, at=started)
    for name, f in figures.items():
        print(
            f"{name:10} {f['cpu_us_per_request']:7.1f} µs/request  {f['requests_per_s']:8.1f}/s", flush=True
        )
    print(f"results: {path}")


def _has_granian() -> bool:
    try:
        import granian  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
