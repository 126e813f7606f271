"""The fault campaign (issue 25): a bank workload on the whole system as ``hiwallet up`` runs it,
while a seeded scheduler kills, stops and restarts its parts; then the books are checked.

    .venv/bin/python -m tests.chaos.campaign [--seed 25] [--duration 600] [--report chaos-report.json]

The system: fresh databases and a RabbitMQ virtual host (tests/e2e/up_system.py) on the
campaign's own PostgreSQL cluster and RabbitMQ node (tests/chaos/servers.py: restarting them
harms no other test), every HiWallet process a real child of ``hiwallet up``. The workload:
verified customers (opened through identity's admin API and wallet-api's onboarding endpoints
with the onboarding client's token), each with a real password-grant token, move money through
the front doors:

- ``p2p`` and ``payment`` (to the demo business): personal-mobile-api ``POST /v1/transfers``;
- ``refund`` of a payment: business-api, with the demo merchant's client-credentials token;
- ``withdrawal``: personal-mobile-api ``POST /v1/withdrawals`` (bank-fake decides at once);
- ``card_topup``: stripe-fake ``POST /v1/topups`` naming the wallet (its webhook to topup-webhook);
- ``bank_topup``: a wire at bank-fake with the reference ``HiWallet <wallet id>``;
- ``promo`` and ``goodwill``: the demo administrator (a staff-realm token, password and TOTP)
  grants promo under a staff campaign and credits goodwill at wallet-api's staff endpoints;
- ``review``: the same employee releases or cancels a withdrawal waiting for review (above
  REVIEW_ABOVE_MINOR) at withdrawal-orchestrator's staff endpoints.

The scheduler (``random.Random(seed)``; the same seed gives the same schedule of faults and the
same sequence of operations per worker) ``kill -9``s each kind of HiWallet process in turn (up
restarts it), SIGSTOPs one and SIGCONTs it a moment later, restarts the campaign's PostgreSQL
and RabbitMQ, and in the long run cuts the connections to them through proxies
(tests/faultproxy.py) and has the fakes repeat, delay, reorder and lose their callbacks (top-up
notifications and the bank's transfer callbacks) and refuse transfers. The fakes are
the outside world: never killed.

At the end, once the faults stop and the system settles (outboxes sent, queues drained, sagas
terminal, top-ups credited: observed, not slept on), ``Campaign.check`` asserts:

- every request answered 2xx is done exactly once; one with no answer (or 5xx) is sent again
  with its Idempotency-Key and settles as done once or refused with nothing written;
- money is conserved: what came in (the fakes' accepted top-ups, and the promo and goodwill the
  platform's expense accounts paid) equals the customers' and the business's balances plus the
  fees plus what went out (bank-fake's paid transfers);
- no withdrawal saga is left unfinished; every dead letter is listed with its reason (none is
  expected: each one left is a finding);
- ``hiwallet ledger verify`` is clean.

The report: operations by kind and outcome, faults by kind, the time each kind of process took
to be ready again after its kill.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pyotp

from hiwallet.contracts.topups import TOPUPS_DEAD_LETTER_QUEUE
from hiwallet.contracts.withdrawals import WITHDRAWALS_DEAD_LETTER_QUEUE
from hiwallet.core import db
from hiwallet.core.broker import Broker
from hiwallet.core.deadletters import list_dead_letters
from hiwallet.ledger.store import LedgerStore, init_connection
from hiwallet.staff_admin.login import StaffClient, staff_token
from hiwallet.up import DEMO_STAFF_EMAIL, DEMO_STAFF_PASSWORD
from tests import pgtemplate
from tests.chaos.servers import PrivateServers, ensure, settings_on
from tests.e2e import harness
from tests.e2e.up_system import FRONTS, Output, fresh_databases, ready, running_up, system_env, wait_running
from tests.faultproxy import FaultProxy

__all__ = ["Campaign", "Config", "main", "run"]

T = TypeVar("T")
DEFAULT_SEED = 25
PASSWORD = "chaos password 1"
IBAN = "TR33 0006 1005 1978 6457 8413 26"
SENDER_IBAN = "TR330006100519786457841326"
STRIPE_KEY = "sk_test_hiwallet_dev"
BANK_KEY = "bank_dev_key"
MERCHANT = ("merchant-demo", "dev-merchant-demo-secret")
ONBOARDING = ("onboarding", "dev-onboarding-secret")
OPENING_MINOR = 5_000_00  # each customer's first card top-up
HTTP_TIMEOUT_S = 10.0
SETTLE_TIMEOUT_S = 240.0
# A process not ready again within this is a finding (a slow recovery is reported, not failed:
# on this shared two-core machine one took over 90 s under load).
RECOVER_TIMEOUT_S = 300.0
# The kinds of HiWallet process the scheduler kills (the fakes are the outside world).
TARGETS = (
    "identity",
    "identity-staff",
    "wallet-api",
    "staff-admin",
    "wallet-consumer",
    "merchant-webhooks",
    "topup-webhook",
    "withdrawal-orchestrator",
    "bank-adapter",
    "bank-webhook",
    "onboarding",
    *FRONTS,
)
# Operations and their weights in the mix. ``promo`` (a grant under a staff campaign) and
# ``goodwill`` (a staff credit) are the platform's money coming in; ``review``: an employee
# releases (or cancels) a withdrawal waiting for review (those above REVIEW_ABOVE_MINOR).
MIX = {
    "p2p": 30,
    "payment": 20,
    "refund": 6,
    "withdrawal": 12,
    "card_topup": 16,
    "bank_topup": 16,
    "promo": 4,
    "goodwill": 3,
    "review": 4,
}
# Withdrawals above 40.00 TRY wait for staff (the workload's are 0.01 to 50.99): about one in five.
REVIEW_ABOVE_MINOR = 40_00
RELEASE_SHARE = 0.75  # the reviewer's odds of releasing (else: cancelled, the debit reversed)
CAMPAIGN_BUDGET_MINOR = 10_000_000_00
# A TOTP code is good once (identity refuses a step already used): one login per 30 s step.
TOTP_STEP_S = 30
TERMINAL = ("completed", "failed", "rejected", "cancelled")
# The customers' and businesses' balances (cash and promo), the fees, and the platform's two
# expenses that pay promo grants and goodwill credits (negative: what the platform gave).
BALANCES = (
    "SELECT coalesce(sum(balance) FILTER (WHERE role = 'user_wallet'), 0) AS wallets,"
    "       coalesce(sum(balance) FILTER (WHERE role = 'revenue'), 0) AS fees,"
    "       coalesce(sum(balance) FILTER (WHERE role = 'promo_expense'), 0) AS promo_expense,"
    "       coalesce(sum(balance) FILTER (WHERE role = 'goodwill_expense'), 0) AS goodwill_expense"
    " FROM ledger.accounts"
)
PROXIED = ("amqp", "saga-databases")
# What the fakes are told for a while (callbacks_for_s): the outside world misbehaving. Top-up
# notifications (both fakes' /_control/faults) repeated or delayed; the bank's transfer callbacks
# repeated, delayed or lost (bank-adapter's reconciliation asks the bank), or the transfers refused
# (the withdrawal fails and is refunded).
CALLBACK_FAULTS: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {
    "repeat": ({"duplicate": 3, "once": False}, {"duplicate_callback": 3}),
    "delay": ({"delay_s": 2.0, "once": False}, {"callback_delay_s": 2.0}),
    "reorder": ({"reorder": True, "once": False}, None),
    # Top-up notifications dropped by the fakes (never sent): topup-webhook's reconciliation,
    # run every few seconds in the campaign, asks the providers and credits them once.
    "lose": ({"drop": True, "once": False}, {"lose_callback": True}),
    "reject": (None, {"outcome": "reject", "failure_reason": "account_closed"}),
}


@dataclass(frozen=True)
class Config:
    seed: int = DEFAULT_SEED
    duration_s: float = 600.0
    customers: int = 12
    workers: int = 6
    fault_every_s: float = 6.0
    stop_for_s: float = 3.0
    # The campaign's own PostgreSQL cluster and RabbitMQ node (tests/chaos/servers.py) restarted once each.
    infrastructure: bool = True
    # The fakes' callbacks repeated, delayed, lost, and transfers refused by the bank: these of
    # CALLBACK_FAULTS (all of them by default).
    callbacks: bool = True
    callback_kinds: tuple[str, ...] = tuple(CALLBACK_FAULTS)
    callbacks_for_s: float = 10.0
    # Connections cut through a proxy (tests/faultproxy.py): every process's to RabbitMQ, and the
    # withdrawal saga's databases' (withdrawal-orchestrator's and bank-adapter's) to PostgreSQL.
    cuts: bool = True


@dataclass
class Op:
    """One request of the workload: what was sent and what came back."""

    kind: str
    key: str
    url: str
    body: dict[str, Any]
    headers_for: str  # "customer:<i>", "merchant", "stripe", "bank", "staff"
    status: int | None = None  # None: no answer
    answer: dict[str, Any] = field(default_factory=dict)
    resent: int = 0
    first_status: int | None = -1  # the first answer (-1: not sent yet; None: no answer)

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def uncertain(self) -> bool:
        return self.status is None or self.status >= 500 or self.status == 429


@dataclass
class Customer:
    username: str
    wallet: str
    number: str
    token: str = ""


@dataclass
class Fault:
    at_s: float
    kind: str  # kill, stop, postgres, rabbitmq
    target: str
    recovered_s: float | None = None


class ProxyLoop:
    """The proxies' own event loop, in a thread: every AMQP byte of the system passes through
    them, and they should not wait behind the workload's requests in the campaign's loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="chaos-proxies", daemon=True)
        self.thread.start()

    async def call(self, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


async def down_for(proxy: FaultProxy, seconds: float) -> None:
    async with proxy.down():  # open connections cut, new ones refused for a moment
        await asyncio.sleep(seconds)  # the fault itself


def schedule(rng: random.Random, config: Config) -> list[Fault]:
    """The faults and when (seconds into the workload): each kind of process killed in turn (a
    shuffled round, then another), every fourth fault a SIGSTOP instead, PostgreSQL and RabbitMQ
    restarted once each in the long run."""
    faults: list[Fault] = []
    rounds: list[str] = []
    t = config.fault_every_s
    n = 0
    while t < config.duration_s - config.fault_every_s:
        if not rounds:
            rounds = list(TARGETS)
            rng.shuffle(rounds)
        n += 1
        if n % 4 == 0:
            faults.append(Fault(t, "stop", rng.choice(TARGETS)))
        else:
            faults.append(Fault(t, "kill", rounds.pop()))
        t += config.fault_every_s * rng.uniform(0.7, 1.3)
    if config.infrastructure:
        faults.append(Fault(config.duration_s * rng.uniform(0.3, 0.45), "postgres", "postgresql"))
        faults.append(Fault(config.duration_s * rng.uniform(0.55, 0.7), "rabbitmq", "rabbitmq"))
    if config.callbacks:
        # After the servers' draws, so that adding these changes nothing of the rest.
        for target in config.callback_kinds:
            faults.append(Fault(config.duration_s * rng.uniform(0.1, 0.85), "callbacks", target))
    if config.cuts:
        for target in PROXIED:
            faults.append(Fault(config.duration_s * rng.uniform(0.1, 0.85), "cut", target))
    faults.sort(key=lambda f: f.at_s)
    return faults


class Campaign:
    def __init__(self, config: Config, databases: dict[str, str], log: Path, servers: PrivateServers) -> None:
        self.config = config
        self.databases = databases
        # The campaign's own PostgreSQL cluster and RabbitMQ node (tests/chaos/servers.py): the
        # settings of this process name them (settings_on), and so the children's environment.
        self.servers = servers
        self.env, self.ports = system_env(databases, servers.amqp_port)
        self.proxies = {
            "amqp": FaultProxy(harness.AMQP_HOST, servers.amqp_port),
            "saga-databases": FaultProxy("127.0.0.1", servers.pg_port),
        }
        self.proxy_loop = ProxyLoop()
        # A ten-minute run keeps its tokens: identity's lifetime raised for the campaign.
        self.env["HIWALLET_IDENTITY_ACCESS_TOKEN_LIFETIME_S"] = "3600"
        # A lost bank callback is found by bank-adapter's reconciliation (asking the bank about
        # transfers pending too long): in seconds here, so that the run settles.
        self.env["HIWALLET_BANK_RECONCILE_INTERVAL_S"] = "2"
        self.env["HIWALLET_BANK_RECONCILE_STALE_AFTER_S"] = "5"
        # A lost top-up notification is found by topup-webhook's reconciliation (asking the
        # providers what they took in the window): every few seconds here, over the run's window.
        self.env["HIWALLET_TOPUP_RECONCILE_INTERVAL_S"] = "5"
        self.env["HIWALLET_TOPUP_RECONCILE_WINDOW_S"] = str(int(config.duration_s) + 900)
        # Reviewed withdrawals: a share of the workload's waits for staff.
        self.env["HIWALLET_WITHDRAWAL_REVIEW_ABOVE_MINOR"] = str(REVIEW_ABOVE_MINOR)
        # One employee (the demo administrator) credits all the goodwill of the run: its daily
        # ceiling raised (each credit stays under the second-employee threshold, 500.00).
        self.env["HIWALLET_WALLET_API_GOODWILL_DAILY_CEILING_MINOR"] = str(10_000_000_00)
        self.log = log
        self.out: Output | None = None
        self.customers: list[Customer] = []
        self.merchant_token = ""
        self.staff_token = ""
        self.staff_steps: set[int] = set()
        self.staff_lock = asyncio.Lock()
        self.campaign_id = ""
        self.http: httpx.AsyncClient | None = None
        self.shop_number = ""
        self.shop_wallet = ""
        self.ops: list[Op] = []
        self.faults: list[Fault] = []
        self.findings: list[str] = []
        self.figures: dict[str, Any] = {}
        self.stopping = asyncio.Event()

    def url(self, name: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"

    # -- set-up ------------------------------------------------------------------------------

    async def onboarding_headers(self, http: httpx.AsyncClient) -> dict[str, str]:
        answer = await http.post(
            self.url("identity", "/realms/hiwallet/protocol/openid-connect/token"),
            auth=ONBOARDING,
            data={"grant_type": "client_credentials"},
        )
        answer.raise_for_status()
        return {"Authorization": f"Bearer {answer.json()['access_token']}"}

    async def open_customers(self, http: httpx.AsyncClient) -> None:
        admin = await self.onboarding_headers(http)
        idp = self.url("identity", "")
        for i in range(self.config.customers):
            name = f"chaos-{i}-{uuid.uuid4().hex[:8]}"
            rep = {
                "username": name,
                "email": f"{name}@chaos.hiwallet.dev",
                "enabled": True,
                "credentials": [{"type": "password", "value": PASSWORD, "temporary": False}],
            }
            made = await http.post(f"{idp}/admin/realms/hiwallet/users", json=rep, headers=admin)
            made.raise_for_status()
            users = await http.get(
                f"{idp}/admin/realms/hiwallet/users",
                params={"username": name, "exact": "true"},
                headers=admin,
            )
            opened = await http.post(
                self.url("wallet-api", "/v1/accounts/personal"),
                json={"subject": users.json()[0]["id"]},
                headers=admin,
            )
            opened.raise_for_status()
            account = opened.json()
            raised = await http.put(
                self.url("wallet-api", f"/v1/accounts/{account['id']}/tier"),
                json={"tier": "verified"},
                headers=admin,
            )
            raised.raise_for_status()
            wallet = account["wallets"][0]
            customer = Customer(name, wallet["id"], wallet["number"])
            await self.refresh(http, customer)
            self.customers.append(customer)

    async def refresh(self, http: httpx.AsyncClient, customer: Customer) -> None:
        grant = {
            "grant_type": "password",
            "client_id": "personal-mobile-api",
            "username": customer.username,
            "password": PASSWORD,
        }
        answer = await http.post(
            self.url("identity", "/realms/hiwallet/protocol/openid-connect/token"), data=grant
        )
        answer.raise_for_status()
        customer.token = answer.json()["access_token"]

    async def merchant(self, http: httpx.AsyncClient) -> None:
        answer = await http.post(
            self.url("identity", "/realms/hiwallet/protocol/openid-connect/token"),
            auth=MERCHANT,
            data={"grant_type": "client_credentials"},
        )
        answer.raise_for_status()
        self.merchant_token = answer.json()["access_token"]
        accounts = await http.get(
            self.url("business-api", "/v1/accounts"),
            headers={"Authorization": f"Bearer {self.merchant_token}"},
        )
        accounts.raise_for_status()
        wallet = accounts.json()["accounts"][0]["wallets"][0]
        self.shop_wallet, self.shop_number = wallet["id"], wallet["number"]

    async def staff_login(self) -> None:
        """A staff-realm token of the demo administrator (every permission): its password and
        a TOTP code of a time step not used before (identity refuses a step used already; up
        logged in with the current one at its start)."""
        async with self.staff_lock:  # one login at a time: each spends a step
            assert self.out is not None
            secrets = re.findall(r"TOTP secret ([A-Z2-7]+)", self.out.path.read_text())
            if not secrets:
                raise RuntimeError("no demo administrator's TOTP secret in up's output")
            totp = pyotp.TOTP(secrets[-1])
            client = StaffClient(f"http://127.0.0.1:{self.ports['staff']}/realms/hiwallet-staff")
            now = int(time.time() // TOTP_STEP_S)
            # identity accepts one step either way; the first login after up's takes the next
            last = max(self.staff_steps, default=now)
            step = max(last + 1, now - 1)
            while step > now + 1:
                await asyncio.sleep(1.0)  # the next time step: polled, at most one step long
                now = int(time.time() // TOTP_STEP_S)
            self.staff_steps.add(step)
            self.staff_token = await asyncio.to_thread(
                staff_token,
                client,
                DEMO_STAFF_EMAIL,
                DEMO_STAFF_PASSWORD,
                totp.at(step * TOTP_STEP_S),
                timeout_s=HTTP_TIMEOUT_S,
            )

    async def staff_campaign(self, http: httpx.AsyncClient) -> None:
        """The promo campaign the workload grants under (the platform's promo money)."""
        ends = datetime.now(UTC) + timedelta(days=1)
        answer = await http.post(
            self.url("wallet-api", "/v1/staff/campaigns"),
            json={
                "name": f"chaos {self.config.seed}",
                "currency": "TRY",
                "budget_minor": CAMPAIGN_BUDGET_MINOR,
                "ends_at": ends.isoformat(),
            },
            headers={"Authorization": f"Bearer {self.staff_token}", "Idempotency-Key": str(uuid.uuid4())},
        )
        answer.raise_for_status()
        self.campaign_id = answer.json()["id"]

    # -- the workload ------------------------------------------------------------------------

    def headers(self, op: Op) -> dict[str, str]:
        who = op.headers_for
        if who.startswith("customer:"):
            token = self.customers[int(who.split(":")[1])].token
        elif who == "merchant":
            token = self.merchant_token
        elif who == "bank":
            token = BANK_KEY
        elif who == "staff":
            token = self.staff_token
        else:
            return {"Idempotency-Key": op.key}
        return {"Authorization": f"Bearer {token}", "Idempotency-Key": op.key}

    async def send(self, http: httpx.AsyncClient, op: Op) -> None:
        try:
            if op.headers_for == "stripe":
                answer = await http.post(
                    op.url, data=op.body, auth=(STRIPE_KEY, ""), headers=self.headers(op)
                )
            else:
                answer = await http.post(op.url, json=op.body, headers=self.headers(op))
        except httpx.HTTPError:
            op.status = None
        else:
            op.status = answer.status_code
        if op.first_status == -1:
            op.first_status = op.status
        if op.status is None:
            return
        with contextlib.suppress(ValueError):
            parsed = answer.json()
            op.answer = parsed if isinstance(parsed, dict) else {}

    def next_op(self, rng: random.Random, payments: list[Op]) -> Op | None:
        kind = rng.choices(list(MIX), weights=list(MIX.values()))[0]
        i = rng.randrange(len(self.customers))
        me = self.customers[i]
        key = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        amount = rng.randint(1, 50) * 100 + rng.randint(0, 99)
        who = f"customer:{i}"
        if kind == "p2p":
            j = (i + rng.randrange(1, len(self.customers))) % len(self.customers)
            body = {
                "from_wallet": me.wallet,
                "to_wallet_number": self.customers[j].number,
                "amount": amount,
                "reference": "chaos p2p",
            }
            return Op(kind, key, self.url("personal-mobile-api", "/v1/transfers"), body, who)
        if kind == "payment":
            body = {
                "from_wallet": me.wallet,
                "to_wallet_number": self.shop_number,
                "amount": amount,
                "reference": "chaos order",
            }
            return Op(kind, key, self.url("personal-mobile-api", "/v1/transfers"), body, who)
        if kind == "refund":
            paid = [p for p in payments if p.accepted and "id" in p.answer]
            if not paid:
                return None
            original = paid[rng.randrange(len(paid))]
            payments.remove(original)
            url = self.url("business-api", f"/v1/transfers/{original.answer['id']}/refund")
            return Op(kind, key, url, {"reference": "chaos refund"}, "merchant")
        if kind == "withdrawal":
            body = {"wallet": me.wallet, "amount_minor": amount, "currency": "TRY", "destination_iban": IBAN}
            return Op(kind, key, self.url("personal-mobile-api", "/v1/withdrawals"), body, who)
        if kind == "promo":
            expires = datetime.now(UTC) + timedelta(days=30)  # no breakage within the run
            body = {"wallet": me.wallet, "amount_minor": amount, "expires_at": expires.isoformat()}
            url = self.url("wallet-api", f"/v1/staff/campaigns/{self.campaign_id}/grants")
            return Op(kind, key, url, {**body, "reference": "chaos promo"}, "staff")
        if kind == "goodwill":
            body = {"wallet": me.wallet, "amount_minor": amount, "reason": "chaos goodwill"}
            return Op(kind, key, self.url("wallet-api", "/v1/staff/goodwill-credits"), body, "staff")
        if kind == "review":
            # Which waiting withdrawal and the decision: drawn now (the seed's sequence), the
            # withdrawal picked from the review queue when sent (Campaign.review).
            decision = "release" if rng.random() < RELEASE_SHARE else "cancel"
            return Op(kind, key, decision, {"pick": rng.random()}, "staff")
        if kind == "card_topup":
            body = {"wallet": me.wallet, "amount": str(amount * 2), "currency": "try"}
            return Op(kind, key, self.url("stripe", "/v1/topups"), body, "stripe")
        body = {
            "sender_name": "Chaos Sender",
            "sender_iban": SENDER_IBAN,
            "amount_minor": amount * 2,
            "currency": "TRY",
            "reference": f"HiWallet {me.wallet}",
        }
        return Op("bank_topup", key, self.url("bank", "/v1/topups"), body, "bank")

    async def worker(self, http: httpx.AsyncClient, index: int) -> None:
        rng = random.Random(f"{self.config.seed}/worker/{index}")
        payments: list[Op] = []
        while not self.stopping.is_set():
            op = self.next_op(rng, payments)
            if op is None:
                continue
            if op.kind == "review" and not await self.review(http, op):
                await asyncio.sleep(0.2)  # nothing waits for review (or the queue is away)
                continue
            await self.send(http, op)
            self.ops.append(op)
            if op.kind == "payment":
                payments.append(op)
            if op.status == 401 and op.headers_for.startswith("customer:"):
                # A token refused (identity restarted with new keys?): fetch another, go on.
                with contextlib.suppress(httpx.HTTPError):
                    await self.refresh(http, self.customers[int(op.headers_for.split(":")[1])])
            if op.status == 401 and op.headers_for == "staff":
                with contextlib.suppress(httpx.HTTPError, RuntimeError):
                    await self.staff_login()
            if op.uncertain:
                # The door is away: a breath before the next request, not a synchronisation.
                await asyncio.sleep(0.2)

    async def under_review(self, http: httpx.AsyncClient) -> list[str]:
        """The ids of the withdrawals waiting for review (the oldest first page)."""
        try:
            answer = await http.get(
                self.url("withdrawal-orchestrator", "/v1/staff/withdrawals"),
                params={"status": "under_review", "limit": "50"},
                headers={"Authorization": f"Bearer {self.staff_token}"},
            )
        except httpx.HTTPError:
            return []
        if answer.status_code == 401:
            with contextlib.suppress(httpx.HTTPError, RuntimeError):
                await self.staff_login()
        if answer.status_code != 200:
            return []
        return [w["id"] for w in answer.json()["withdrawals"]]

    async def review(self, http: httpx.AsyncClient, op: Op) -> bool:
        """The review ``op`` made real: one waiting withdrawal picked, its decision's URL. False
        when none waits."""
        waiting = await self.under_review(http)
        if not waiting:
            return False
        chosen = waiting[min(len(waiting) - 1, int(op.body["pick"] * len(waiting)))]
        decision = op.url
        op.url = self.url("withdrawal-orchestrator", f"/v1/staff/withdrawals/{chosen}/{decision}")
        op.body = {}
        return True

    # -- the faults --------------------------------------------------------------------------

    def pid(self, child: str) -> int | None:
        assert self.out is not None
        pids = self.out.pids("child started", child)
        return pids[-1] if pids else None

    def port_of(self, child: str) -> int:
        return self.ports["staff" if child == "identity-staff" else child]

    async def recovered(self, child: str, old_pid: int) -> bool:
        assert self.out is not None
        pids = self.out.pids("child started", child)
        return bool(pids and pids[-1] != old_pid and await asyncio.to_thread(ready, self.port_of(child)))

    async def inflict(self, fault: Fault) -> None:
        began = time.monotonic()
        print(f"[chaos] {fault.at_s:6.1f}s {fault.kind} {fault.target}", flush=True)
        if fault.kind == "kill":
            pid = self.pid(fault.target)
            if pid is None:
                self.findings.append(f"no pid for {fault.target}")
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            await harness.until(
                lambda: self.recovered(fault.target, pid),
                RECOVER_TIMEOUT_S,
                f"{fault.target} back after kill -9",
                interval_s=0.1,
            )
        elif fault.kind == "stop":
            pid = self.pid(fault.target)
            if pid is None:
                return
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return  # gone already (another fault's kill): nothing to stop
            try:
                await asyncio.sleep(self.config.stop_for_s)  # the fault itself: stopped for a moment
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            await harness.until(
                lambda: asyncio.to_thread(ready, self.port_of(fault.target)),
                RECOVER_TIMEOUT_S,
                f"{fault.target} ready after SIGCONT",
                interval_s=0.1,
            )
        elif fault.kind == "callbacks":
            topups, transfers = CALLBACK_FAULTS[fault.target]
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as http:
                for fake in ("stripe", "bank"):
                    if topups is not None:
                        (await http.post(self.url(fake, "/_control/faults"), json=topups)).raise_for_status()
                if transfers is not None:
                    (
                        await http.post(self.url("bank", "/_control/transfers"), json=transfers)
                    ).raise_for_status()
                try:
                    await asyncio.sleep(self.config.callbacks_for_s)  # the fault itself: for a while
                finally:
                    for fake in ("stripe", "bank"):
                        await http.delete(self.url(fake, "/_control/faults"))
                    await http.delete(self.url("bank", "/_control/transfers"))
            return
        elif fault.kind == "cut":
            await self.proxy_loop.call(down_for(self.proxies[fault.target], self.config.stop_for_s))
            await harness.until(
                lambda: self.all_ready(),
                RECOVER_TIMEOUT_S,
                f"all ready after the cut of {fault.target}",
                interval_s=0.2,
            )
        elif fault.kind == "postgres":
            # The campaign's own cluster (never the shared one): every connection cut, the
            # server down while it stops and starts (pg_ctl restart, fast shutdown).
            await command(*self.servers.pg_restart())
            await harness.until(
                lambda: self.all_ready(), RECOVER_TIMEOUT_S, "all ready after PostgreSQL", interval_s=0.2
            )
        elif fault.kind == "rabbitmq":
            # The campaign's own node: the broker application stopped (every connection closed,
            # the durable queues and their persistent messages kept on disk) and started again.
            await command(*self.servers.rabbitmqctl("stop_app"))
            await command(*self.servers.rabbitmqctl("start_app"))
            await harness.until(
                lambda: self.all_ready(), RECOVER_TIMEOUT_S, "all ready after RabbitMQ", interval_s=0.2
            )
        fault.recovered_s = time.monotonic() - began

    async def all_ready(self) -> bool:
        checks = await asyncio.gather(*(asyncio.to_thread(ready, self.port_of(c)) for c in TARGETS))
        return all(checks)

    async def scheduler(self, faults: list[Fault], started: float) -> None:
        """Each fault at its offset, on its own (a slow recovery does not push the next fault
        back, so the schedule is the seed's); returns when all have recovered."""

        async def one(fault: Fault) -> None:
            wait_s = fault.at_s - (time.monotonic() - started)
            if wait_s > 0:
                await asyncio.sleep(wait_s)  # the schedule's clock
            try:
                await self.inflict(fault)
            except (AssertionError, RuntimeError) as e:
                self.findings.append(f"{fault.kind} {fault.target}: {e}")
            self.faults.append(fault)

        await asyncio.gather(*(one(f) for f in faults))

    # -- the end: settle and check -------------------------------------------------------------

    async def resolve(self, http: httpx.AsyncClient) -> None:
        """Every request that got no answer or a 5xx is sent again with the same key and body
        until it has a definite answer (2xx: done; 4xx: refused)."""
        for op in self.ops:
            if not op.uncertain:
                continue

            async def definite(op: Op = op) -> bool:
                op.resent += 1
                if op.headers_for.startswith("customer:"):
                    with contextlib.suppress(httpx.HTTPError):
                        await self.refresh(http, self.customers[int(op.headers_for.split(":")[1])])
                await self.send(http, op)
                return not op.uncertain

            await harness.until(definite, 60, f"a definite answer to {op.kind} {op.key}", interval_s=0.5)

    async def settled(self) -> bool:
        unsent = 0
        for key in ("wallet", "topup", "withdrawal", "bank"):
            async with pgtemplate.owner_connection(self.databases[key]) as conn:
                tables = await conn.fetch(
                    "SELECT table_schema, table_name FROM information_schema.columns"
                    " WHERE column_name = 'sent_at' AND table_name LIKE '%outbox%'"
                )
                for t in tables:
                    unsent += await conn.fetchval(
                        f'SELECT count(*) FROM "{t["table_schema"]}"."{t["table_name"]}"'
                        " WHERE sent_at IS NULL"
                    )
        if unsent:
            return False
        queues = await self.queues()
        if any(n for name, n in queues.items() if not name.endswith(".dead")):
            return False
        async with pgtemplate.owner_connection(self.databases["withdrawal"]) as conn:
            open_sagas = await conn.fetchval(
                "SELECT count(*) FROM withdrawal.sagas WHERE NOT state = ANY($1::text[])", list(TERMINAL)
            )
        if open_sagas:
            await self.decide_waiting()
            return False
        credited = await self.topups_in_ledger()
        return credited[0] >= sum(1 for op in self.ops if op.kind.endswith("topup") and op.accepted)

    async def decide_waiting(self) -> None:
        """At the end, the withdrawals still waiting for review released (each a request of
        the workload's, sent until it has a definite answer): no saga is left waiting on a person."""
        assert self.http is not None
        for withdrawal in await self.under_review(self.http):
            url = self.url("withdrawal-orchestrator", f"/v1/staff/withdrawals/{withdrawal}/release")
            op = Op("review", str(uuid.uuid4()), url, {}, "staff")
            await self.send(self.http, op)
            self.ops.append(op)

    async def queues(self) -> dict[str, int]:
        proc = await asyncio.create_subprocess_exec(
            *self.servers.rabbitmqctl("-q", "list_queues"),
            "-p",
            self.databases["vhost"],
            "name",
            "messages",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        found: dict[str, int] = {}
        for line in out.decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                found[parts[0]] = int(parts[1])
        return found

    async def topups_in_ledger(self) -> tuple[int, int]:
        wallets = [f"{c.wallet}:cash" for c in self.customers]
        async with pgtemplate.owner_connection(self.databases["wallet"]) as conn:
            row = await conn.fetchrow(
                "SELECT count(*) AS n, coalesce(sum(amount), 0) AS total FROM ledger.lines"
                " WHERE type = 'topup' AND account_id = ANY($1::text[])",
                wallets,
            )
        return int(row["n"]), int(row["total"])

    async def check(self, http: httpx.AsyncClient, before: dict[str, int]) -> None:
        ops = Counter((op.kind, "accepted" if op.accepted else f"refused {op.status}") for op in self.ops)
        wallet_db = self.databases["wallet"]
        async with pgtemplate.owner_connection(wallet_db) as conn:
            # Exactly once: each accepted transfer's id is one ledger transaction, and there
            # are as many transfer transactions from the customers as accepted requests.
            moved = [op for op in self.ops if op.kind in ("p2p", "payment") and op.accepted]
            ids = [op.answer.get("id") for op in moved]
            if len(set(ids)) != len(ids):
                self.findings.append("two accepted transfers answered with the same id")
            found = await conn.fetchval(
                "SELECT count(DISTINCT id) FROM ledger.transactions WHERE id = ANY($1::text[])", ids
            )
            if found != len(set(ids)):
                self.findings.append(f"{len(set(ids)) - found} accepted transfers not in the ledger")
            refunds = [op for op in self.ops if op.kind == "refund" and op.accepted]
            by_type = {
                r["type"]: int(r["n"])
                for r in await conn.fetch(
                    "SELECT t.type::text AS type, count(DISTINCT t.id) AS n FROM ledger.transactions t"
                    "  LEFT JOIN ledger.transactions o ON o.id = t.refund_of"
                    " WHERE t.type <> 'refund' OR o.type IN ('p2p', 'payment') GROUP BY t.type"
                )
            }
            posted = by_type.get("p2p", 0) + by_type.get("payment", 0) - before["transfers"]
            if posted != len(moved):
                self.findings.append(f"{posted} transfers in the ledger for {len(moved)} accepted")
            if by_type.get("refund", 0) - before["refunds"] != len(refunds):
                self.findings.append(
                    f"{by_type.get('refund', 0) - before['refunds']} refunds for {len(refunds)} accepted"
                )
            # Promo grants and goodwill credits: each accepted one a ledger transaction, once.
            promos = [op for op in self.ops if op.kind == "promo" and op.accepted]
            goodwill = [op for op in self.ops if op.kind == "goodwill" and op.accepted]
            if pending := [op for op in goodwill if op.status != 201]:
                self.findings.append(f"{len(pending)} goodwill credits not posted at once (under 500.00)")
            staff_ids = [op.answer.get("id") for op in promos] + [
                op.answer.get("transaction_id") for op in goodwill
            ]
            found = await conn.fetchval(
                "SELECT count(DISTINCT id) FROM ledger.transactions WHERE id = ANY($1::text[])", staff_ids
            )
            if found != len(staff_ids) or len(set(staff_ids)) != len(staff_ids):
                self.findings.append(
                    f"{found} ledger transactions for {len(staff_ids)} promo and goodwill answers"
                )
            for label, done, tx_type, key in (
                ("promo grants", promos, "promo_grant", "promos"),
                ("goodwill credits", goodwill, "goodwill", "goodwill"),
            ):
                in_ledger = by_type.get(tx_type, 0) - before[key]
                if in_ledger != len(done):
                    self.findings.append(f"{in_ledger} {label} in the ledger for {len(done)} accepted")
            balances = await conn.fetchrow(BALANCES)
        granted = sum(int(op.body["amount_minor"]) for op in promos)
        goodwill_in = sum(int(op.body["amount_minor"]) for op in goodwill)
        # Top-ups: what the fakes accepted is what the ledger credited, once.
        accepted_in = [op for op in self.ops if op.kind.endswith("topup") and op.accepted]
        money_in = sum(int(op.body.get("amount_minor") or op.body["amount"]) for op in accepted_in)
        n_in, credited = await self.topups_in_ledger()
        n_in -= before["topups_n"]
        credited -= before["topups"]
        if (n_in, credited) != (len(accepted_in), money_in):
            self.findings.append(
                f"top-ups: {n_in} credited ({credited}) for {len(accepted_in)} accepted ({money_in})"
            )
        # Withdrawals: every accepted one a saga, finished; what bank-fake paid out is what went out.
        asked = {op.answer["id"] for op in self.ops if op.kind == "withdrawal" and op.accepted}
        async with pgtemplate.owner_connection(self.databases["withdrawal"]) as conn:
            sagas = {
                r["id"]: r for r in await conn.fetch("SELECT id, state, amount_minor FROM withdrawal.sagas")
            }
        missing = asked - set(sagas)
        if missing:
            self.findings.append(f"{len(missing)} accepted withdrawals without a saga")
        extra = set(sagas) - asked - before["sagas"]
        if extra:
            self.findings.append(f"{len(extra)} sagas nobody's accepted request made: {sorted(extra)[:3]}")
        unfinished = [s for s in sagas.values() if s["state"] not in TERMINAL]
        if unfinished:
            self.findings.append(f"{len(unfinished)} sagas unfinished")
        states = Counter(s["state"] for i, s in sagas.items() if i in asked)
        # Reviews: each withdrawal decided once; a cancelled one is cancelled, a released one
        # went to the bank (completed, or failed by it and refunded).
        decisions: dict[str, list[str]] = defaultdict(list)
        for op in self.ops:
            if op.kind == "review" and op.accepted:
                withdrawal, decision = op.url.split("/")[-2:]
                decisions[withdrawal].append(decision)
        for withdrawal, made in decisions.items():
            state = sagas[withdrawal]["state"] if withdrawal in sagas else None
            if len(made) != 1:
                self.findings.append(f"withdrawal {withdrawal} decided {len(made)} times: {made}")
            elif made[0] == "cancel" and state != "cancelled":
                self.findings.append(f"withdrawal {withdrawal} cancelled by staff but {state}")
            elif made[0] == "release" and state not in ("completed", "failed"):
                self.findings.append(f"withdrawal {withdrawal} released by staff but {state}")
        cancelled = {i for i, s in sagas.items() if s["state"] == "cancelled"}
        if stray := cancelled - {w for w, made in decisions.items() if made == ["cancel"]}:
            self.findings.append(f"{len(stray)} withdrawals cancelled with no accepted cancel")
        reviews = Counter(made[0] for made in decisions.values())
        paid_out = 0
        cursor: str | None = None
        while True:
            params = {"status": "succeeded", "limit": "100", **({"cursor": cursor} if cursor else {})}
            page = (
                await http.get(
                    self.url("bank", "/v1/transfers"),
                    params=params,
                    headers={"Authorization": f"Bearer {BANK_KEY}"},
                )
            ).json()
            paid_out += sum(int(t["amount_minor"]) for t in page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
        completed = sum(int(s["amount_minor"]) for i, s in sagas.items() if s["state"] == "completed")
        if paid_out != completed:
            self.findings.append(f"bank-fake paid out {paid_out}, completed withdrawals {completed}")
        # Money conserved: in (the fakes' top-ups, and the platform's promo and goodwill, each
        # from its expense account) = balances + fees + out (all since the workload began).
        held = int(balances["wallets"]) - before["wallets"] + int(balances["fees"]) - before["fees"]
        promo_paid = before["promo_expense"] - int(balances["promo_expense"])
        goodwill_paid = before["goodwill_expense"] - int(balances["goodwill_expense"])
        if (promo_paid, goodwill_paid) != (granted, goodwill_in):
            self.findings.append(
                f"the platform's expenses paid promo {promo_paid} and goodwill {goodwill_paid},"
                f" for {granted} and {goodwill_in} accepted"
            )
        money_in_all = money_in + granted + goodwill_in
        if held != money_in_all - paid_out:
            self.findings.append(
                f"money not conserved: in {money_in_all} (top-ups {money_in}, promo {granted},"
                f" goodwill {goodwill_in}) - out {paid_out} = {money_in_all - paid_out},"
                f" but balances + fees moved by {held}"
            )
        # The ledger's own check.
        readonly = await db.create_pool(
            wallet_db, role=db.readonly_role("wallet"), min_size=1, max_size=1, init=init_connection
        )
        try:
            report = await LedgerStore(readonly).verify()
        finally:
            await readonly.close()
        if not report.ok:
            self.findings.extend(f"verify: {p}" for p in report.problems)
        # Dead letters: listed; each one left is a finding (none is expected).
        letters = []
        url = harness.amqp_url(self.databases["vhost"], self.servers.amqp_port)
        broker = Broker(url, client_name="chaos dead-letters")
        await broker.start()
        try:
            for queue in (TOPUPS_DEAD_LETTER_QUEUE, WITHDRAWALS_DEAD_LETTER_QUEUE):
                letters += [(queue, d) for d in await list_dead_letters(broker, queue, limit=1000)]
        finally:
            await broker.close()
        for queue, d in letters:
            self.findings.append(f"dead letter in {queue}: {d.type} {d.reason} from {d.original_routing_key}")
        recover: dict[str, list[float]] = defaultdict(list)
        for f in self.faults:
            if f.recovered_s is not None:
                recover[f"{f.kind} {f.target}" if f.kind != "stop" else "stop"].append(f.recovered_s)
        # The top-ups whose notification never arrived (dropped by a fake): recorded first by
        # topup-webhook's reconciliation, and credited once like the rest (checked above).
        async with pgtemplate.owner_connection(self.databases["topup"]) as conn:
            reconciled = await conn.fetchval(
                "SELECT count(*) FROM topup.payments WHERE routes[1] = 'reconciliation'"
            )
        self.figures.update(
            topups_found_by_reconciliation=int(reconciled),
            operations={f"{k} {o}": n for (k, o), n in sorted(ops.items())},
            first_answers={
                f"{k} {s}": n
                for (k, s), n in sorted(
                    Counter(
                        (op.kind, "no answer" if op.first_status is None else str(op.first_status))
                        for op in self.ops
                    ).items()
                )
            },
            resent=sum(1 for op in self.ops if op.resent),
            faults=dict(Counter(f.kind for f in self.faults)),
            faults_by_target=dict(sorted(Counter(f"{f.kind} {f.target}" for f in self.faults).items())),
            recovery_s={
                k: {"n": len(v), "max": round(max(v), 2), "mean": round(sum(v) / len(v), 2)}
                for k, v in sorted(recover.items())
            },
            withdrawals=dict(states),
            reviews=dict(reviews),
            money={
                "in": money_in_all,
                "topups": money_in,
                "promo": granted,
                "goodwill": goodwill_in,
                "out": paid_out,
                "balances_and_fees": held,
                "fees": int(balances["fees"]) - before["fees"],
            },
            verify={"ok": report.ok, "transactions": report.transactions, "lines": report.lines},
            dead_letters=len(letters),
            findings=self.findings,
        )

    async def snapshot(self) -> dict[str, Any]:
        async with pgtemplate.owner_connection(self.databases["wallet"]) as conn:
            by_type = {
                r["type"]: int(r["n"])
                for r in await conn.fetch(
                    "SELECT t.type::text AS type, count(DISTINCT t.id) AS n FROM ledger.transactions t"
                    "  LEFT JOIN ledger.transactions o ON o.id = t.refund_of"
                    " WHERE t.type <> 'refund' OR o.type IN ('p2p', 'payment') GROUP BY t.type"
                )
            }
            balances = await conn.fetchrow(BALANCES)
        async with pgtemplate.owner_connection(self.databases["withdrawal"]) as conn:
            sagas = {r["id"] for r in await conn.fetch("SELECT id FROM withdrawal.sagas")}
        n, total = await self.topups_in_ledger()
        return {
            "transfers": by_type.get("p2p", 0) + by_type.get("payment", 0),
            "refunds": by_type.get("refund", 0),
            "wallets": int(balances["wallets"]),
            "fees": int(balances["fees"]),
            "promo_expense": int(balances["promo_expense"]),
            "goodwill_expense": int(balances["goodwill_expense"]),
            "promos": by_type.get("promo_grant", 0),
            "goodwill": by_type.get("goodwill", 0),
            "topups_n": n,
            "topups": total,
            "sagas": sagas,
        }

    async def run(self) -> dict[str, Any]:
        rng = random.Random(self.config.seed)
        faults = schedule(rng, self.config)
        print(
            f"[chaos] seed {self.config.seed}: {len(faults)} faults over {self.config.duration_s:.0f} s",
            flush=True,
        )
        if self.config.cuts:
            for proxy in self.proxies.values():
                await self.proxy_loop.call(proxy.start())
            self.env["HIWALLET_AMQP_URL"] = harness.amqp_url(
                self.databases["vhost"], self.proxies["amqp"].port
            )
            through = f"postgresql://127.0.0.1:{self.proxies['saga-databases'].port}"
            self.env["HIWALLET_DATABASE_SERVERS"] = json.dumps(
                {self.databases[key]: through for key in ("withdrawal", "bank")}
            )
            # Their owner (up's set-up) as the cluster's superuser, straight to it: the URL
            # above names no user, and the private cluster has no role named after the login.
            self.env["HIWALLET_MIGRATE_DATABASE_SERVERS"] = json.dumps(
                {self.databases[key]: self.servers.owner_url for key in ("withdrawal", "bank")}
            )
        try:
            return await self._run(faults)
        finally:
            if self.config.cuts:
                for proxy in self.proxies.values():
                    await self.proxy_loop.call(proxy.close())
            self.proxy_loop.stop()

    async def _run(self, faults: list[Fault]) -> dict[str, Any]:
        with running_up(self.env, self.log, graceful=False) as (proc, out):
            self.out = out
            setup_began = time.monotonic()
            await asyncio.to_thread(wait_running, proc, out, 180)
            limits = httpx.Limits(max_connections=self.config.workers * 2 + 8)
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, limits=limits) as http:
                await self.open_customers(http)
                await self.merchant(http)
                await self.staff_login()
                await self.staff_campaign(http)
                self.http = http
                before = await self.snapshot()
                # Each customer's opening balance: a card top-up, part of the workload.
                for i, c in enumerate(self.customers):
                    op = Op(
                        "card_topup",
                        f"chaos-open-{self.config.seed}-{i}",
                        self.url("stripe", "/v1/topups"),
                        {"wallet": c.wallet, "amount": str(OPENING_MINOR), "currency": "try"},
                        "stripe",
                    )
                    await self.send(http, op)
                    self.ops.append(op)
                await harness.until(self.settled, 60, "the opening top-ups credited", interval_s=0.2)
                self.figures["setup_s"] = round(time.monotonic() - setup_began, 1)
                started = time.monotonic()
                workers = [asyncio.create_task(self.worker(http, i)) for i in range(self.config.workers)]
                try:
                    faulting = asyncio.create_task(self.scheduler(faults, started))
                    await asyncio.sleep(self.config.duration_s)  # the workload's length
                finally:
                    self.stopping.set()
                    await asyncio.gather(*workers, return_exceptions=True)
                self.figures["workload_s"] = round(time.monotonic() - started, 1)
                # The last faults' processes back (each waits on its own recovery, bounded).
                await asyncio.wait_for(faulting, RECOVER_TIMEOUT_S * 2)
                settle_began = time.monotonic()
                await harness.until(
                    lambda: self.all_ready(), RECOVER_TIMEOUT_S, "every process ready", interval_s=0.2
                )
                await self.resolve(http)
                await harness.until(self.settled, SETTLE_TIMEOUT_S, "the system settled", interval_s=0.5)
                self.figures["settle_s"] = round(time.monotonic() - settle_began, 1)
                await self.check(http, before)
            self.figures["seed"] = self.config.seed
            self.figures["restarts"] = {c: len(out.pids("child started", c)) - 1 for c in TARGETS}
        return self.figures


async def command(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.returncode} {out.decode()[-500:]}")


async def run(config: Config, log: Path) -> dict[str, Any]:
    """One campaign on fresh databases; its figures (``findings`` empty when all held)."""
    servers = await asyncio.to_thread(ensure)
    with settings_on(servers):
        async with fresh_databases(servers.node) as databases:
            return await Campaign(config, databases, log, servers).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--duration", type=float, default=600.0, help="the workload's seconds")
    parser.add_argument("--customers", type=int, default=12)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--fault-every", type=float, default=6.0)
    parser.add_argument("--no-infrastructure", action="store_true", help="no PostgreSQL or RabbitMQ restart")
    parser.add_argument("--no-callbacks", action="store_true", help="the fakes' callbacks left alone")
    parser.add_argument(
        "--no-cuts", action="store_true", help="no proxy between the processes and the servers"
    )
    parser.add_argument("--report", type=Path, default=Path("chaos-report.json"))
    args = parser.parse_args(argv)
    config = Config(
        seed=args.seed,
        duration_s=args.duration,
        customers=args.customers,
        workers=args.workers,
        fault_every_s=args.fault_every,
        infrastructure=not args.no_infrastructure,
        callbacks=not args.no_callbacks,
        cuts=not args.no_cuts,
    )
    log = Path(tempfile.mkdtemp(prefix="hiwallet-chaos-")) / "up.log"
    print(f"[chaos] seed {config.seed} (replay: --seed {config.seed}); up's log: {log}", flush=True)
    figures = asyncio.run(run(config, log))
    text = json.dumps(figures, indent=2, default=str)
    print(text)
    args.report.write_text(text + "\n")
    return 1 if figures["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
