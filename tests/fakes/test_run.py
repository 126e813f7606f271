"""`hiwallet run stripe-fake|bank-fake`: each its own process, configured by its own environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.servers import free_port

HIWALLET = str(Path(sys.executable).parent / "hiwallet")


@pytest.mark.parametrize(("name", "prefix"), [("stripe-fake", "STRIPE_FAKE_"), ("bank-fake", "BANK_FAKE_")])
def test_runs_as_its_own_process_on_its_settings_port(name: str, prefix: str) -> None:
    port = free_port()
    env = {**os.environ, f"{prefix}PORT": str(port)}
    process = subprocess.Popen([HIWALLET, "run", name], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert response.json() == {"status": "ok"}
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
