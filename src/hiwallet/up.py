"""``hiwallet up``: the whole system on one machine, supervised.

Migrates, starts every deployable of the registry (hiwallet.contracts.deployables: both identity
realms, the services, and the outside institutions' fakes) as its own process, waits until each
is ready, seeds
the demo data (idempotent: a second start reuses it), prints how to use it, then supervises
(:class:`Supervisor`):

- a child that exits is restarted after a backoff (0.5 s, doubling, at most 10 s) while the
  others keep serving; its worker processes (its process group) go with it;
- a crash loop (more than 5 restarts within 60 s) is reported at error level and that child is
  given up; the others keep running, and ``up`` keeps serving while any child runs. When none
  is left it exits with status 1;
- only Ctrl-C or SIGTERM stops the whole system, by tier (``Deployable.tier``): the fakes of
  the outside institutions first (they send webhooks), then the services, identity last, each
  with SIGTERM (uvicorn stops accepting and finishes the requests in
  flight), SIGKILL after 10 s. ``up`` then exits 0.

Every event (started, ready, exited with its code or signal, restarting in N s, given up,
stopping, stopped) is one structured log line with the child's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import structlog
from rich.console import Console

from hiwallet.contracts.databases import DATABASES, migrate
from hiwallet.contracts.deployables import DEPLOYABLES
from hiwallet.core import db
from hiwallet.core.settings import InsecureSettings, get_settings
from hiwallet.wallet_api.domain import Caller, Tier

console = Console(emoji=False, soft_wrap=True)  # ids hold ":a:", which rich would make an emoji
log = structlog.get_logger("hiwallet.up")

DEMO_EMAIL = "demo@hiwallet.dev"
DEMO_PASSWORD = "hiwallet-demo"
DEMO_BUSINESS = "Demo Kahve"
DEMO_FUNDS_MINOR = 1_000_00
# The demo administrator (staff realm): staff-admin's bootstrap invitation goes to this address
# (HIWALLET_STAFF_ADMIN_BOOTSTRAP_EMAIL, unless set otherwise), and up follows its link.
DEMO_STAFF_EMAIL = "admin@hiwallet.dev"
DEMO_STAFF_PASSWORD = "hiwallet-staff-demo"
MAIL_WAIT_S = 20.0
STOP_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 60.0
POLL_S = 0.2


@dataclass(frozen=True)
class Deployable:
    """A process ``up`` runs: ``hiwallet <args>``, answering ``ready_path`` on ``port``.

    ``tier`` orders the stop: higher tiers stop first (hiwallet.contracts.deployables says
    why each deployable has its tier)."""

    name: str
    args: tuple[str, ...]
    port: int
    tier: int = 1
    # The outside institutions' fakes answer /health only (they have no dependency to be ready for).
    ready_path: str = "/ready"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def deployables() -> list[Deployable]:
    """Every deployable of the registry (hiwallet.contracts.deployables), on its port in force."""
    return [Deployable(d.name, ("run", d.name), d.port_in_force(), d.tier, d.ready_path) for d in DEPLOYABLES]


@dataclass(frozen=True)
class RestartPolicy:
    """Restart after ``first_delay_s`` doubling per exit within ``window_s`` (so a child that
    stayed up for ``window_s`` starts over at ``first_delay_s``), at most ``max_delay_s``; more
    than ``max_restarts`` exits within ``window_s`` is a crash loop: the child is given up.
    With the defaults a child that dies at once is restarted after 0.5, 1, 2, 4 and 8 s and
    given up at its sixth exit, about 20 s after the first."""

    first_delay_s: float = 0.5
    max_delay_s: float = 10.0
    max_restarts: int = 5
    window_s: float = 60.0

    def delay_s(self, exits_in_window: int) -> float | None:
        """The wait before the next start, or None to give up."""
        if exits_in_window > self.max_restarts:
            return None
        return float(min(self.max_delay_s, self.first_delay_s * 2 ** (exits_in_window - 1)))


def spawn(deployable: Deployable, env: Mapping[str, str] | None) -> subprocess.Popen[bytes]:
    # Each child in its own process group (session): the terminal's Ctrl-C reaches only us, we
    # stop the children in order, and a child's workers can be stopped with it.
    return subprocess.Popen(
        [sys.executable, "-m", "hiwallet.cli", *deployable.args],
        start_new_session=True,
        env=dict(env) if env is not None else None,
    )


def probe_ready(deployable: Deployable) -> bool:
    try:
        return httpx.get(f"{deployable.url}{deployable.ready_path}", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


def _describe(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return {"signal": signal.Signals(-returncode).name}
        return {"signal": -returncode}
    return {"code": returncode}


def _kill_group(pid: int) -> None:
    # A service's worker processes are in its process group; none outlives it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@dataclass
class Child:
    deployable: Deployable
    process: subprocess.Popen[bytes] | None = None
    state: str = "new"  # new, starting, ready, waiting (to restart), given-up, stopped
    started_at: float = 0.0
    restart_at: float = 0.0
    exits: deque[float] = field(default_factory=deque)  # times of exits within the window
    restarts: int = 0
    delays_s: list[float] = field(default_factory=list)  # each restart's wait, in order


class Supervisor:
    """Runs ``children``, restarts those that exit, gives up crash loops, stops all in order.

    Synchronous and single-threaded: :meth:`step` does one round (reap, restart what is due,
    probe readiness) and :meth:`run` repeats it until told to stop. ``spawn``, ``probe`` and
    ``clock`` are injectable; the CLI uses the defaults."""

    def __init__(
        self,
        deployables: Sequence[Deployable],
        *,
        policy: RestartPolicy | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        spawn: Callable[[Deployable, Mapping[str, str] | None], subprocess.Popen[bytes]] = spawn,
        probe: Callable[[Deployable], bool] = probe_ready,
        stop_timeout_s: float = STOP_TIMEOUT_S,
    ) -> None:
        self.children = [Child(d) for d in deployables]
        self.policy = policy or RestartPolicy()
        self.env = env
        self.clock = clock
        self._spawn = spawn
        self._probe = probe
        self.stop_timeout_s = stop_timeout_s

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.deployable.name == name)

    @property
    def serving(self) -> list[Child]:
        """The children still supervised (running, starting or waiting to restart)."""
        return [c for c in self.children if c.state in ("starting", "ready", "waiting")]

    def start(self) -> None:
        for c in self.children:
            self._start(c)

    def _start(self, c: Child) -> None:
        c.process = self._spawn(c.deployable, self.env)
        c.state = "starting"
        c.started_at = self.clock()
        log.info("child started", child=c.deployable.name, pid=c.process.pid, restarts=c.restarts)

    def step(self) -> None:
        now = self.clock()
        for c in self.children:
            if c.state in ("starting", "ready") and c.process is not None:
                returncode = c.process.poll()
                if returncode is not None:
                    self._exited(c, returncode, now)
                elif c.state == "starting" and self._probe(c.deployable):
                    c.state = "ready"
                    log.info("child ready", child=c.deployable.name, pid=c.process.pid, restarts=c.restarts)
            if c.state == "waiting" and now >= c.restart_at:
                c.restarts += 1
                self._start(c)

    def _exited(self, c: Child, returncode: int, now: float) -> None:
        pid = c.process.pid if c.process is not None else 0
        _kill_group(pid)
        log.error(
            "child exited",
            child=c.deployable.name,
            pid=pid,
            uptime_s=round(now - c.started_at, 3),
            **_describe(returncode),
        )
        c.exits.append(now)
        while c.exits and now - c.exits[0] > self.policy.window_s:
            c.exits.popleft()
        delay_s = self.policy.delay_s(len(c.exits))
        if delay_s is None:
            c.state = "given-up"
            log.error(
                "child given up",
                child=c.deployable.name,
                reason="crash loop",
                exits=len(c.exits),
                window_s=self.policy.window_s,
                still_serving=[s.deployable.name for s in self.serving],
            )
            console.print(
                f"[bold red]{c.deployable.name} exited {len(c.exits)} times within "
                f"{self.policy.window_s:.0f} s: given up[/bold red] (the others keep running)"
            )
            return
        c.state = "waiting"
        c.restart_at = now + delay_s
        c.delays_s.append(delay_s)
        log.warning("child restarting", child=c.deployable.name, delay_s=delay_s, exits=len(c.exits))

    def wait_ready(self, timeout_s: float, stop: threading.Event) -> None:
        """Until every child is ready (restarting any that exit meanwhile). Raises RuntimeError
        if one is given up or the time runs out."""
        deadline = self.clock() + timeout_s
        while not stop.is_set():
            self.step()
            given_up = [c.deployable.name for c in self.children if c.state == "given-up"]
            if given_up:
                raise RuntimeError(f"could not start: {', '.join(given_up)} (is its port taken?)")
            pending = [c.deployable.name for c in self.children if c.state != "ready"]
            if not pending:
                return
            if self.clock() > deadline:
                raise RuntimeError(f"not ready after {timeout_s:.0f} s: {sorted(pending)}")
            stop.wait(POLL_S)

    def run(self, stop: threading.Event, poll_s: float = POLL_S) -> int:
        """Supervise until ``stop`` is set (0) or every child has been given up (1). Does not
        stop the children: :meth:`stop` does, in order."""
        while not stop.is_set():
            self.step()
            if not self.serving:
                log.error("every child given up; nothing left to serve")
                return 1
            stop.wait(poll_s)
        return 0

    def stop(self) -> None:
        """Higher tiers first (the services that use identity drain while it still answers):
        SIGTERM, then SIGKILL after ``stop_timeout_s``; a tier's children stop together."""
        for tier in sorted({c.deployable.tier for c in self.children}, reverse=True):
            # Those whose process is (or was until now) running; the others were reaped.
            group = [
                c
                for c in self.children
                if c.deployable.tier == tier and c.state in ("starting", "ready") and c.process is not None
            ]
            for c in group:
                if c.process is not None and c.process.poll() is None:
                    log.info("child stopping", child=c.deployable.name, pid=c.process.pid)
                    c.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout_s
            for c in group:
                p = c.process
                if p is None:
                    continue
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.error("child did not stop; killing it", child=c.deployable.name, pid=p.pid)
                    p.kill()
                    p.wait(timeout=5)
                _kill_group(p.pid)
                log.info("child stopped", child=c.deployable.name, pid=p.pid, **_describe(p.returncode))
        for c in self.children:
            if c.state != "given-up":
                c.state = "stopped"


