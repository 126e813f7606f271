"""PostgreSQL going away under load, as wallet-api sees it from its own process: every open
connection cut at once, new ones refused for a while, then the server back.

What must hold (issue 9, item 8): clients see only 201 or 503 (never a 500 from a connection
left in a broken state and reused), a retry with the same Idempotency-Key succeeds once the
database is back, every replay answers the same, and the money adds up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.faultproxy import FaultProxy
from tests.servers import free_port
from tests.waiting import until
from tests.wallet_api.conftest import Customer, WalletApi

CLIENTS = 8
TRANSFERS_PER_CLIENT = 25
AMOUNT_MINOR = 100
FUNDS_MINOR = 1_000_000
RETRY_PAUSE_S = 0.05
CLIENT_DEADLINE_S = 90.0
DOWNTIME_S = 1.0


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    running = FaultProxy()
    await running.start()
    try:
        yield running
    finally:
        await running.close()


@contextlib.asynccontextmanager
async def wallet_api_process(api: WalletApi, proxy: FaultProxy) -> AsyncIterator[httpx.AsyncClient]:
    """`hiwallet run wallet-api` as its own process on ``api``'s database, through the proxy."""
    port = free_port()
    env = {
        **os.environ,
        "HIWALLET_DATABASE_URL": f"postgresql://127.0.0.1:{proxy.port}",
        "HIWALLET_WALLET_API_PORT": str(port),
        "HIWALLET_WALLET_API_DATABASE": api.database,
        "HIWALLET_WALLET_API_CUSTOMER_ISSUER_BASE": api.idp.base_url,
        "HIWALLET_WALLET_API_STAFF_ISSUER_BASE": api.staff_idp.base_url,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *("-m", "hiwallet.cli", "run", "wallet-api"), env=env, start_new_session=True
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:

            async def ready() -> bool:
                if proc.returncode is not None:
                    raise RuntimeError(f"wallet-api exited ({proc.returncode})")
                with contextlib.suppress(httpx.HTTPError):
                    return (await http.get("/ready")).status_code == 200
                return False

            await until(ready, 30, "wallet-api ready", interval_s=0.1)
            yield http
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


async def test_postgres_restart_under_load_answers_only_503_then_the_same_keys_succeed(
    api: WalletApi, proxy: FaultProxy
) -> None:
    customers = [await api.customer(funds=FUNDS_MINOR) for _ in range(CLIENTS)]
    statuses: Counter[int] = Counter()
    answers: dict[str, dict[str, Any]] = {}
    unexpected: list[tuple[str, int, str]] = []
    done = 0
    progress = asyncio.Condition()

    async def reached(fraction: float) -> None:
        async with progress:
            await progress.wait_for(lambda: done >= fraction * CLIENTS * TRANSFERS_PER_CLIENT)

    async def client(http: httpx.AsyncClient, index: int, sender: Customer) -> None:
        nonlocal done
        receiver = customers[(index + 1) % CLIENTS]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLIENT_DEADLINE_S
        for n in range(TRANSFERS_PER_CLIENT):
            key = f"fault-{index}-{n}"
            body = {
                "from_wallet": sender.wallet_id,
                "to_wallet_number": receiver.number,
                "amount": AMOUNT_MINOR,
            }
            while True:
                # As a client must: the same key again after a 503, until it is decided.
                response = await http.post(
                    "/v1/transfers", json=body, headers={**sender.auth, "Idempotency-Key": key}
                )
                statuses[response.status_code] += 1
                if response.status_code == 201:
                    answers[key] = response.json()
                    break
                if response.status_code != 503:
                    unexpected.append((key, response.status_code, response.text))
                    break
                assert loop.time() < deadline, f"{key} still 503 after {CLIENT_DEADLINE_S} s"
                await asyncio.sleep(RETRY_PAUSE_S)  # a client's pause before it retries: the load
            async with progress:
                done += 1
                progress.notify_all()

    async def faults(http: httpx.AsyncClient) -> None:
        await reached(0.15)
        # A fast shutdown: every backend ends with FATAL 57P01 while requests are in flight,
        # then the server is gone for a while and refuses connections.
        await api.pool.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY($1::int[])",
            proxy.upstream_ports,
        )
        async with proxy.down():
            # A read outside any unit of work meets the outage too: 503, never 500.
            read = await http.get("/v1/accounts", headers=customers[0].auth)
            assert read.status_code == 503, read.text
            assert read.headers["content-type"].startswith("application/problem+json")
            await asyncio.sleep(DOWNTIME_S)  # the outage's length: the fault under test
        await reached(0.5)
        proxy.cut()  # a crash and an instant recovery: only the open connections break, abruptly
        await reached(0.75)
        await api.pool.execute(  # backends terminated with no downtime after it
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY($1::int[])",
            proxy.upstream_ports,
        )

    async with wallet_api_process(api, proxy) as http:
        clients = [client(http, i, customers[i]) for i in range(CLIENTS)]
        await asyncio.gather(faults(http), *clients)

        assert unexpected == [], unexpected[:5]
        assert set(statuses) <= {201, 503}, statuses
        assert statuses[503] > 0, "the fault never reached a request: the test proved nothing"
        assert proxy.connections_cut > 0
        assert len(answers) == CLIENTS * TRANSFERS_PER_CLIENT

        # Every key replays its first answer, once the database is back.
        for index, sender in enumerate(customers):
            receiver = customers[(index + 1) % CLIENTS]
            for n in range(0, TRANSFERS_PER_CLIENT, 5):
                key = f"fault-{index}-{n}"
                body = {
                    "from_wallet": sender.wallet_id,
                    "to_wallet_number": receiver.number,
                    "amount": AMOUNT_MINOR,
                }
                again = await http.post(
                    "/v1/transfers", json=body, headers={**sender.auth, "Idempotency-Key": key}
                )
                assert again.status_code == 201 and again.json()["id"] == answers[key]["id"]

    # Each customer sent and received the same number of transfers: back where it started.
    for customer in customers:
        assert (await api.balance(customer.wallet_id))["cash"] == FUNDS_MINOR
    # One transaction per key: none posted twice (a ring of equal transfers would hide that
    # in the balances), none lost.
    posted = await api.pool.fetchval("SELECT count(DISTINCT id) FROM ledger.transactions WHERE type = 'p2p'")
    assert posted == CLIENTS * TRANSFERS_PER_CLIENT
    await api.verify()
