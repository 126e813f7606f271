"""``hiwallet up``: the whole system on one machine. Migrates, starts every deployable as its
own process (both identity realms and wallet-api so far; every later service joins the list),
waits until each is ready, seeds the demo data (idempotent: a second start reuses it), prints
how to use it, and on Ctrl-C or SIGTERM stops all children cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx
from rich.console import Console

from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.wallet_api.domain import Caller, Tier

console = Console(emoji=False, soft_wrap=True)  # ids hold ":a:", which rich would make an emoji

DEMO_EMAIL = "demo@hiwallet.dev"
DEMO_PASSWORD = "hiwallet-demo"
DEMO_BUSINESS = "Demo Kahve"
DEMO_FUNDS_MINOR = 1_000_00
STOP_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Deployable:
    name: str
    args: tuple[str, ...]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def deployables() -> list[Deployable]:
    from hiwallet.identity.settings import get_identity_settings
    from hiwallet.wallet_api.settings import get_wallet_api_settings

    identity = get_identity_settings()
    wallet = get_wallet_api_settings()
    return [
        Deployable("identity (hiwallet)", ("run", "identity", "--realm", "hiwallet"), identity.port),
        Deployable(
            "identity (hiwallet-staff)", ("run", "identity", "--realm", "hiwallet-staff"), identity.staff_port
        ),
        Deployable("wallet-api", ("run", "wallet-api"), wallet.port),
    ]


def _secret(client: str, default: str) -> str:
    return os.environ.get("HIWALLET_IDENTITY_SECRET_" + client.upper().replace("-", "_"), default)


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_ready(procs: dict[Deployable, subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = set(procs)
    with httpx.Client(timeout=2.0) as client:
        while pending:
            for d in list(pending):
                if procs[d].poll() is not None:
                    raise RuntimeError(
                        f"{d.name} exited with {procs[d].returncode} (is port {d.port} taken?)"
                    )
                try:
                    if client.get(f"{d.url}/ready").status_code == 200:
                        pending.discard(d)
                        console.print(f"  [green]ready[/green] {d.name} on {d.url}")
                except httpx.HTTPError:
                    pass
            if pending and time.monotonic() > deadline:
                raise RuntimeError(
                    f"not ready after {READY_TIMEOUT_S:.0f} s: {sorted(d.name for d in pending)}"
                )
            time.sleep(0.2)


def _stop(procs: dict[Deployable, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for d, p in procs.items():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
        # A service's worker processes (wallet-api's) are in its process group; none outlives it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        console.print(f"  stopped {d.name} ({p.returncode})")


async def seed(
    identity_url: str, wallet_url: str, *, database: str | None = None, api_settings: Any = None
) -> dict[str, Any]:
    """The demo customer (Verified, funded) and the demo business linked to merchant-demo.
    Every step finds what a previous start made before making it. ``database`` and
    ``api_settings`` are for tests (a cloned database, servers on free ports)."""
    from hiwallet.ledger import Ledger
    from hiwallet.wallet_api.cli import operator, service_account_subject, wallet_service

    realm = f"{identity_url}/realms/hiwallet"
    async with httpx.AsyncClient(timeout=10.0) as http:
        token = (
            await http.post(
                f"{realm}/protocol/openid-connect/token",
                auth=("onboarding", _secret("onboarding", "dev-onboarding-secret")),
                data={"grant_type": "client_credentials"},
            )
        ).json()["access_token"]
        onboarding = {"Authorization": f"Bearer {token}"}
        users = f"{identity_url}/admin/realms/hiwallet/users"
        found = (
            await http.get(users, params={"email": DEMO_EMAIL, "exact": "true"}, headers=onboarding)
        ).json()
        if not found:
            rep = {
                "username": DEMO_EMAIL,
                "email": DEMO_EMAIL,
                "enabled": True,
                "emailVerified": True,
                "credentials": [{"type": "password", "value": DEMO_PASSWORD, "temporary": False}],
            }
            (await http.post(users, json=rep, headers=onboarding)).raise_for_status()
            found = (
                await http.get(users, params={"email": DEMO_EMAIL, "exact": "true"}, headers=onboarding)
            ).json()
        subject = found[0]["id"]
        opened = await http.post(
            f"{wallet_url}/v1/accounts/personal", json={"subject": subject}, headers=onboarding
        )
        opened.raise_for_status()
        account = opened.json()
        if account["tier"] in ("unknown", "unverified"):
            raised = await http.put(
                f"{wallet_url}/v1/accounts/{account['id']}/tier",
                json={"tier": Tier.VERIFIED.value},
                headers=onboarding,
            )
            raised.raise_for_status()
            account = raised.json()
    wallet = account["wallets"][0]

    async with wallet_service(database, api_settings) as service:
        ledger = Ledger(service.store, service.fees)
        # Keyed by the wallet: a second start replays this top-up instead of adding money.
        await ledger.topup(
            f"demo-topup-{wallet['id'][-12:]}",
            wallet["id"],
            DEMO_FUNDS_MINOR,
            provider="stripe",
            actor=operator(),
            ref="demo funds",
        )
        merchant = Caller(
            service.settings.customer_issuer,
            service_account_subject(service.settings.customer_realm, "merchant-demo"),
            "merchant-demo",
            True,
        )
        businesses = [a for a in await service.accounts(merchant) if a["kind"] == "business"]
        if not businesses:
            business = await service.open_business(DEMO_BUSINESS, operator=operator())
            await service.link(business["id"], merchant.issuer, merchant.subject, operator=operator())
            businesses = [await service.account(merchant, business["id"])]
    return {"customer": account, "business": businesses[0]}


def _usage(identity_url: str, wallet_url: str, demo: dict[str, Any]) -> None:
    customer = demo["customer"]["wallets"][0]
    business = demo["business"]["wallets"][0]
    console.print(f"""