def _secret(client: str, default: str) -> str:
    return os.environ.get("HIWALLET_IDENTITY_SECRET_" + client.upper().replace("-", "_"), default)


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def seed(
    identity_url: str, wallet_url: str, *, database: str | None = None, api_settings: Any = None
) -> dict[str, Any]:
    """The demo customer (Verified, funded) and the demo business linked to merchant-demo.
    Every step finds what a previous start made before making it. ``database`` and
    ``api_settings`` are for tests (a cloned database, servers on free ports)."""
    from hiwallet.ledger import Ledger
    from hiwallet.wallet_api.cli import operator, wallet_service
    from hiwallet.wallet_api.domain import service_account_subject

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


def _usage(
    identity_url: str,
    wallet_url: str,
    demo: dict[str, Any],
    stripe_url: str,
    bank_url: str,
    withdrawal_url: str = "http://127.0.0.1:8011",
    onboarding_url: str = "http://127.0.0.1:8012",
    mail_url: str = "http://127.0.0.1:8025",
    front_url: str = "http://127.0.0.1:8001",
    web_url: str = "http://127.0.0.1:8002",
) -> None:
    customer = demo["customer"]["wallets"][0]
    business = demo["business"]["wallets"][0]
    wire = json.dumps(
        {
            "sender_name": "Demo",
            "sender_iban": "TR330006100519786457841326",
            "amount_minor": 20000,
            "currency": "TRY",
            "reference": f"HiWallet {customer['id']}",
        },
        separators=(",", ":"),
    )
    withdrawal = json.dumps(
        {
            "wallet": customer["id"],
            "amount_minor": 2500,
            "currency": "TRY",
            "destination_iban": "TR330006100519786457841326",
        },
        separators=(",", ":"),
    )
    console.print(f"""
[bold]HiWallet is running.[/bold] Ctrl-C stops everything.

  web app        open {web_url} and sign in as the demo customer
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
    {front_url}/v1/transfers
  curl -s -H "Authorization: Bearer $TOKEN" {front_url}/v1/wallets/{customer["id"]}/movements

  Top up by card at stripe-fake, and by a wire at bank-fake (each reports it to topup-webhook,
  which wallet-consumer credits through RabbitMQ):
  curl -s -u sk_test_hiwallet_dev: -d wallet={customer["id"]} -d amount=5000 -d currency=try \\
    {stripe_url}/v1/topups
  curl -s -H "Authorization: Bearer bank_dev_key" -H 'Content-Type: application/json' \\
    -d '{wire}' \\
    {bank_url}/v1/topups

  Withdraw to a bank account (withdrawal-orchestrator, then wallet-consumer, bank-adapter,
  bank-fake and bank-webhook through RabbitMQ; GET it until "completed"):
  curl -s -H "Authorization: Bearer $TOKEN" -H "Idempotency-Key: $(cat /proc/sys/kernel/random/uuid)" \\
    -H 'Content-Type: application/json' \\
    -d '{withdrawal}' \\
    {front_url}/v1/withdrawals
  curl -s -H "Authorization: Bearer $TOKEN" "{front_url}/v1/withdrawals?wallet={customer["id"]}"

  Register a customer at onboarding (the code arrives at the mail catcher, {mail_url}/api/v1/messages;
  the whole way to Verified: docs/tour.md, "Register a customer"):
  curl -s -H 'Content-Type: application/json' -d '{{"email":"you@example.com"}}' \\
    {onboarding_url}/v1/registrations
""")


