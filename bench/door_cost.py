"""The front door's own CPU a forwarded transfer, in-process: personal-mobile-api's app called
through raw ASGI as uvicorn calls it (no sockets to the client), its upstream a canned HTTP
server in another process (wallet-api's 201 with its legs), Redis real (the lease as deployed),
a stand-in token verifier (a cache hit, as for a known token). What it measures is the door's
path (edge, token, rate limit, forwarding, answer) without uvicorn and without wallet-api.

    .venv/bin/python bench/door_cost.py [--requests 4000] [--rounds 5] 2>/dev/null
    PYTHONPATH=/tmp/base/src .venv/bin/python bench/door_cost.py 2>/dev/null  # another tree's code
    .venv/bin/python bench/door_cost.py --unix 2>/dev/null  # the upstream on a Unix socket

The figure: this process's CPU (user and system) a request, per round, 8 requests in flight;
run the two trees alternately and compare the best rounds (docs/performance.md, Front doors).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from typing import Any

import orjson
import uvloop

from cpu import process_cpu_s

_UPSTREAM = r"""
import asyncio, sys, uvloop
BODY = b'{"id":"t1","status":"posted","type":"p2p","amount":100,"legs":[{"a":1},{"b":2}]}'
ANSWER = (b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nlocation: /v1/transfers/t1\r\n"
          b"x-request-id: abc\r\ncontent-length: %d\r\n\r\n" % len(BODY)) + BODY
class Canned(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.transport.write(ANSWER)
async def main():
    await asyncio.get_running_loop().create_server(Canned, "127.0.0.1", int(sys.argv[1]))
    if len(sys.argv) > 2:  # --unix: on a Unix socket too
        await asyncio.get_running_loop().create_unix_server(Canned, sys.argv[2])
    await asyncio.sleep(3600)
uvloop.run(main())
"""


class _Verifier:
    """A verified customer's token (what the verifier's cache answers for a known token)."""

    def __init__(self) -> None:
        from hiwallet.core.auth import Principal

        audiences = {"aud": ["personal-mobile-api", "hiwallet-api"]}
        self.principal = Principal("s1", "iss", "customer", "app", False, None, None, frozenset(), audiences)

    async def verify(self, token: str) -> Any:
        return self.principal

    async def aclose(self) -> None:
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(port: int, requests: int, rounds: int, in_flight: int = 8, unix: str = "") -> list[float]:
    upstream = f"unix:{unix}" if unix else f"http://127.0.0.1:{port}"
    os.environ["HIWALLET_PERSONAL_MOBILE_API_WALLET_API_URL"] = upstream
    os.environ["HIWALLET_PERSONAL_MOBILE_API_RATE_LIMIT_SUBJECT"] = str(10**9)
    from hiwallet.personal_mobile_api.app import create_personal_mobile_api_app

    app = create_personal_mobile_api_app(verifier=_Verifier())  # type: ignore[arg-type]
    await asyncio.sleep(1.0)  # the upstream listening
    body = orjson.dumps({"from_wallet": "w", "to_wallet_number": "1", "amount": 100})

    async def transfer(i: int) -> None:
        headers = [
            (b"host", b"127.0.0.1:8001"),
            (b"authorization", b"Bearer token"),
            (b"content-type", b"application/json"),
            (b"idempotency-key", str(uuid.uuid4()).encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/transfers",
            "raw_path": b"/v1/transfers",
            "root_path": "",
            "query_string": b"",
            "server": ("127.0.0.1", 8001),
            "client": ("127.0.0.1", 5000 + i % in_flight),
            "headers": headers,
        }
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        if sent[0]["status"] != 201:
            raise RuntimeError(f"not forwarded: {sent}")

    startup: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    started: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await startup.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, startup.get, started.put)
    )
    print(await started.get(), file=sys.stderr)
    for i in range(200):  # warm
        await transfer(i)
    per_round = []
    for _ in range(rounds):
        before = process_cpu_s()

        async def client(k: int) -> None:
            for i in range(requests // in_flight):
                await transfer(i)

        await asyncio.gather(*(client(k) for k in range(in_flight)))
        per_round.append((process_cpu_s() - before) / requests * 1e6)
    lifespan.cancel()
    return per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--unix", action="store_true", help="the upstream reached on a Unix socket, not TCP")
    args = parser.parse_args()
    port = _free_port()
    directory = tempfile.mkdtemp(prefix="door-cost-")
    unix = f"{directory}/upstream.sock" if args.unix else ""
    upstream = subprocess.Popen([sys.executable, "-c", _UPSTREAM, str(port), *([unix] if unix else [])])
    try:
        rounds = uvloop.run(measure(port, args.requests, args.rounds, unix=unix))
    finally:
        upstream.terminate()
        upstream.wait(timeout=5)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"µs of CPU a transfer: best {min(rounds):.1f}, rounds {[round(r, 1) for r in rounds]}", flush=True)
    os._exit(0)  # the app's pools are not closed: nothing to wait for


if __name__ == "__main__":
    main()
