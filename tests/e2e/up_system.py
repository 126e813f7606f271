"""`hiwallet up` as a test runs it: fresh migrated databases and a RabbitMQ virtual host
(:func:`fresh_databases`), every port and setting of the whole system on free ports
(:func:`system_env`), and the ``hiwallet up`` process itself with its output in a file
(:func:`running_up`), stopped and its children killed whatever happens. Shared by
tests/test_up.py (the supervisor) and tests/e2e/test_web_journey.py (a person's journey)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx

from hiwallet.contracts.databases import migrate as migrate_database
from hiwallet.up import DEMO_EMAIL, DEMO_PASSWORD
from tests import pgtemplate
from tests.e2e import harness
from tests.servers import free_port
from tests.waiting import until_sync as until

__all__ = [
    "CHILDREN",
    "FRONTS",
    "TIERS",
    "Output",
    "alive",
    "demo_token",
    "fresh_databases",
    "healthy",
    "ready",
    "running_up",
    "system_env",
    "wait_running",
]

CHILDREN = (
    "identity",
    "identity-staff",
    "wallet-api",
    "staff-admin",
    "wallet-consumer",
    "merchant-webhooks",
    "topup-webhook",
    "stripe-fake",
    "bank-fake",
    "mail-catcher",
    "sms-fake",
    "nvi-fake",
    "withdrawal-orchestrator",
    "bank-adapter",
    "bank-webhook",
    "onboarding",
    "personal-mobile-api",
    "business-api",
    "business-web-bff",
    "backoffice-bff",
    "personal-web-bff",
)
FRONTS = ("personal-mobile-api", "business-api", "business-web-bff", "backoffice-bff", "personal-web-bff")
# The stop order's tiers (up.Deployable.tier): highest first.
TIERS = {
    name: 3
    if name in FRONTS
    else 2
    if "fake" in name or name in ("mail-catcher", "withdrawal-orchestrator", "onboarding")
    else 0
    if name.startswith("identity")
    else 1
    for name in CHILDREN
}


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.asynccontextmanager
async def fresh_databases(node: str | None = None) -> AsyncIterator[dict[str, str]]:
    """Fresh, migrated databases for the wallet, both realms and top-ups, and a RabbitMQ virtual
    host of their own (the topology's names are fixed; a `make up` on this machine keeps its
    messages). The databases on the server the settings name; the virtual host on the machine's
    RabbitMQ node, or on ``node`` (the fault campaign's own, tests/chaos/servers.py)."""
    names: dict[str, str] = {}
    vhost = f"hwt-up-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(vhost, node)
    try:
        names["vhost"] = vhost
        for key in (
            "wallet",
            "identity",
            "staff_identity",
            "topup",
            "withdrawal",
            "bank",
            "onboarding",
            "staff_admin",
        ):
            names[key] = await pgtemplate.clone("template0")
            await migrate_database(key, database=names[key])
        yield names
    finally:
        names.pop("vhost", None)
        for name in names.values():
            await pgtemplate.drop_database(name)
        await harness.delete_vhost(vhost, node)


def system_env(
    databases: dict[str, str], amqp_port: int = harness.AMQP_PORT
) -> tuple[dict[str, str], dict[str, int]]:
    ports = {
        name: free_port()
        for name in (
            "identity",
            "staff",
            "wallet-api",
            "topup-webhook",
            "wallet-consumer",
            "stripe",
            "bank",
            "withdrawal-orchestrator",
            "bank-adapter",
            "bank-webhook",
            "mail",
            "smtp",
            "sms",
            "nvi",
            "onboarding",
            "staff-admin",
            *FRONTS,
            "merchant-webhooks",
        )
    }
    customer, staff = (f"http://127.0.0.1:{ports[k]}" for k in ("identity", "staff"))
    topup = f"http://127.0.0.1:{ports['topup-webhook']}/v1/webhooks/topup"
    env = {
        **os.environ,
        "HIWALLET_AMQP_URL": harness.amqp_url(databases["vhost"], amqp_port),
        "HIWALLET_TOPUP_PORT": str(ports["topup-webhook"]),
        "HIWALLET_TOPUP_DATABASE": databases["topup"],
        "HIWALLET_TOPUP_STRIPE_URL": f"http://127.0.0.1:{ports['stripe']}",
        "HIWALLET_TOPUP_BANK_URL": f"http://127.0.0.1:{ports['bank']}",
        "HIWALLET_WALLET_CONSUMER_PORT": str(ports["wallet-consumer"]),
        "HIWALLET_WALLET_CONSUMER_DATABASE": databases["wallet"],
        "HIWALLET_MERCHANT_WEBHOOKS_PORT": str(ports["merchant-webhooks"]),
        "HIWALLET_MERCHANT_WEBHOOKS_DATABASE": databases["wallet"],
        "STRIPE_FAKE_PORT": str(ports["stripe"]),
        # the hosted checkout page's address, as a browser reaches it
        "STRIPE_FAKE_PUBLIC_URL": f"http://127.0.0.1:{ports['stripe']}",
        "STRIPE_FAKE_WEBHOOK_URL": f"{topup}/stripe",
        "BANK_FAKE_PORT": str(ports["bank"]),
        "BANK_FAKE_WEBHOOK_URL": f"{topup}/bank",
        "MAIL_CATCHER_PORT": str(ports["mail"]),
        "MAIL_CATCHER_SMTP_PORT": str(ports["smtp"]),
        "SMS_FAKE_PORT": str(ports["sms"]),
        "NVI_FAKE_PORT": str(ports["nvi"]),
        "HIWALLET_ONBOARDING_PORT": str(ports["onboarding"]),
        "HIWALLET_ONBOARDING_DATABASE": databases["onboarding"],
        "HIWALLET_ONBOARDING_CUSTOMER_ISSUER_BASE": customer,
        "HIWALLET_ONBOARDING_STAFF_ISSUER_BASE": staff,
        "HIWALLET_ONBOARDING_WALLET_API_URL": f"http://127.0.0.1:{ports['wallet-api']}",
        "HIWALLET_ONBOARDING_SMTP_PORT": str(ports["smtp"]),
        "HIWALLET_ONBOARDING_SMS_URL": f"http://127.0.0.1:{ports['sms']}",
        "HIWALLET_ONBOARDING_NVI_URL": f"http://127.0.0.1:{ports['nvi']}/Service/KPSPublic.asmx",
        "HIWALLET_ONBOARDING_BANK_URL": f"http://127.0.0.1:{ports['bank']}",
        "HIWALLET_IDENTITY_PORT": str(ports["identity"]),
        "HIWALLET_IDENTITY_STAFF_PORT": str(ports["staff"]),
        "HIWALLET_IDENTITY_PUBLIC_URL": customer,
        "HIWALLET_IDENTITY_STAFF_PUBLIC_URL": staff,
        "HIWALLET_IDENTITY_DATABASE": databases["identity"],
        "HIWALLET_IDENTITY_STAFF_DATABASE": databases["staff_identity"],
        # The staff realm mails the demo administrator's invitation to the mail catcher.
        "HIWALLET_IDENTITY_SMTP_PORT": str(ports["smtp"]),
        "HIWALLET_STAFF_ADMIN_PORT": str(ports["staff-admin"]),
        "HIWALLET_STAFF_ADMIN_DATABASE": databases["staff_admin"],
        "HIWALLET_STAFF_ADMIN_STAFF_ISSUER_BASE": staff,
        "HIWALLET_WALLET_API_STAFF_ADMIN_URL": f"http://127.0.0.1:{ports['staff-admin']}",
        "HIWALLET_WITHDRAWAL_STAFF_ADMIN_URL": f"http://127.0.0.1:{ports['staff-admin']}",
        "HIWALLET_WITHDRAWAL_STAFF_ISSUER_BASE": staff,
        "HIWALLET_IDENTITY_ARGON2_TIME_COST": "1",
        "HIWALLET_IDENTITY_ARGON2_MEMORY_KIB": "1024",
        "HIWALLET_IDENTITY_ARGON2_PARALLELISM": "1",
        "HIWALLET_WALLET_API_PORT": str(ports["wallet-api"]),
        "HIWALLET_WALLET_API_DATABASE": databases["wallet"],
        "HIWALLET_WALLET_API_CUSTOMER_ISSUER_BASE": customer,
        "HIWALLET_WALLET_API_STAFF_ISSUER_BASE": staff,
        "HIWALLET_PERSONAL_MOBILE_API_PORT": str(ports["personal-mobile-api"]),
        "HIWALLET_PERSONAL_MOBILE_API_ISSUER_BASE": customer,
        "HIWALLET_PERSONAL_MOBILE_API_WALLET_API_URL": f"http://127.0.0.1:{ports['wallet-api']}",
        "HIWALLET_PERSONAL_MOBILE_API_WITHDRAWALS_URL": f"http://127.0.0.1:{ports['withdrawal-orchestrator']}",
        "HIWALLET_PERSONAL_MOBILE_API_ONBOARDING_URL": f"http://127.0.0.1:{ports['onboarding']}",
        "HIWALLET_BUSINESS_API_PORT": str(ports["business-api"]),
        "HIWALLET_BUSINESS_API_ISSUER_BASE": customer,
        "HIWALLET_BUSINESS_API_WALLET_API_URL": f"http://127.0.0.1:{ports['wallet-api']}",
        "HIWALLET_BUSINESS_API_WITHDRAWALS_URL": f"http://127.0.0.1:{ports['withdrawal-orchestrator']}",
        "HIWALLET_BUSINESS_WEB_BFF_PORT": str(ports["business-web-bff"]),
        "HIWALLET_BACKOFFICE_BFF_PORT": str(ports["backoffice-bff"]),
        "HIWALLET_PERSONAL_WEB_BFF_PORT": str(ports["personal-web-bff"]),
        "HIWALLET_PERSONAL_WEB_BFF_PUBLIC_URL": f"http://127.0.0.1:{ports['personal-web-bff']}",
        "HIWALLET_PERSONAL_WEB_BFF_ISSUER": f"{customer}/realms/hiwallet",
        "HIWALLET_PERSONAL_WEB_BFF_WALLET_API_URL": f"http://127.0.0.1:{ports['wallet-api']}",
        "HIWALLET_PERSONAL_WEB_BFF_WITHDRAWALS_URL": f"http://127.0.0.1:{ports['withdrawal-orchestrator']}",
        "HIWALLET_PERSONAL_WEB_BFF_ONBOARDING_URL": f"http://127.0.0.1:{ports['onboarding']}",
        "HIWALLET_PERSONAL_WEB_BFF_STRIPE_URL": f"http://127.0.0.1:{ports['stripe']}",
        "HIWALLET_WITHDRAWAL_PORT": str(ports["withdrawal-orchestrator"]),
        "HIWALLET_WITHDRAWAL_DATABASE": databases["withdrawal"],
        "HIWALLET_WITHDRAWAL_CUSTOMER_ISSUER_BASE": customer,
        "HIWALLET_WITHDRAWAL_WALLET_API_URL": f"http://127.0.0.1:{ports['wallet-api']}",
        "HIWALLET_BANK_ADAPTER_PORT": str(ports["bank-adapter"]),
        "HIWALLET_BANK_WEBHOOK_PORT": str(ports["bank-webhook"]),
        "HIWALLET_BANK_DATABASE": databases["bank"],
        "HIWALLET_BANK_BANK_URL": f"http://127.0.0.1:{ports['bank']}",
        "BANK_FAKE_TRANSFER_CALLBACK_URL": f"http://127.0.0.1:{ports['bank-webhook']}/v1/webhooks/bank",
        # The bank decides at once: the test waits for the saga, not for a clock.
        "BANK_FAKE_TRANSFER_DECIDE_AFTER_S": "0",
    }
    return env, ports


class Output:
    """A process's stdout and stderr, in a file read while it runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self, *needles: str) -> list[str]:
        return [line for line in self.path.read_text().splitlines() if all(n in line for n in needles)]

    def pids(self, event: str, child: str) -> list[int]:
        """The pids logged with ``event`` for ``child``, in order. Tolerant of the renderer
        (key=value or JSON)."""
        found = []
        # the child's whole name ("identity", not "identity-staff")
        named = re.compile(rf"child\W+{re.escape(child)}(?![\w-])")
        for line in self.lines(event, child):
            if not named.search(line):
                continue
            match = re.search(r"pid\W+(\d+)", line)
            if match:
                found.append(int(match[1]))
        return found


def demo_token(identity_port: int) -> str:
    response = httpx.post(
        f"http://127.0.0.1:{identity_port}/realms/hiwallet/protocol/openid-connect/token",
        data={
            "grant_type": "password",
            "client_id": "personal-mobile-api",
            "username": DEMO_EMAIL,
            "password": DEMO_PASSWORD,
        },
    )
    assert response.status_code == 200, response.text
    token: str = response.json()["access_token"]
    return token


@contextlib.contextmanager
def running_up(
    env: dict[str, str], log: Path, *, graceful: bool = True
) -> Iterator[tuple[subprocess.Popen[bytes], Output]]:
    """``hiwallet up`` with ``env``, its output in ``log``; SIGTERM at the end (then SIGKILL),
    and whatever it started killed should it have failed to stop them. Not ``graceful``: up and
    its children killed at once (a test that does not test the stopping saves its seconds)."""
    out = Output(log)
    with out.path.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hiwallet.cli", "up"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc, out
    finally:
        if not graceful:
            proc.kill()
            proc.wait()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # Whatever it started, should it have failed to stop them.
        for child in CHILDREN:
            for pid in out.pids("child started", child):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


def wait_running(proc: subprocess.Popen[bytes], out: Output, timeout_s: float = 120) -> None:
    """Until the whole banner is printed (the demo administrator's lines, the TOTP secret, come
    after "HiWallet is running"), or up exited."""
    until(
        lambda: (
            bool(out.lines("HiWallet is running") and out.lines("TOTP secret")) or proc.poll() is not None
        ),
        timeout_s,
        "hiwallet up running",
    )
    assert proc.poll() is None, out.path.read_text()
