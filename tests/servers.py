"""An ASGI app served in-process by uvicorn on a free loopback port, in a thread of its own, for
a test that needs a real socket (the fakes, topup-webhook behind them, a provider's listings)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
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
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server, thread


def stop(server: uvicorn.Server, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(timeout=STOP_TIMEOUT_S)