[bold]HiWallet is running.[/bold] Ctrl-C stops everything.

  demo customer  {DEMO_EMAIL} / {DEMO_PASSWORD}  (tier verified)
                 wallet {customer["id"]}  number {customer["number"]}
  demo business  {DEMO_BUSINESS}, linked to the client merchant-demo
                 wallet {business["id"]}  number {business["number"]}

  TOKEN=$(curl -s -d grant_type=password -d client_id=personal-mobile-api \\
    -d username={DEMO_EMAIL} -d password={DEMO_PASSWORD} \\
    {identity_url}/realms/hiwallet/protocol/openid-connect/token | jq -r .access_token)
  curl -s -H "Authorization: Bearer $TOKEN" -H "Idempotency-Key: $(cat /proc/sys/kernel/random/uuid)" \\
    -H 'Content-Type: application/json' \\
    -d '{{"from_wallet":"{customer["id"]}","to_wallet_number":"{business["number"]}","amount":1250}}' \\
    {wallet_url}/v1/transfers
  curl -s -H "Authorization: Bearer $TOKEN" {wallet_url}/v1/wallets/{customer["id"]}/statement
""")


def up() -> None:
    settings = get_settings()
    console.print("[bold]migrating[/bold]")

    async def migrate_all() -> None:
        for key in db.DATABASES:
            if (settings.migrations_dir / db.MIGRATION_FOLDERS.get(key, key)).is_dir():
                await db.migrate(key, settings=settings)

    asyncio.run(migrate_all())
    procs: dict[Deployable, subprocess.Popen[bytes]] = {}
    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        taken = [f"{d.name} :{d.port}" for d in deployables() if _port_taken(d.port)]
        if taken:
            raise RuntimeError(f"ports in use, is the system running already? {', '.join(taken)}")
        for d in deployables():
            # Each child in its own process group: the terminal's Ctrl-C reaches only us, and we
            # stop the children in order.
            procs[d] = subprocess.Popen(
                [sys.executable, "-m", "hiwallet.cli", *d.args], start_new_session=True
            )
        console.print("[bold]starting[/bold]")
        _wait_ready(procs)
        ds = list(procs)
        identity_url, wallet_url = ds[0].url, ds[2].url
        demo = asyncio.run(seed(identity_url, wallet_url))
        _usage(identity_url, wallet_url, demo)
        while not stopping:
            for d, p in procs.items():
                if p.poll() is not None:
                    console.print(f"[red]{d.name} exited with {p.returncode}[/red]; stopping")
                    stopping = True
            time.sleep(0.5)
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/red]")
        raise SystemExit(1) from exc
    finally:
        console.print("[bold]stopping[/bold]")
        _stop(procs)
        for s, handler in previous.items():
            signal.signal(s, handler)
