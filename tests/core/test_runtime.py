"""core.http.runtime.serve with ``uds``: the port and a Unix socket served by one process (a
front API's hop to wallet-api on the same host), the socket the owner's only, a stale file
replaced, a live one or another file refused, nothing answering there once the process stops."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hiwallet.core.http.runtime import bind_unix_socket
from tests.servers import free_port
from tests.waiting import until_sync

_APP = """
from fastapi import FastAPI
app = FastAPI()
@app.get("/where")
async def where() -> dict[str, str]:
    return {"served": "yes"}
"""
_SERVE = """
import sys
from hiwallet.core.http.runtime import serve
serve(
    "served_app:app", host="127.0.0.1", port=int(sys.argv[1]), uds=sys.argv[2], workers=int(sys.argv[3]),
    http=sys.argv[4],
)
"""


@pytest.fixture
def directory() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="serve-"))  # short: a socket's path is at most 107 bytes
    yield made
    shutil.rmtree(made, ignore_errors=True)


def _answers(transport: httpx.HTTPTransport | None, url: str) -> bool:
    try:
        with httpx.Client(transport=transport, timeout=1.0) as client:
            return client.get(url).json() == {"served": "yes"}
    except httpx.HTTPError:
        return False


# wallet-api serves with the lean protocol (its HTTP_SERVER), the port and the socket alike.
@pytest.mark.parametrize("http", ["uvicorn", "lean"])
@pytest.mark.parametrize("workers", [1, 2])
def test_served_on_the_port_and_the_socket_which_is_the_owners_only(
    directory: Path, workers: int, http: str
) -> None:
    path = directory / "api.sock"
    path_text = str(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(path_text)  # a crashed process's file: nobody answers on it
    (directory / "served_app.py").write_text(_APP)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(port), path_text, str(workers), http],
        env={**os.environ, "PYTHONPATH": f"{directory}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    try:
        unix = httpx.HTTPTransport(uds=path_text)
        until_sync(lambda: _answers(unix, "http://api/where"), 20.0, "served on the socket")
        assert _answers(None, f"http://127.0.0.1:{port}/where")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with pytest.raises(OSError, match="already answers"):
            bind_unix_socket(path_text)  # a second server on a live socket
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal once it has drained, as it does serving a port alone
        assert process.wait(timeout=20) in (0, -signal.SIGTERM)
    # Nothing answers there any more (the file, if the signal left it, is replaced at the next start).
    assert not _answers(httpx.HTTPTransport(uds=path_text), "http://api/where")


def test_a_path_that_is_not_a_socket_or_not_absolute_is_refused(directory: Path) -> None:
    other = directory / "notes.txt"
    other.write_text("kept")
    with pytest.raises(OSError, match="not a socket"):
        bind_unix_socket(str(other))
    assert other.read_text() == "kept"
    with pytest.raises(ValueError, match="absolute"):
        bind_unix_socket("relative.sock")
