"""`hiwallet up` as a supervisor (issue 9, item 6), with real processes on free ports and
fresh databases: a child killed with SIGKILL comes back ready while the others keep answering;
a child that always crashes is given up after the bound while the others serve; SIGTERM stops
everything (the services that use identity first) and `up` exits 0.

Every wait polls a condition against a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from hiwallet.core import db
from hiwallet.identity.realm import RealmConfigError, load_realm
from hiwallet.identity.settings import REALMS_DIR
from hiwallet.staff_admin.login import StaffClient, next_code, staff_token
from hiwallet.up import (
    DEMO_EMAIL,
    DEMO_STAFF_EMAIL,
    DEMO_STAFF_PASSWORD,
    Deployable,
    RestartPolicy,
    Supervisor,
    unix_socket_env,
    web_sign_in_env,
)
from tests import promql
from tests.e2e import harness
from tests.e2e.up_system import (
    CHILDREN,
    TIERS,
    Output,
    alive,
    demo_token,
    fresh_databases,
    healthy,
    ready,
    running_up,
    system_env,
)
from tests.servers import free_port
from tests.waiting import until_sync as until

POLL_S = 0.05
# system_env's ports of processes that are not HiWallet's (no /metrics; smtp is not HTTP).
FAKE_PORTS = ("stripe", "bank", "mail", "smtp", "sms", "nvi")


@pytest.fixture
async def databases() -> AsyncIterator[dict[str, str]]:
    async with fresh_databases() as names:
        yield names


@pytest.fixture
def up_process(
    databases: dict[str, str], tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Output]]:
    env, ports = system_env(databases)
    # personal-mobile-api left to up: it reaches wallet-api on up's Unix socket (business-api
    # stays on the port it is given: both ways are served at once).
    del env["HIWALLET_PERSONAL_MOBILE_API_WALLET_API_URL"]
    with running_up(env, tmp_path / "up.log") as (proc, out):
        yield proc, ports, out


async def test_a_killed_child_comes_back_while_the_others_serve_and_sigterm_stops_all(
    up_process: tuple[subprocess.Popen[bytes], dict[str, int], Output], databases: dict[str, str]
) -> None:
    proc, ports, out = up_process
    # The banner is printed in two parts: the demo administrator's lines (the TOTP secret) come
    # after "HiWallet is running", so the test waits for them, not for the first part.
    await asyncio.to_thread(
        until,
        lambda: (
            bool(out.lines("HiWallet is running") and out.lines("TOTP secret")) or proc.poll() is not None
        ),
        120,
        "hiwallet up running",
    )
    assert proc.poll() is None, out.path.read_text()
    # The demo administrator, as printed: a staff login (password and TOTP), GET /v1/me.
    [secret] = re.findall(r"TOTP secret ([A-Z2-7]+)", out.path.read_text())
    client = StaffClient(f"http://127.0.0.1:{ports['staff']}/realms/hiwallet-staff")
    # up logged in with the current code; the next one is good (one step ahead is accepted).
    staff = await asyncio.to_thread(
        staff_token, client, DEMO_STAFF_EMAIL, DEMO_STAFF_PASSWORD, next_code(secret)
    )
    async with httpx.AsyncClient(timeout=5) as http:
        me_staff = await http.get(
            f"http://127.0.0.1:{ports['staff-admin']}/v1/me", headers={"Authorization": f"Bearer {staff}"}
        )
        assert me_staff.status_code == 200, me_staff.text
        assert "staff.manage" in me_staff.json()["permissions"]
        # The tour's customer look-up (docs/tour.md): wallet-api asks staff-admin with the same token.
        found = await http.get(
            f"http://127.0.0.1:{ports['wallet-api']}/v1/staff/customers",
            params={"email": DEMO_EMAIL},
            headers={"Authorization": f"Bearer {staff}"},
        )
        assert found.status_code == 200, found.text
    [wallet_pid] = out.pids("child started", "wallet-api")
    [identity_pid] = out.pids("child started", "identity")
    me = {"Authorization": f"Bearer {demo_token(ports['identity'])}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['wallet-api']}", timeout=5) as api:
        assert (await api.get("/v1/accounts", headers=me)).status_code == 200
        # and through the mobile app's front door, the same token
        front = await api.get(f"http://127.0.0.1:{ports['personal-mobile-api']}/v1/me/accounts", headers=me)
        assert front.status_code == 200, front.text

        # Every metric the shipped alert rules and dashboard read (deploy/, tests/promql.py) is
        # one these processes export (the fakes' and the mail catcher's ports aside).
        exported: set[str] = set()
        for name, port in ports.items():
            if name in FAKE_PORTS:
                continue
            scraped = await api.get(f"http://127.0.0.1:{port}/metrics")
            assert scraped.status_code == 200, (name, scraped.status_code)
            exported |= promql.exported_names(scraped.text)
        assert promql.used_metric_names() - exported == set()

        os.kill(wallet_pid, signal.SIGKILL)
        # Until wallet-api is back (a new pid, ready), identity answers every probe.
        identity_probes = 0

        def back() -> bool:
            nonlocal identity_probes
            assert ready(ports["identity"]) and ready(ports["staff"]), "identity stopped answering"
            identity_probes += 1
            pids = out.pids("child started", "wallet-api")
            return len(pids) == 2 and ready(ports["wallet-api"])

        await asyncio.to_thread(until, back, 60, "wallet-api restarted and ready")
        assert identity_probes >= 2
        assert out.lines("child exited", "wallet-api", "SIGKILL"), out.path.read_text()
        assert out.lines("child restarting", "wallet-api")
        assert out.lines("child ready", "wallet-api")
        new_pid = out.pids("child started", "wallet-api")[1]
        assert new_pid != wallet_pid and alive(new_pid) and alive(identity_pid)
        assert out.pids("child started", "identity") == [identity_pid]  # not restarted
        # The new wallet-api fetches identity's keys and serves the same token, on its socket too
        # (the killed one's file replaced), where the front door finds it again.
        accounts = await api.get("/v1/accounts", headers=me)
        assert accounts.status_code == 200
        front = await api.get(f"http://127.0.0.1:{ports['personal-mobile-api']}/v1/me/accounts", headers=me)
        assert front.status_code == 200, front.text
        wallet = accounts.json()["accounts"][0]["wallets"][0]["id"]

        # A card payment at stripe-fake reaches the wallet through topup-webhook, RabbitMQ and
        # wallet-consumer, as docs/tour.md shows.
        async def cash() -> int:
            found = await api.get(f"/v1/wallets/{wallet}", headers=me)
            assert found.status_code == 200, found.text
            return int(found.json()["cash"])

        async def cash_is(expected: int) -> bool:
            return await cash() == expected

        before = await cash()
        paid = await api.post(
            f"http://127.0.0.1:{ports['stripe']}/v1/topups",
            auth=("sk_test_hiwallet_dev", ""),
            data={"wallet": wallet, "amount": "5000", "currency": "try"},
        )
        assert paid.status_code == 200, paid.text
        await harness.until(
            lambda: cash_is(before + 5000), 30, "the card top-up in the wallet", interval_s=POLL_S
        )

        # A withdrawal, as docs/tour.md shows: withdrawal-orchestrator, wallet-consumer,
        # bank-adapter, bank-fake's callback to bank-webhook, back to completed; the wallet
        # down by the amount and its fee.
        orchestrator = f"http://127.0.0.1:{ports['withdrawal-orchestrator']}"
        asked = await api.post(
            f"{orchestrator}/v1/withdrawals",
            headers={**me, "Idempotency-Key": str(uuid.uuid4())},
            json={
                "wallet": wallet,
                "amount_minor": 2500,
                "currency": "TRY",
                "destination_iban": "TR33 0006 1005 1978 6457 8413 26",
            },
        )
        assert asked.status_code == 202, asked.text
        assert asked.json()["state"] == "initiated" and asked.json()["destination_iban"].endswith("1326")
        location = asked.headers["Location"]

        async def completed() -> dict[str, Any] | None:
            saga = (await api.get(f"{orchestrator}{location}", headers=me)).json()
            assert saga["state"] in (
                "initiated",
                "debited",
                "bank_transfer_pending",
                "settling",
                "completed",
            ), saga
            return saga if saga["state"] == "completed" else None

        saga = await harness.until(completed, 30, "the withdrawal completed", interval_s=POLL_S)
        assert await cash() == before + 5000 - 2500 - saga["fee_minor"]
        # Each of the saga's databases is used by its own application role only.
        owner = await asyncpg.connect(db.owner_dsn("postgres"))
        try:
            for key in ("withdrawal", "bank"):
                roles = await owner.fetch(
                    "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = $1", databases[key]
                )
                assert [r["usename"] for r in roles] == [db.app_role(key)], (key, roles)
            # The wallet database: wallet-api's role, merchant-webhooks' and wallet-consumer's,
            # each its own.
            roles = await owner.fetch(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = $1 ORDER BY 1",
                databases["wallet"],
            )
            assert [r["usename"] for r in roles] == [
                db.app_role("wallet", "merchant_webhooks"),
                db.app_role("wallet"),
                db.app_role("wallet", "wallet_consumer"),
            ], roles
        finally:
            await owner.close()

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0, out.path.read_text()
    for pid in (new_pid, identity_pid, *out.pids("child started", "identity-staff")):
        assert not alive(pid)
    for name, port in ports.items():
        assert not ready(port) and not healthy(port), name
    # The outside institutions (which send webhooks) first, then the services that use identity
    # (they drain while it still answers), identity last.
    stopping = [next(c for c in CHILDREN if f'"child":"{c}"' in line) for line in out.lines("child stopping")]
    tiers = [TIERS[c] for c in stopping]
    assert sorted(stopping) == sorted(CHILDREN) and tiers == sorted(tiers, reverse=True), stopping


def test_a_child_that_always_crashes_is_given_up_while_the_others_serve(
    databases: dict[str, str],
) -> None:
    env, ports = system_env(databases)
    identity = Deployable("identity", ("run", "identity", "--realm", "hiwallet"), ports["identity"], 0)
    # A real `hiwallet run` that exits at once (status 2: no such deployable), every time.
    crasher = Deployable("crasher", ("run", "no-such-deployable"), free_port(), 1)
    policy = RestartPolicy(first_delay_s=0.1, max_delay_s=0.3, max_restarts=3, window_s=60)
    supervisor = Supervisor([identity, crasher], policy=policy, env=env)
    stop = threading.Event()
    status: list[int] = []
    supervisor.start()
    runner = threading.Thread(target=lambda: status.append(supervisor.run(stop, poll_s=0.05)))
    runner.start()
    try:
        until(lambda: supervisor.child("identity").state == "ready", 60, "identity ready")
        identity_pid = supervisor.child("identity").process.pid  # type: ignore[union-attr]

        def given_up() -> bool:
            assert ready(ports["identity"]), "identity stopped answering"
            return supervisor.child("crasher").state == "given-up"

        until(given_up, 60, "the crasher given up")
        crashed = supervisor.child("crasher")
        # Restarted max_restarts times, the waits doubling up to the cap; then given up.
        assert crashed.restarts == 3 and crashed.delays_s == [0.1, 0.2, 0.3]
        assert len(crashed.exits) == 4
        assert supervisor.child("identity").restarts == 0
        assert supervisor.child("identity").process.pid == identity_pid  # type: ignore[union-attr]
        assert ready(ports["identity"]) and runner.is_alive() and not status  # still serving
    finally:
        stop.set()
        runner.join(timeout=10)
        supervisor.stop()
    assert status == [0]
    assert not alive(identity_pid) and not ready(ports["identity"])


def test_up_exits_non_zero_when_every_child_is_given_up() -> None:
    crasher = Deployable("crasher", ("run", "no-such-deployable"), free_port(), 1)
    policy = RestartPolicy(first_delay_s=0.05, max_delay_s=0.05, max_restarts=1, window_s=60)
    supervisor = Supervisor([crasher], policy=policy)
    stop = threading.Event()
    guard = threading.Timer(60, stop.set)  # were it never given up: run returns 0, and fails
    guard.start()
    supervisor.start()
    try:
        assert supervisor.run(stop, poll_s=0.05) == 1
    finally:
        guard.cancel()
        supervisor.stop()
    assert supervisor.child("crasher").state == "given-up"


def test_the_default_restart_policy() -> None:
    """0.5 s doubling, capped at 10 s; the sixth exit within the window is a crash loop."""
    policy = RestartPolicy()
    assert [policy.delay_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, None]
    patient = RestartPolicy(max_restarts=8)
    assert [patient.delay_s(n) for n in range(6, 10)] == [10.0, 10.0, 10.0, None]


def test_the_web_apps_sign_in_follows_where_they_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the web apps on other ports (or a public URL given), identity's realms (the files,
    with up's environment) name each app's callback there, the files' own kept; onboarding's and
    staff-admin's links follow; what the environment sets already is left alone."""
    ports = {"personal-web-bff": 18002, "business-web-bff": 18004, "backoffice-bff": 18005}
    given = {"HIWALLET_BACKOFFICE_BFF_PUBLIC_URL": "https://panel.example/"}
    env = web_sign_in_env(given, ports, REALMS_DIR)
    assert env["HIWALLET_PERSONAL_WEB_BFF_PUBLIC_URL"] == "http://127.0.0.1:18002"
    assert "HIWALLET_BACKOFFICE_BFF_PUBLIC_URL" not in env
    assert env["HIWALLET_ONBOARDING_LOGIN_REDIRECT_URI"] == "http://127.0.0.1:18002/auth/callback"
    assert env["HIWALLET_STAFF_ADMIN_INVITATION_REDIRECT_URI"] == "https://panel.example/auth/callback"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    customer, staff = load_realm("hiwallet", REALMS_DIR), load_realm("hiwallet-staff", REALMS_DIR)
    assert customer.clients["personal-web-bff"].redirect_uris == {
        "http://127.0.0.1:8002/auth/callback",
        "http://127.0.0.1:18002/auth/callback",
    }
    assert customer.clients["business-web-bff"].redirect_uris == {
        "http://127.0.0.1:8004/auth/callback",
        "http://127.0.0.1:18004/auth/callback",
    }
    assert staff.clients["backoffice-bff"].redirect_uris == {
        "http://127.0.0.1:8005/auth/callback",
        "https://panel.example/auth/callback",
    }
    # the other clients are the files'
    assert customer.clients["personal-mobile-api"].redirect_uris == {
        "hiwallet://auth/callback",
        "http://127.0.0.1:8001/auth/callback",
    }
    # set already: kept (up adds nothing for it)
    mine = {"HIWALLET_IDENTITY_REDIRECT_URIS_PERSONAL_WEB_BFF": '["https://web.example/auth/callback"]'}
    assert "HIWALLET_IDENTITY_REDIRECT_URIS_PERSONAL_WEB_BFF" not in web_sign_in_env(mine, ports, REALMS_DIR)
    monkeypatch.setenv("HIWALLET_IDENTITY_REDIRECT_URIS_PERSONAL_WEB_BFF", mine.popitem()[1])
    assert load_realm("hiwallet", REALMS_DIR).clients["personal-web-bff"].redirect_uris == {
        "https://web.example/auth/callback"
    }


