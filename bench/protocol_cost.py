"""An HTTP protocol's own CPU a request, in-process: no sockets, no other process.

    .venv/bin/python bench/protocol_cost.py [uvicorn] [lean-protocol] [lean-server] [module:Class]
        [--requests 20000] [--rounds 7] [--headers 3]

Each protocol class is made as uvicorn's server makes it (``Config``, ``ServerState``), given a
transport that keeps nothing, and fed the same request (bench/server_cost.py's: a POST with an
800-byte bearer token and a small JSON body) ``--requests`` times a round; a round waits for
each answer's body before the next request. The rounds alternate the protocols (this
machine's speed drifts); reported per protocol: the lowest and the median round's CPU µs a
request (``time.process_time``). The app is the plain endpoint of server_cost.py, answering
``--headers`` headers (3 as there; 8 as the front door's transfer answers).

What it leaves out (sockets, the kernel, the event loop's polling) is the same for every
protocol, so the differences are the protocols' Python; bench/server_cost.py measures them
with sockets. ``module:Class`` measures any class taking uvicorn's protocol arguments (a
variant being tried). docs/performance.md "Front doors".
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import uvloop
from uvicorn.config import Config
from uvicorn.server import ServerState

from hiwallet.core.http.runtime import GC_YOUNG_THRESHOLD

_BODY = b'{"id":"0192f1a2-7c3e-7b1d-9a55-3f0e6c1d2b4a","status":"posted","amount":100}'
_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_BODY)).encode()),
    (b"x-request-id", b"0192f1a2-7c3e-7b1d-9a55-3f0e6c1d2b4a"),
    (b"ratelimit", b'"subject";r=599;t=60'),
    (b"ratelimit-policy", b'"subject";q=600;w=60'),
    (b"cache-control", b"no-store"),
    (b"idempotency-key", b"abcdef0123456789"),
    (b"location", b"/v1/transfers/0192f1a2-7c3e-7b1d-9a55-3f0e6c1d2b4a"),
]
_REQUEST_BODY = b'{"from_wallet": "w1", "to_wallet_number": "1234567890", "amount": 100}'
_REQUEST = (
    b"POST /v1/transfers HTTP/1.1\r\nHost: 127.0.0.1:8001\r\nAuthorization: Bearer "
    + b"x" * 800
    + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(_REQUEST_BODY)
    + _REQUEST_BODY
)


def _app(headers: list[tuple[bytes, bytes]]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": _BODY})

    return app


class _Transport:
    """Keeps nothing; tells the round when an answer's body has been written."""

    def __init__(self) -> None:
        self.answered: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        if data.endswith(_BODY) and self.answered is not None:
            self.answered.set_result(None)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8001), "peername": ("127.0.0.1", 50000)}.get(name, default)


def _factory(name: str, app: Any) -> Any:
    if name == "lean-server":
        sys.path.insert(0, str(Path(__file__).parent))
        import lean_server

        return lambda loop: lean_server._Lean(app, loop)
    if name == "uvicorn":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as protocol
    elif name == "lean-protocol":
        from hiwallet.core.http.protocol import LeanHttpProtocol as protocol
    else:
        module, _, cls = name.partition(":")
        protocol = getattr(importlib.import_module(module), cls)
    config = Config(app, lifespan="off", log_config=None, access_log=False, proxy_headers=False)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Sun, 06 Dec 2026 02:00:00 GMT"), *config.encoded_headers]
    return lambda loop: protocol(config, state, {}, _loop=loop)


async def measure(names: list[str], requests: int, rounds: int, headers: int) -> dict[str, list[float]]:
    loop = asyncio.get_running_loop()
    app = _app(_HEADERS[: max(2, headers)])
    made = {}
    for name in names:
        transport = _Transport()
        protocol = _factory(name, app)(loop)
        protocol.connection_made(transport)
        made[name] = (protocol, transport)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else list(reversed(names)):
            protocol, transport = made[name]
            started = time.process_time()
            for _ in range(requests):
                transport.answered = loop.create_future()
                protocol.data_received(_REQUEST)
                await transport.answered
            figures[name].append((time.process_time() - started) / requests * 1e6)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("protocols", nargs="*", default=["uvicorn", "lean-protocol", "lean-server"])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--headers", type=int, default=3)
    args = parser.parse_args()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])  # as the services run
    figures = uvloop.run(measure(args.protocols, args.requests, args.rounds, args.headers))
    for name, rounds in figures.items():
        print(f"{name:40} lowest {min(rounds):6.2f}  median {statistics.median(rounds):6.2f} µs a request")


if __name__ == "__main__":
    main()
