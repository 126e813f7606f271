"""``hiwallet run onboarding`` as its own process: it serves, answers without its dependencies
as it should (503, retryable), stops on SIGTERM; and refuses to start in production on the
development keys."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx

from tests.servers import free_port, until_serving

HIWALLET = str(Path(sys.executable).parent / "hiwallet")


async def test_the_process_serves_and_stops(onboarding_db: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "HIWALLET_ONBOARDING_DATABASE": onboarding_db,
        # nothing listens there: identity is down
        "HIWALLET_ONBOARDING_CUSTOMER_ISSUER_BASE": "http://127.0.0.1:9",
        # no wires consumer: it would consume the real hiwallet.onboarding.wires (tests of it:
        # tests/onboarding/test_wires.py, tests/e2e/test_onboarding.py)
        "HIWALLET_ONBOARDING_WIRES_ENABLED": "false",
    }
    proc = await asyncio.create_subprocess_exec(
        HIWALLET, "run", "onboarding", "--port", str(port), env=env, stdout=asyncio.subprocess.DEVNULL
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await until_serving(client, "onboarding")
            ready = await client.get("/ready")
            assert (ready.status_code, ready.json()["checks"]) == (
                200,
                {"database": "ok", "background": "ok"},
            )
            response = await client.post("/v1/registrations", json={"email": "run-test@example.com"})
            assert response.status_code == 503
            assert response.json()["type"].endswith("/dependency-unavailable")
            assert (await client.get("/v1/me")).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) in (0, -signal.SIGTERM)


async def test_production_on_the_development_keys_does_not_start(onboarding_db: str) -> None:
    env = {
        **os.environ,
        "HIWALLET_ONBOARDING_DATABASE": onboarding_db,
        "HIWALLET_PRODUCTION": "true",
    }
    proc = await asyncio.create_subprocess_exec(
        HIWALLET,
        "run",
        "onboarding",
        "--port",
        str(free_port()),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode not in (0, None)
    assert b"HIWALLET_ONBOARDING_DATA_KEYS" in stderr