def test_the_front_apis_reach_wallet_api_on_a_unix_socket_unless_configured() -> None:
    """up: wallet-api also on a socket in up's own directory, the edge's fronts forwarding there;
    a wallet-api socket or a front's URL set already is kept, an empty one keeps TCP."""
    here = Path("/tmp/hiwallet-up-x")
    assert unix_socket_env({}, here) == {
        "HIWALLET_WALLET_API_UDS": "/tmp/hiwallet-up-x/wallet-api.sock",
        "HIWALLET_PERSONAL_MOBILE_API_WALLET_API_URL": "unix:/tmp/hiwallet-up-x/wallet-api.sock",
        "HIWALLET_BUSINESS_API_WALLET_API_URL": "unix:/tmp/hiwallet-up-x/wallet-api.sock",
    }
    mine = {
        "HIWALLET_WALLET_API_UDS": "/run/w.sock",
        "HIWALLET_BUSINESS_API_WALLET_API_URL": "http://10.0.0.2:8010",
    }
    assert unix_socket_env(mine, here) == {"HIWALLET_PERSONAL_MOBILE_API_WALLET_API_URL": "unix:/run/w.sock"}
    assert unix_socket_env({"HIWALLET_WALLET_API_UDS": ""}, here) == {}
    assert unix_socket_env({}, Path("/" + "d" * 120)) == {}  # too deep for a socket's path: TCP


@pytest.mark.parametrize("value", ["not json", '"one"', "[1]", '[""]', '[" http://x "]', "{}"])
def test_a_redirect_uris_override_that_is_no_list_of_uris_refuses_the_start(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("HIWALLET_IDENTITY_REDIRECT_URIS_BACKOFFICE_BFF", value)
    with pytest.raises(RealmConfigError, match="HIWALLET_IDENTITY_REDIRECT_URIS_BACKOFFICE_BFF"):
        load_realm("hiwallet-staff", REALMS_DIR)
