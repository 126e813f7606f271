"""An ASGI app served in-process by uvicorn on a free loopback port, in a thread of its own, for
a test that needs a real socket (the fakes, topup-webhook behind them, a provider's listings)."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from tests.waiting import until, until_sync

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_ports(ports: range) -> range:
    """This pytest-xdist worker's slice of ``ports``: workers gw0…gwN-1 take disjoint slices,
    so that no two choose the same port between one choosing it and its server binding it (a
    shared random range collided once in a CI run: 'address already in use')."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or "1")
    if not worker.startswith("gw") or count <= 1:
        return ports
    index = int(worker[2:]) % count
    size = len(ports) // count
    return range(ports.start + index * size, ports.start + (index + 1) * size)


# Ports for the servers the tests start (in-process or as processes): below the kernel's
# ephemeral range, so that no outgoing connection (the run makes thousands: PostgreSQL, RabbitMQ,
# HTTP) can take a port between free_port() choosing it and the server binding it, as bind(0)'s
# ports could; in this worker's own slice; at random within it, and never one this process
# handed out before (a server it names may not have bound yet).
_PORTS = _worker_ports(range(20_000, max(20_001, min(_ephemeral_floor(), 32_768))))
_handed_out: set[int] = set()


def free_port() -> int:
    for _ in range(200):
        port = random.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # the range is taken: what the kernel gives
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(
    app: Any, name: str, port: int | None = None, **config: Any
) -> tuple[str, uvicorn.Server, threading.Thread]:
    """Start ``app``; its base URL, the server and its thread once it accepts connections.
    ``port`` to start again where a stopped one was (tests of an outage); ``config``: more of
    uvicorn's settings (``proxy_headers=False`` as core.http.serve runs)."""
    port = port or free_port()
    server = uvicorn.Server(
        # log_config=None: uvicorn leaves logging to ours (JSON), as in a service
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", log_config=None, **config
        )
    )
    thread = threading.Thread(target=server.run, name=f"{name}-{port}", daemon=True)
    thread.start()
    wait_started(server, thread, name)
    return f"http://127.0.0.1:{port}", server, thread


def wait_started(
    server: uvicorn.Server, thread: threading.Thread, name: str, timeout_s: float = START_TIMEOUT_S
) -> None:
    """Until ``server`` accepts connections; RuntimeError at once if its thread died."""

    def started() -> bool:
        if not thread.is_alive():
            raise RuntimeError(f"{name} did not start")
        return bool(server.started)

    until_sync(started, timeout_s, f"{name} started")


def stop(server: uvicorn.Server, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(timeout=STOP_TIMEOUT_S)


async def until_serving(client: httpx.AsyncClient, what: str, timeout_s: float = 30.0) -> None:
    """Until the process behind ``client`` answers /health with 200 (started, listening)."""

    async def healthy() -> bool:
        try:
            return (await client.get("/health")).status_code == 200
        except httpx.HTTPError:
            return False

    await until(healthy, timeout_s, f"{what} serving", interval_s=0.05)
