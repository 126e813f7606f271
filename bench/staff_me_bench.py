"""staff-admin's GET /v1/me at a fixed rate: is it cheap enough to be asked on every staff
request of every service (the target: p99 under 10 ms at 500 calls per second)?

    .venv/bin/python bench/staff_me_bench.py [--rate 500] [--duration 20] [--employees 20]

It starts the staff realm (the identity service, its own fresh database) and staff-admin as
`hiwallet run staff-admin` runs it (its own fresh database), each its own process on a free
port; makes ``--employees`` employees (staff-realm users through the admin API, logged in
through the realm's pages with TOTP, made employees with a role in staff-admin's database);
then calls GET /v1/me with their real tokens in an open loop: call ``i`` is due at
start + i/rate whatever the answers before it (so a slow answer delays nobody's due time, and
the latency of each is measured from when it was due: queueing included).

The same run measures a bare baseline the same way: one uvicorn process (uvloop, httptools) with
a plain ASGI callable that reads the same employee's row by primary key through an asyncpg pool
and answers JSON: no token, no framework. The ratios say what staff-admin's token check (a
cached verification), its roles and permissions query, the edge (request id, problem+json,
metrics, access line) cost on top; the server's CPU per call is the figure the machine's load
moves least.

Results as JSON in bench/results/staff-me-<time>.json. Everything it starts it stops; it drops
its databases.
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
import httpload
import pacing
from cpu import machine_busy_s, pids_cpu_s
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.ids import new_id
from hiwallet.core.settings import get_settings
from hiwallet.staff_admin.login import StaffClient, first_login
from hiwallet.staff_admin.service import PERMISSIONS
from topup_bench import Child, drop, free_port, pct

LOG = benchlog.LOG  # the services' log lines: the run's log file (bench/benchlog.py)
PASSWORD = "bench staff password"
CONNECTIONS = 64

_IDENTITY = """
import sys, uvicorn
from hiwallet.identity.app import create_identity_app
from hiwallet.identity.settings import IdentitySettings
port, database = int(sys.argv[1]), sys.argv[2]
settings = IdentitySettings(staff_public_url=f"http://127.0.0.1:{port}", access_token_lifetime_s=3600,
                            argon2_time_cost=1, argon2_memory_kib=1024, argon2_parallelism=1,
                            smtp_enabled=False)
uvicorn.run(create_identity_app("hiwallet-staff", settings, database=database), host="127.0.0.1",
            port=port, log_level="warning", access_log=False)
"""

# The baseline: what answering "who is this employee" costs with nothing of ours around it.
_BARE = """
import sys, asyncpg, uvicorn, orjson
port, dsn = int(sys.argv[1]), sys.argv[2]
SQL = "SELECT subject, email, name, active FROM staff.employees WHERE subject = $1"
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
    path = scope["path"]
    if path == "/ready":
        body = b'{"status":"ready"}'
    else:
        row = await state["pool"].fetchrow(SQL, path.rsplit("/", 1)[-1])
        body = orjson.dumps(dict(row))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