def _invitation_link(mail_url: str, address: str, wait_s: float) -> str | None:
    """The link of the newest mail to ``address`` in the mail catcher, waiting up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        found = httpx.get(f"{mail_url}/api/v1/search", params={"query": f"to:{address}"}, timeout=5).json()
        if found["messages"]:
            message = httpx.get(f"{mail_url}/api/v1/message/{found['messages'][0]['ID']}", timeout=5).json()
            match = re.search(r"(http://\S+/login-actions/action-token\?key=\S+)", message["Text"])
            if match:
                return match[1]
        if time.monotonic() > deadline:
            return None
        time.sleep(POLL_S)


def seed_staff(
    staff_identity_url: str, staff_admin_url: str, mail_url: str, *, identity_database: str
) -> dict[str, str] | None:
    """The demo administrator, through the real way in: staff-admin's bootstrap invitation (sent
    at its start to HIWALLET_STAFF_ADMIN_BOOTSTRAP_EMAIL), its link followed on the staff realm's
    pages (password, authenticator), the first login, GET /v1/me completing the invitation. On a
    later start the administrator is there: their TOTP secret is read back from the staff realm's
    database (local development only; up owns the databases). None when someone else holds
    staff.manage already (the invitation goes to them, not to a demo)."""
    from hiwallet.staff_admin import errors as staff_errors
    from hiwallet.staff_admin.cli import operator, staff_service
    from hiwallet.staff_admin.login import StaffClient, accept_invitation, current_code, staff_token
    from hiwallet.staff_admin.settings import get_staff_admin_settings

    email = os.environ.get("HIWALLET_STAFF_ADMIN_BOOTSTRAP_EMAIL", DEMO_STAFF_EMAIL)
    realm = get_staff_admin_settings().staff_realm
    client = StaffClient(
        f"{staff_identity_url}/realms/{realm}",
        client_secret=_secret("backoffice-bff", "dev-backoffice-bff-secret"),
    )

    async def enrolled() -> str | None:
        conn = await asyncpg.connect(db.owner_dsn(identity_database))
        try:
            secret: str | None = await conn.fetchval(
                "SELECT totp_secret FROM users WHERE email = $1 AND cardinality(required_actions) = 0", email
            )
            return secret
        finally:
            await conn.close()

    async def invite_again() -> bool:
        async with staff_service(get_staff_admin_settings()) as service:
            try:
                await service.bootstrap_again(operator(), email)
            except staff_errors.BootstrapNotNeeded:
                return False
        return True

    async def managed() -> bool:
        async with staff_service(get_staff_admin_settings()) as service:
            return bool(await service.staff_managers())

    secret = asyncio.run(enrolled())
    if secret is None:
        if asyncio.run(managed()):
            return None  # someone else administers; no invitation is coming to the demo address
        link = _invitation_link(mail_url, email, MAIL_WAIT_S)
        if link is None:
            # The start-up invitation's mail is gone (the catcher keeps mail in memory).
            if not asyncio.run(invite_again()):
                return None
            link = _invitation_link(mail_url, email, MAIL_WAIT_S)
        if link is None:
            raise RuntimeError(f"no invitation mail to {email} reached the mail catcher")
        secret = accept_invitation(staff_identity_url, link, DEMO_STAFF_PASSWORD)
        token = staff_token(client, email, DEMO_STAFF_PASSWORD, current_code(secret))
        me = httpx.get(f"{staff_admin_url}/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        if me.status_code != 200:
            raise RuntimeError(f"the demo administrator's first login was refused ({me.status_code})")
    return {"email": email, "password": DEMO_STAFF_PASSWORD, "totp_secret": secret}


def _staff_usage(staff: dict[str, str] | None, staff_admin_url: str, wallet_url: str) -> None:
    if staff is None:
        console.print("  (no demo administrator: an employee holds staff.manage already)")
        return
    console.print(f"""
  demo administrator (staff realm; every permission)
                 {staff["email"]} / {staff["password"]}  TOTP secret {staff["totp_secret"]}
  STAFF=$(hiwallet staff token --email {staff["email"]} --password {staff["password"]} \\
    --otp $(oathtool --totp -b {staff["totp_secret"]}))
  curl -s -H "Authorization: Bearer $STAFF" {staff_admin_url}/v1/me
  curl -s -H "Authorization: Bearer $STAFF" "{wallet_url}/v1/staff/customers?email={DEMO_EMAIL}"
  (no oathtool: --otp $(python -c "import pyotp; print(pyotp.TOTP('{staff["totp_secret"]}').now()")))
  (a code is good once: for another token, wait for the next one)
