"""Every deployable's memory under `hiwallet up` (issue 26: every process < 120 MB).

Runs the whole system as tests/e2e/up_system.py does (fresh databases and virtual host, free
ports) but with identity at the production argon2 cost, then reads each child's resident set
(its process and any it started, /proc) after start; then a short load: four password grants at
once on identity (each a 19 MiB hash) and 2,000 ``GET /v1/accounts`` through personal-mobile-api
and 200 login pages of personal-web-bff at 8 clients; then each child's peak (VmHWM).

    .venv/bin/python -m bench.up_rss            # prints a JSON line, writes bench/results/
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from tests.e2e.up_system import (
    CHILDREN,
    demo_token,
    fresh_databases,
    running_up,
    system_env,
    wait_running,
)

RESULTS = Path(__file__).resolve().parent / "results"
PRODUCTION_ARGON2 = ("ARGON2_TIME_COST", "ARGON2_MEMORY_KIB", "ARGON2_PARALLELISM")


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(parents.get(p, []))
    return found


def _largest_mb(pid: int, field: str) -> float:
    """The largest single process of the child's tree (the target is per process)."""
    return round(max((_status_kib(p, field) for p in _tree(pid)), default=0) / 1024, 1)


async def _load(ports: dict[str, int], token: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        grant = {
            "grant_type": "password",
            "client_id": "personal-mobile-api",
            "username": "demo@hiwallet.dev",
            "password": "hiwallet-demo",
        }
        url = f"http://127.0.0.1:{ports['identity']}/realms/hiwallet/protocol/openid-connect/token"
        grants = await asyncio.gather(*(client.post(url, data=grant) for _ in range(4)))
        assert all(g.status_code == 200 for g in grants), [g.status_code for g in grants]
        front = f"http://127.0.0.1:{ports['personal-mobile-api']}/v1/accounts"
        page = f"http://127.0.0.1:{ports['personal-web-bff']}/"
        headers = {"Authorization": f"Bearer {token}"}

        async def client_loop(n: int, url: str, headers: dict[str, str]) -> None:
            for _ in range(n):
                answer = await client.get(url, headers=headers)
                assert answer.status_code < 500, answer.status_code

        await asyncio.gather(*(client_loop(250, front, headers) for _ in range(8)))
        await asyncio.gather(*(client_loop(25, page, {}) for _ in range(8)))


async def main() -> dict[str, Any]:
    async with fresh_databases() as databases:
        env, ports = system_env(databases)
        for key in PRODUCTION_ARGON2:
            env.pop(f"HIWALLET_IDENTITY_{key}", None)
        with tempfile.TemporaryDirectory() as tmp, running_up(env, Path(tmp) / "up.log") as (proc, out):
            wait_running(proc, out, timeout_s=240)
            pids = {child: out.pids("child started", child)[-1] for child in CHILDREN}
            await asyncio.sleep(3)  # settle: what each holds at rest, not while it starts
            after_start = {c: _largest_mb(p, "VmRSS") for c, p in pids.items()}
            token = demo_token(ports["identity"])
            await _load(ports, token)
            peak = {c: _largest_mb(p, "VmHWM") for c, p in pids.items()}
            after_load = {c: _largest_mb(p, "VmRSS") for c, p in pids.items()}
    return {"after_start_mb": after_start, "after_load_mb": after_load, "peak_mb": peak}


if __name__ == "__main__":
    result = asyncio.run(main())
    RESULTS.mkdir(exist_ok=True)
    name = RESULTS / time.strftime("up-rss-%Y%m%dT%H%M%SZ.json", time.gmtime())
    name.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
