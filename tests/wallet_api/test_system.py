"""The system's demo data (what `hiwallet up` seeds) is made once and reused, and the README's
curl tour works on it; health, readiness and metrics as docs/architecture.md says."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile

import httpx

from hiwallet.up import DEMO_EMAIL, DEMO_FUNDS_MINOR, DEMO_PASSWORD, seed
from tests.servers import free_port, until_serving
from tests.waiting import until
from tests.wallet_api.conftest import WalletApi


async def test_demo_seed_is_idempotent_and_the_walk_through_works(api: WalletApi) -> None:
    settings = api.service.settings
    first = await seed(api.idp.base_url, api.base_url, database=api.database, api_settings=settings)
    again = await seed(api.idp.base_url, api.base_url, database=api.database, api_settings=settings)
    assert again == first
    assert first["customer"]["tier"] == "verified" and first["business"]["kind"] == "business"
    counts = await api.counts()
    assert (counts["accounts"], counts["wallets"], counts["transactions"]) == (2, 2, 1)
    wallet = first["customer"]["wallets"][0]["id"]
    assert (await api.balance(wallet))["cash"] == DEMO_FUNDS_MINOR

    # The walk-through: a token fetched, a transfer made, the statement read.
    token = (
        await api.http.post(
            api.idp.token_url,
            data={
                "grant_type": "password",
                "client_id": "personal-mobile-api",
                "username": DEMO_EMAIL,
                "password": DEMO_PASSWORD,
            },
        )
    ).json()["access_token"]
    me = {"Authorization": f"Bearer {token}"}
    [account] = (await api.http.get("/v1/accounts", headers=me)).json()["accounts"]
    merchant = (
        await api.http.post(
            api.idp.token_url,
            auth=("merchant-demo", "dev-merchant-demo-secret"),
            data={"grant_type": "client_credentials"},
        )
    ).json()["access_token"]
    [shop] = (await api.http.get("/v1/accounts", headers={"Authorization": f"Bearer {merchant}"})).json()[
        "accounts"
    ]
    body = {
        "from_wallet": account["wallets"][0]["id"],
        "to_wallet_number": shop["wallets"][0]["number"],
        "amount": 1250,
    }
    paid = await api.http.post("/v1/transfers", json=body, headers={**me, "Idempotency-Key": "walk-1"})
    assert paid.status_code == 201 and paid.json()["fee"] == 25
    lines = (await api.http.get(f"/v1/wallets/{wallet}/statement", headers=me)).json()["lines"]
    assert [(line["type"], line["amount"]) for line in lines] == [
        ("topup", DEMO_FUNDS_MINOR),
        ("payment", -1275),
    ]
    await api.verify()


async def test_health_readiness_and_metrics(api: WalletApi) -> None:
    assert (await api.http.get("/health")).json() == {"status": "ok"}
    ready = await api.http.get("/ready")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "background": "ok"}
    await api.http.get("/v1/accounts")  # a 401, counted
    metrics = (await api.http.get("/metrics")).text
    assert (
        'http_requests_total{method="GET",route="/v1/accounts",service="wallet-api",status="401"}' in metrics
    )


async def test_hiwallet_run_wallet_api_serves_and_stops_on_sigterm(wallet_db: str) -> None:
    """`hiwallet run wallet-api --workers 2` as its own processes (on a fresh database): health,
    readiness, metrics summed over its workers (the hot route's too), the document, and a clean
    exit on SIGTERM; the same workers on its Unix socket too (``HIWALLET_WALLET_API_UDS``)."""
    port = free_port()
    sockets = tempfile.mkdtemp(prefix="wallet-api-")  # short: a socket's path is at most 107 bytes
    uds = f"{sockets}/wallet-api.sock"
    env = {
        **os.environ,
        "HIWALLET_WALLET_API_PORT": str(port),
        "HIWALLET_WALLET_API_DATABASE": wallet_db,
        "HIWALLET_WALLET_API_UDS": uds,
    }
    # Its own process group, so that its worker processes can be stopped with it if it fails.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "hiwallet.cli", "run", "wallet-api", "--workers", "2"),
        env=env,
        start_new_session=True,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            await until_serving(http, "wallet-api", 60)
            assert (await http.get("/ready")).json() == {
                "status": "ready",
                "checks": {"database": "ok", "background": "ok"},
            }
            # Two worker processes; /metrics counts what both answered, on a new connection each
            # (so both answer some), through the stack and through the hot routes alike.
            for _ in range(12):
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as fresh:
                    assert (await fresh.get("/v1/accounts")).status_code == 401
                    assert (await fresh.post("/v1/transfers", json={})).status_code == 401
            labels = 'service="wallet-api",status="401"'
            expected = [
                f'http_requests_total{{method="{method}",route="{route}",{labels}}} 12.0'
                for method, route in (("GET", "/v1/accounts"), ("POST", "/v1/transfers"))
            ]

            # A request is counted after its answer has been sent (core.http.edge measures in its
            # `finally`), and /metrics reads each worker's counter file before its histogram file:
            # the last answers' counts may land a moment after the client has them. Waited for.
            async def all_counted() -> str | None:
                text = (await http.get("/metrics")).text
                return text if all(line in text for line in expected) else None

            metrics = await until(all_counted, 10, "both workers' counts in /metrics")
            assert all(line in metrics for line in expected), metrics
            assert (await http.get("/openapi.json")).json()["info"]["title"] == "wallet-api"
        transport = httpx.AsyncHTTPTransport(uds=uds)
        async with httpx.AsyncClient(transport=transport, base_url="http://wallet-api", timeout=5) as unix:
            assert (await unix.post("/v1/transfers", json={})).status_code == 401
            assert (await unix.get("/ready")).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) in (0, -signal.SIGTERM)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(sockets, ignore_errors=True)