""")


@dataclass(frozen=True)
class WebSignIn:
    """A web app whose sign-in returns to it: its deployable (and identity client, the same
    name), its realm, and the settings naming the same callback elsewhere."""

    name: str
    realm: str
    # Other processes' settings holding the callback (onboarding's login link, staff-admin's
    # invitation link): they follow it too.
    also: tuple[str, ...] = ()

    @property
    def env_prefix(self) -> str:
        return "HIWALLET_" + self.name.upper().replace("-", "_") + "_"


WEB_SIGN_INS = (
    WebSignIn("personal-web-bff", "hiwallet", ("HIWALLET_ONBOARDING_LOGIN_REDIRECT_URI",)),
    WebSignIn("business-web-bff", "hiwallet"),
    WebSignIn("backoffice-bff", "hiwallet-staff", ("HIWALLET_STAFF_ADMIN_INVITATION_REDIRECT_URI",)),
)


def web_sign_in_env(environ: Mapping[str, str], ports: Mapping[str, int], realms_dir: Path) -> dict[str, str]:
    """What ``up`` adds to its children's environment so that each web app's sign-in returns to
    where it runs: its public URL (``HIWALLET_<APP>_PUBLIC_URL``, or its port on 127.0.0.1),
    its callback among its identity client's redirect URIs (identity's
    ``HIWALLET_IDENTITY_REDIRECT_URIS_<CLIENT>``, the realm file's own kept: ``hiwallet staff
    token`` and a default-port client still use them), and the settings of the other processes
    that send a browser there. What the environment names already is left as it is."""
    from hiwallet.identity.realm import load_realm, redirect_uris_env

    added: dict[str, str] = {}
    realms = {r: load_realm(r, realms_dir) for r in {w.realm for w in WEB_SIGN_INS}}
    for web in WEB_SIGN_INS:
        public = environ.get(web.env_prefix + "PUBLIC_URL") or f"http://127.0.0.1:{ports[web.name]}"
        callback = public.rstrip("/") + "/auth/callback"
        added[web.env_prefix + "PUBLIC_URL"] = public
        client = realms[web.realm].clients[web.name]
        uris = sorted(client.redirect_uris | {callback})
        added.update(redirect_uris_env(web.name, uris))
        added.update(dict.fromkeys(web.also, callback))
    return {k: v for k, v in added.items() if k not in environ}


# The front APIs that forward through core.edge, which can reach wallet-api on a Unix socket.
_EDGE_FRONTS = ("HIWALLET_PERSONAL_MOBILE_API_", "HIWALLET_BUSINESS_API_")
# A socket's path is at most 107 bytes (sun_path); a temporary directory deeper than this
# leaves the stand on TCP rather than failing to start.
_MAX_SOCKET_PATH = 100


def unix_socket_env(environ: Mapping[str, str], directory: Path) -> dict[str, str]:
    """wallet-api also listening on a Unix socket in ``directory`` (up's own, made private), and
    the front APIs forwarding to it there rather than over loopback TCP: on one host the kernel
    does less a request (docs/performance.md, "Front doors"). What the environment sets already
    is left alone: ``HIWALLET_WALLET_API_UDS`` (a path, or empty: the port only) and each
    front's ``…_WALLET_API_URL``."""
    added: dict[str, str] = {}
    uds = environ.get("HIWALLET_WALLET_API_UDS")
    if uds is None:
        uds = str(directory / "wallet-api.sock")
        if len(uds.encode()) > _MAX_SOCKET_PATH:
            return added
        added["HIWALLET_WALLET_API_UDS"] = uds
    if uds:
        for prefix in _EDGE_FRONTS:
            if prefix + "WALLET_API_URL" not in environ:
                added[prefix + "WALLET_API_URL"] = f"unix:{uds}"
    return added


def _databases() -> dict[str, str]:
    """Each database key and the database it names here (settings may point at clones)."""
    from hiwallet.bank.settings import get_bank_settings
    from hiwallet.identity.settings import get_identity_settings
    from hiwallet.onboarding.settings import get_onboarding_settings
    from hiwallet.staff_admin.settings import get_staff_admin_settings
    from hiwallet.topup_webhook.settings import get_topup_webhook_settings
    from hiwallet.wallet_api.settings import get_wallet_api_settings
    from hiwallet.withdrawals.settings import get_withdrawal_settings

    identity = get_identity_settings()
    return {
        "wallet": get_wallet_api_settings().database or DATABASES["wallet"],
        "identity": identity.database_name("identity"),
        "staff_identity": identity.database_name("staff_identity"),
        "topup": get_topup_webhook_settings().database or DATABASES["topup"],
        "bank": get_bank_settings().database or DATABASES["bank"],
        "withdrawal": get_withdrawal_settings().database or DATABASES["withdrawal"],
        "onboarding": get_onboarding_settings().database or DATABASES["onboarding"],
        "staff_admin": get_staff_admin_settings().database or DATABASES["staff_admin"],
    }


def up() -> None:
    settings = get_settings()
    if settings.production:
        # The local stand: it seeds demo users whose passwords and codes ship in the repository.
        raise InsecureSettings(
            "HIWALLET_PRODUCTION=true: hiwallet up (the local stand, demo users) refuses to run"
        )
    # The web apps' sign-in follows where they run (a web app on another port can sign in).
    from hiwallet.identity.settings import get_identity_settings

    ports = {d.name: d.port for d in deployables()}
    os.environ.update(web_sign_in_env(os.environ, ports, get_identity_settings().realms_dir))
    console.print("[bold]migrating[/bold]")
    databases = _databases()

    async def migrate_all() -> None:
        for key in DATABASES:
            await migrate(key, settings=settings, database=databases[key])

    asyncio.run(migrate_all())
    # staff-admin's first administrator invitation: to the demo administrator unless configured.
    os.environ.setdefault("HIWALLET_STAFF_ADMIN_BOOTSTRAP_EMAIL", DEMO_STAFF_EMAIL)
    # Merchants' webhooks to a receiver on this laptop (127.0.0.1): the local stand's choice,
    # unless configured; the services' own default refuses private addresses (docs/webhooks.md).
    os.environ.setdefault("HIWALLET_WALLET_API_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")
    os.environ.setdefault("HIWALLET_MERCHANT_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "true")
    # The front APIs run on 127.0.0.1 here: onboarding believes their X-Forwarded-For, so its
    # per-address limit counts the client's address, not the front's (docs/onboarding.md). On
    # this stand anything local could claim an address; a deployment names its fronts' addresses.
    os.environ.setdefault("HIWALLET_ONBOARDING_TRUSTED_PROXIES", "127.0.0.1")
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        # Only flags: writing a log line here could re-enter a write the signal interrupted.
        received.append(signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    # The stand's Unix sockets: a directory of this run's own (mode 0700), removed at the end.
    sockets = Path(tempfile.mkdtemp(prefix="hiwallet-up-"))
    os.environ.update(unix_socket_env(os.environ, sockets))
    supervisor = Supervisor(deployables())
    status = 0
    try:
        taken = [f"{d.name} :{d.port}" for d in deployables() if _port_taken(d.port)]
        if taken:
            raise RuntimeError(f"ports in use, is the system running already? {', '.join(taken)}")
        console.print("[bold]starting[/bold]")
        supervisor.start()
        supervisor.wait_ready(READY_TIMEOUT_S, stop)
        if not stop.is_set():
            identity, wallet = (supervisor.child(n).deployable for n in ("identity", "wallet-api"))
            demo = asyncio.run(seed(identity.url, wallet.url, database=databases["wallet"]))
            staff = seed_staff(
                supervisor.child("identity-staff").deployable.url,
                supervisor.child("staff-admin").deployable.url,
                supervisor.child("mail-catcher").deployable.url,
                identity_database=databases["staff_identity"],
            )
            _usage(
                identity.url,
                wallet.url,
                demo,
                supervisor.child("stripe-fake").deployable.url,
                supervisor.child("bank-fake").deployable.url,
                supervisor.child("withdrawal-orchestrator").deployable.url,
                supervisor.child("onboarding").deployable.url,
                supervisor.child("mail-catcher").deployable.url,
                supervisor.child("personal-mobile-api").deployable.url,
                supervisor.child("personal-web-bff").deployable.url,
            )
            _staff_usage(staff, supervisor.child("staff-admin").deployable.url, wallet.url)
            status = supervisor.run(stop)
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/red]")
        status = 1
    finally:
        if received:
            log.info("stop requested", signal=signal.Signals(received[0]).name)
        console.print("[bold]stopping[/bold]")
        supervisor.stop()
        shutil.rmtree(sockets, ignore_errors=True)
        for s, handler in previous.items():
            signal.signal(s, handler)
    if status:
        raise SystemExit(status)