"""


async def employees(idp_url: str, staff_db: str, count: int) -> list[tuple[str, str]]:
    """``count`` employees with every permission: (subject, token)."""
    async with httpx.AsyncClient(timeout=10) as http:
        token = (
            await http.post(
                f"{idp_url}/realms/hiwallet-staff/protocol/openid-connect/token",
                auth=("staff-admin", "dev-staff-admin-secret"),
                data={"grant_type": "client_credentials"},
            )
        ).json()["access_token"]
        made: list[tuple[str, str]] = []
        for n in range(count):
            email = f"bench-{n}-{uuid.uuid4().hex[:6]}@hiwallet.dev"
            created = await http.post(
                f"{idp_url}/admin/realms/hiwallet-staff/users",
                headers={"Authorization": f"Bearer {token}"},
                json={
                    "username": email,
                    "email": email,
                    "enabled": True,
                    "credentials": [{"type": "password", "value": PASSWORD, "temporary": False}],
                },
            )
            created.raise_for_status()
            made.append((created.headers["location"].rsplit("/", 1)[-1], email))
    client = StaffClient(f"{idp_url}/realms/hiwallet-staff")
    tokens = [await asyncio.to_thread(first_login, client, email, PASSWORD) for _, email in made]
    conn = await asyncpg.connect(db.owner_dsn(staff_db, get_settings()))
    try:
        role = new_id()
        await conn.execute(
            "INSERT INTO staff.roles (id, name, permissions) VALUES ($1, 'bench', $2)",
            role,
            sorted(PERMISSIONS),
        )
        for subject, email in made:
            await conn.execute(
                "INSERT INTO staff.employees (subject, email, name, invitation_id)"
                " VALUES ($1, $2, 'bench', 'bench')",
                subject,
                email,
            )
            await conn.execute("INSERT INTO staff.employee_roles VALUES ($1, $2)", subject, role)
    finally:
        await conn.close()
    return [(subject, token) for (subject, _), (token, _) in zip(made, tokens, strict=True)]


async def open_loop(
    port: int, rate: int, duration_s: float, request: Any, server_pid: int | None = None
) -> dict[str, Any]:
    """Call ``i`` due at start + i/rate; its latency from when it was due to its answer."""
    free: asyncio.Queue[httpload.Connection] = asyncio.Queue()
    for _ in range(CONNECTIONS):
        free.put_nowait(httpload.Connection("127.0.0.1", port))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def send(i: int, due: float) -> None:
        conn = await free.get()
        try:
            path, headers = request(i)
            status, _ = await conn.request("GET", path, headers)
        except httpload.HttpLoadError:
            status = 0
        finally:
            free.put_nowait(conn)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 200:
            latencies.append((time.perf_counter() - due) * 1000)

    busy_before = machine_busy_s()
    server_before = pids_cpu_s([server_pid]) if server_pid else 0.0
    start = time.perf_counter()
    total = await pacing.open_loop(rate, duration_s, send, clock=time.perf_counter)
    elapsed = time.perf_counter() - start
    server_cpu_s = pids_cpu_s([server_pid]) - server_before if server_pid else 0.0
    while not free.empty():
        free.get_nowait().close()
    return {
        "rate_per_s": rate,
        "calls": total,
        "achieved_per_s": round(statuses.get(200, 0) / elapsed, 1),
        "p50_ms": round(pct(latencies, 0.5), 2),
        "p99_ms": round(pct(latencies, 0.99), 2),
        "max_ms": round(max(latencies, default=0.0), 2),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "machine_busy_s": round(machine_busy_s() - busy_before, 2),
        # The server's own CPU per answered call: the figure the machine's load moves least.
        "server_cpu_ms_per_call": round(1000 * server_cpu_s / max(1, statuses.get(200, 0)), 3),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    tag = uuid.uuid4().hex[:8]
    identity_db, staff_db = f"hwb_staff_identity_{tag}", f"hwb_staff_admin_{tag}"
    await databases.migrate("staff_identity", database=identity_db, settings=settings)
    await databases.migrate("staff_admin", database=staff_db, settings=settings)
    children: list[Child] = []
    try:
        idp_port = free_port()
        idp = Child(
            "identity",
            idp_port,
            [sys.executable, "-c", _IDENTITY, str(idp_port), identity_db],
            dict(os.environ),
            log_path=LOG,
        )
        children.append(idp)
        await idp.ready()
        print(f"making {args.employees} employees ...", flush=True)
        staff = await employees(idp.url, staff_db, args.employees)

        port = free_port()
        env = {
            **os.environ,
            "HIWALLET_STAFF_ADMIN_DATABASE": staff_db,
            "HIWALLET_STAFF_ADMIN_STAFF_ISSUER_BASE": idp.url,
            "HIWALLET_STAFF_ADMIN_BOOTSTRAP_EMAIL": "",
        }
        service = Child(
            "staff-admin",
            port,
            [sys.executable, "-m", "hiwallet.cli", "run", "staff-admin", "--port", str(port)],
            env,
            log_path=LOG,
        )
        children.append(service)
        await service.ready()
        bare_port = free_port()
        bare_dsn = db.service_dsn(staff_db, db.app_role("staff_admin"), settings)
        bare = Child(
            "bare",
            bare_port,
            [sys.executable, "-c", _BARE, str(bare_port), bare_dsn],
            dict(os.environ),
            log_path=LOG,
        )
        children.append(bare)
        await bare.ready()

        def staff_request(i: int) -> tuple[str, dict[str, str]]:
            return "/v1/me", {"Authorization": f"Bearer {staff[i % len(staff)][1]}"}

        def bare_request(i: int) -> tuple[str, dict[str, str]]:
            return f"/v1/me/{staff[i % len(staff)][0]}", {}

        # Warm both (the verifier's key fetch and its cache of verified tokens, the pools).
        await open_loop(port, args.rate, 2, staff_request)
        await open_loop(bare_port, args.rate, 2, bare_request)
        print(f"bare baseline at {args.rate}/s for {args.duration} s ...", flush=True)
        with benchlog.phase("bare", args.duration):
            baseline = await open_loop(bare_port, args.rate, args.duration, bare_request, bare.pid)
        print(f"staff-admin GET /v1/me at {args.rate}/s for {args.duration} s ...", flush=True)
        with benchlog.phase("staff-admin", args.duration):
            measured = await open_loop(port, args.rate, args.duration, staff_request, service.pid)
        service.sample()
        return {
            "what": "GET /v1/me, open loop, latency from each call's due time",
            "employees": len(staff),
            "staff_admin": measured,
            "bare": baseline,
            "p99_ratio": round(measured["p99_ms"] / baseline["p99_ms"], 2) if baseline["p99_ms"] else None,
            "p50_ratio": round(measured["p50_ms"] / baseline["p50_ms"], 2) if baseline["p50_ms"] else None,
            "cpu_per_call_ratio": round(
                measured["server_cpu_ms_per_call"] / baseline["server_cpu_ms_per_call"], 2
            )
            if baseline["server_cpu_ms_per_call"]
            else None,
            "target_p99_ms": 10.0,
            "staff_admin_peak_mb": round(service.peak_mb, 1),
            "load_1m": os.getloadavg()[0],
        }
    finally:
        for child in reversed(children):
            child.stop()
        await drop(identity_db, staff_db)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=500, help="calls per second (default 500)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per measurement (default 20)")
    parser.add_argument(
        "--employees", type=int, default=20, help="employees whose tokens are used (default 20)"
    )
    args = parser.parse_args()
    benchlog.to_file()
    result = uvloop.run(main(args))
    path = benchlog.save("staff-me", result)
    print(json.dumps(result, indent=2))
    print(f"results: {path}")
