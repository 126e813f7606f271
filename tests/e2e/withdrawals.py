"""The withdrawal saga's end-to-end system: withdrawal-orchestrator, wallet-consumer,
bank-adapter, bank-webhook and bank-fake as real processes (``hiwallet run NAME --port N``, each
configured by its environment: fresh ``hiwallet_wallet``, ``hiwallet_withdrawal`` and
``hiwallet_bank`` clones, the module's RabbitMQ virtual host), and in this process, as the
wallet-api tests run them, the identity servers (real customer tokens, which the orchestrator
verifies) and wallet-api in a thread (customers opened, tiers raised by the onboarding client,
wallets funded; the orchestrator asks it who may see a wallet).

One system per test module (starting five processes costs seconds of CPU on this machine): the
tests share its databases and processes and keep apart by their own customers and their own
destination IBANs (bank-fake's transfer rules match by IBAN). :meth:`WithdrawalSystem.heal`
runs before each test: every process that a test killed, or started with settings of its own,
is started again as the module's standard one, and bank-fake's rules are cleared.

``proxied=True`` puts a StallingProxy (harness.py) in front of RabbitMQ for each process: a
test holds what one process sends (its ack), or breaks every proxy at once (RabbitMQ restarted,
as every client sees it: connections cut, new ones refused until it is back).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import asyncpg
import httpx
import orjson
from schwifty import IBAN

from hiwallet.contracts.withdrawals import (
    BANK_QUEUE,
    ORCHESTRATOR_QUEUE,
    WALLET_QUEUE,
    WITHDRAWALS_DEAD_LETTER_QUEUE,
    WITHDRAWALS_EXCHANGE,
    command_id,
)
from hiwallet.core import db
from hiwallet.core.ids import new_id
from hiwallet.ledger import LedgerStore, get_ledger_settings, init_connection
from tests import pgtemplate
from tests.e2e import harness
from tests.e2e.harness import Children, Process, StallingProxy
from tests.identity.conftest import IdentityServer
from tests.servers import free_port
from tests.wallet_api.conftest import Customer, WalletApi, running_api

WITHDRAWAL_ENV = "HIWALLET_WITHDRAWAL_"
CONSUMER_ENV = "HIWALLET_WALLET_CONSUMER_"
BANK_ENV = "HIWALLET_BANK_"
BANK_FAKE_ENV = "BANK_FAKE_"

ORCHESTRATOR = "withdrawal-orchestrator"
WALLET_CONSUMER = "wallet-consumer"
BANK_ADAPTER = "bank-adapter"
BANK_WEBHOOK = "bank-webhook"
BANK_FAKE = "bank-fake"
ROLES = (ORCHESTRATOR, WALLET_CONSUMER, BANK_ADAPTER, BANK_WEBHOOK, BANK_FAKE)
QUEUES = (WALLET_QUEUE, BANK_QUEUE, ORCHESTRATOR_QUEUE, WITHDRAWALS_DEAD_LETTER_QUEUE)
TERMINAL = ("completed", "failed", "rejected", "cancelled")
FEE_MINOR = get_ledger_settings().withdrawal_fee_minor

# The module's standard settings (environment, without the prefix). Short where a test waits on
# it: bank reconciliation every second for transfers pending more than 5 s (the callback-lost
# test; a callback arrives within a second otherwise, so the others still see callbacks), the
# gauges every second. The stuck saga scan keeps its long default: a test that needs it starts
# the orchestrator with short intervals of its own (so no other test is rescued by it).
STANDARD: dict[str, dict[str, Any]] = {
    ORCHESTRATOR: {"relay_poll_s": 0.5, "metrics_interval_s": 1},
    WALLET_CONSUMER: {"relay_poll_s": 0.5, "outbox_metrics_interval_s": 1},
    BANK_ADAPTER: {
        "relay_poll_s": 0.5,
        "reconcile_interval_s": 1,
        "reconcile_stale_after_s": 5,
        "metrics_interval_s": 1,
        "bank_timeout_s": 5,
    },
    BANK_WEBHOOK: {},
    BANK_FAKE: {"transfer_decide_after_s": 0.3, "retry_initial_s": 0.2, "retry_max_delay_s": 1},
}


def new_iban() -> str:
    """A valid Turkish IBAN of a test's own (bank-fake's rules match by destination IBAN)."""
    account = "".join(secrets.choice("0123456789") for _ in range(16))
    return str(IBAN.generate("TR", bank_code="00061", account_code=account).compact)


def printed(iban: str) -> str:
    """The IBAN's print form (groups of four): as a customer types it."""
    return " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of a counter's or gauge's samples (``name`` with or without ``_total``; never its
    ``_created`` timestamps) whose labels include ``labels``."""
    found = 0.0
    for sample, value in samples.items():
        base = sample.partition("{")[0]
        if base in (name, f"{name}_total") and all(f'{k}="{v}"' in sample for k, v in labels.items()):
            found += value
    return found


@dataclass
class Bank:
    """bank-fake's transfers, as a test steers and reads them (its API and /_control)."""

    process: Process
    api_key: str = harness.BANK_API_KEY

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        async with httpx.AsyncClient(base_url=self.process.url, timeout=10) as http:
            response = await http.request(method, path, headers=headers, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    async def rule(self, iban: str, **behaviour: Any) -> dict[str, Any]:
        """How the transfers to ``iban`` behave (docs/fakes.md, "The transfer rules")."""
        rule: dict[str, Any] = await self._call(
            "POST", "/_control/transfers", json={"destination_iban": iban, **behaviour}
        )
        return rule

    async def clear_rules(self) -> None:
        await self._call("DELETE", "/_control/transfers")

    async def transfers(self, client_reference: str) -> list[dict[str, Any]]:
        """The transfers the bank made with this Idempotency-Key (bank-adapter's command id)."""
        answer = await self._call("GET", "/v1/transfers", params={"client_reference": client_reference})
        return list(answer["data"])

    async def decide(self, reference: str, outcome: str = "accept", **extra: Any) -> dict[str, Any]:
        decided: dict[str, Any] = await self._call(
            "POST", f"/_control/transfers/{reference}/decide", json={"outcome": outcome, **extra}
        )
        return decided


@dataclass
class WithdrawalSystem:
    vhost: str
    wallet_db: str
    withdrawal_db: str
    bank_db: str
    log_dir: Path
    api: WalletApi
    proxied: bool = False
    children: Children = field(default_factory=Children)
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    # The processes started with settings of a test's own (heal() replaces them), and more
    # instances of a role a test started (heal() stops them).
    custom: set[str] = field(default_factory=set)
    extras: list[Process] = field(default_factory=list)
    proxies: dict[str, StallingProxy] = field(default_factory=dict)
    # What no process may log: filled as the tests make IBANs and customers.
    secrets: set[str] = field(default_factory=set)
    readonly: asyncpg.Pool | None = None
    # More environment for every process (a traced module's: the collector's endpoint).
    extra_env: dict[str, str] = field(default_factory=dict)

    # -- life ----------------------------------------------------------------------------------

    async def open(self) -> None:
        for role in ROLES:
            self.ports[role] = free_port()
        if self.proxied:
            for role in (ORCHESTRATOR, WALLET_CONSUMER, BANK_ADAPTER):
                proxy = StallingProxy("127.0.0.1", harness.AMQP_PORT)
                await proxy.start()
                self.children.proxies.append(proxy)
                self.proxies[role] = proxy
        self.readonly = await db.create_pool(
            self.wallet_db, role=db.readonly_role("wallet"), min_size=1, max_size=1, init=init_connection
        )
        self.secrets.update({harness.BANK_SECRET, harness.BANK_API_KEY, self.api.onboarding_token})
        for role in ROLES:
            self.processes[role] = self._process(role)
        await self.start(*self.processes.values())

    async def close(self) -> None:
        await self.children.close()
        if self.readonly is not None:
            await self.readonly.close()

    async def heal(self) -> None:
        """Every process as the module's standard one, running and ready; no transfer rule."""
        for extra in self.extras:
            await extra.stop()
        self.extras.clear()
        replace = [r for r in ROLES if r in self.custom or not self.processes[r].alive()]
        for role in replace:
            await self.processes[role].stop()
            self.processes[role] = self._process(role)
        self.custom.clear()
        for proxy in self.proxies.values():
            proxy.upstream_stalled.set()
            proxy.accepting = True
        await self.start(*(self.processes[r] for r in replace))
        await self.bank.clear_rules()

    def exited(self) -> list[str]:
        """The processes that are not running (a test restarts what it kills: any other one
        exited on its own, and heal() would hide it)."""
        return [
            f"{p.name} ({p.proc and p.proc.returncode})\n{p.tail()}"
            for p in [*self.processes.values(), *self.extras]
            if not p.alive()
        ]

    def leaks(self) -> list[str]:
        """What the processes wrote that no log may hold: the bank's signing secret, tokens, a
        destination IBAN other than masked (in either form)."""
        needles = tuple(self.secrets)
        return [f"{p.name}: {line}" for p in self.children.processes for line in p.log_holds(*needles)]

    # -- processes -----------------------------------------------------------------------------

    @property
    def orchestrator(self) -> Process:
        return self.processes[ORCHESTRATOR]

    @property
    def consumer(self) -> Process:
        return self.processes[WALLET_CONSUMER]

    @property
    def adapter(self) -> Process:
        return self.processes[BANK_ADAPTER]

    @property
    def webhook(self) -> Process:
        return self.processes[BANK_WEBHOOK]

    @property
    def bank(self) -> Bank:
        return Bank(self.processes[BANK_FAKE])

    def _env(self, role: str, settings: dict[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        amqp_port = self.proxies[role].port if role in self.proxies else harness.AMQP_PORT
        env["HIWALLET_AMQP_URL"] = harness.amqp_url(self.vhost, amqp_port)
        port = self.ports[role]
        values: dict[str, Any]
        if role == ORCHESTRATOR:
            prefix = WITHDRAWAL_ENV
            values = {
                "port": port,
                "database": self.withdrawal_db,
                "customer_issuer_base": self.api.idp.base_url,
                "wallet_api_url": self.api.base_url,
            }
        elif role == WALLET_CONSUMER:
            prefix, values = CONSUMER_ENV, {"port": port, "database": self.wallet_db}
        elif role in (BANK_ADAPTER, BANK_WEBHOOK):
            prefix = BANK_ENV
            values = {
                "adapter_port": self.ports[BANK_ADAPTER],
                "webhook_port": self.ports[BANK_WEBHOOK],
                "database": self.bank_db,
                "bank_url": f"http://127.0.0.1:{self.ports[BANK_FAKE]}",
            }
        else:
            prefix = BANK_FAKE_ENV
            values = {
                "port": port,
                "transfer_callback_url": f"http://127.0.0.1:{self.ports[BANK_WEBHOOK]}/v1/webhooks/bank",
            }
        values.update(STANDARD[role])
        values.update(settings)
        return harness.env_of(env, **{prefix + k.upper(): v for k, v in values.items()})

    def _process(self, role: str, **settings: Any) -> Process:
        ready_path = "/health" if role == BANK_FAKE else "/ready"
        process = Process(
            name=role,
            port=self.ports[role],
            env=self._env(role, settings),
            log_dir=self.log_dir,
            ready_path=ready_path,
        )
        self.children.processes.append(process)
        return process

    async def replace(self, role: str, **settings: Any) -> Process:
        """``role`` stopped (SIGTERM) and started again with ``settings`` over the standard ones,
        until heal() (the next test) puts the standard one back."""
        await self.processes[role].stop()
        process = self.processes[role] = self._process(role, **settings)
        self.custom.add(role)
        await self.start(process)
        return process

    async def another(self, role: str) -> Process:
        """One more instance of ``role`` (its settings, a port of its own), started, until heal()."""
        model = self.processes[role]
        process = Process(
            name=role,
            port=free_port(),
            env=model.env,
            log_dir=self.log_dir,
            ready_path=model.ready_path,
        )
        self.children.processes.append(process)
        self.extras.append(process)
        await self.start(process)
        return process

    async def restart(self, role: str) -> Process:
        """A killed ``role`` started again, with its settings, on its port."""
        old = self.processes[role]
        process = self.processes[role] = Process(
            name=role, port=old.port, env=old.env, log_dir=self.log_dir, ready_path=old.ready_path
        )
        self.children.processes.append(process)
        await self.start(process)
        return process

    @staticmethod
    async def start(*processes: Process) -> None:
        for process in processes:
            process.start()
        await asyncio.gather(*(p.wait_ready() for p in processes))

    async def cli(self, *args: str, timeout_s: float = 60.0) -> tuple[int, str]:
        """``hiwallet <args>`` as an operator runs it against this system's databases."""
        env = harness.env_of(
            dict(os.environ),
            HIWALLET_AMQP_URL=harness.amqp_url(self.vhost),
            **{
                WITHDRAWAL_ENV + "DATABASE": self.withdrawal_db,
                CONSUMER_ENV + "DATABASE": self.wallet_db,
                BANK_ENV + "DATABASE": self.bank_db,
                BANK_ENV + "BANK_URL": f"http://127.0.0.1:{self.ports[BANK_FAKE]}",
            },
            COLUMNS="300",
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hiwallet.cli",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        assert proc.returncode is not None
        return proc.returncode, out.decode(errors="replace")

    # -- customers and their requests ------------------------------------------------------------

    async def customer(self, tier: str = "verified", *, funds: int = 0) -> Customer:
        customer = await self.api.customer(tier, funds=funds)
        self.secrets.update({customer.token, customer.username})
        return customer

    def iban(self) -> str:
        iban = new_iban()
        self.secrets.update({iban, printed(iban)})
        return iban

    async def request(
        self,
        who: Customer,
        amount: int,
        iban: str,
        *,
        wallet: str | None = None,
        key: str | None = None,
        currency: str = "TRY",
        traceparent: str | None = None,
    ) -> httpx.Response:
        """``POST /v1/withdrawals`` as the customer's app sends it (the IBAN as typed: print form);
        ``traceparent``: the caller's trace context (W3C), for a traced module's test."""
        body = {
            "wallet": wallet or who.wallet_id,
            "amount_minor": amount,
            "currency": currency,
            "destination_iban": printed(iban),
        }
        headers = {**who.auth, "Idempotency-Key": key or str(uuid.uuid4())}
        if traceparent is not None:
            headers["traceparent"] = traceparent
        async with httpx.AsyncClient(base_url=self.orchestrator.url, timeout=30) as http:
            return await http.post("/v1/withdrawals", json=body, headers=headers)

    async def withdraw(self, who: Customer, amount: int, iban: str, **kwargs: Any) -> str:
        """A withdrawal requested and accepted (202); its saga's id."""
        response = await self.request(who, amount, iban, **kwargs)
        assert response.status_code == 202, response.text
        saga_id: str = response.json()["id"]
        return saga_id

    async def get(self, who: Customer, path: str, **params: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.orchestrator.url, timeout=30) as http:
            return await http.get(path, headers=who.auth, params=params)

    # -- reading back --------------------------------------------------------------------------

    async def fetch(self, database: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        async with pgtemplate.owner_connection(database) as conn:
            return list(await conn.fetch(sql, *args))

    async def saga(self, saga_id: str) -> asyncpg.Record:
        [row] = await self.fetch(self.withdrawal_db, "SELECT * FROM withdrawal.sagas WHERE id = $1", saga_id)
        return row

    async def sagas_of(self, wallet: str) -> list[asyncpg.Record]:
        return await self.fetch(
            self.withdrawal_db, "SELECT * FROM withdrawal.sagas WHERE wallet = $1 ORDER BY id", wallet
        )

    async def path(self, saga_id: str) -> list[str]:
        """The states the saga went through, in order (withdrawal.transitions)."""
        rows = await self.fetch(
            self.withdrawal_db,
            "SELECT to_state FROM withdrawal.transitions WHERE saga_id = $1 ORDER BY id",
            saga_id,
        )
        return [r["to_state"] for r in rows]

    async def reaches(self, saga_id: str, state: str, timeout_s: float = 30.0) -> asyncpg.Record:
        """Wait until the saga is in ``state`` (a terminal state other than it fails at once)."""

        async def there() -> asyncpg.Record | None:
            saga = await self.saga(saga_id)
            if saga["state"] != state and saga["state"] in TERMINAL:
                raise AssertionError(f"saga {saga_id} ended {saga['state']}, not {state}: {dict(saga)}")
            return saga if saga["state"] == state else None

        saga: asyncpg.Record = await harness.until(there, timeout_s, f"saga {saga_id} {state}")
        return saga

    async def postings(self, saga_id: str) -> list[str]:
        """The ledger transactions of the saga (ref ``withdrawal:<id>``), their types in order."""
        rows = await self.fetch(
            self.wallet_db,
            "SELECT DISTINCT id, type::text AS type, posted_at FROM ledger.transactions"
            " WHERE ref = $1 ORDER BY posted_at",
            f"withdrawal:{saga_id}",
        )
        return [r["type"] for r in rows]

    async def legs(self, saga_id: str) -> dict[str, int]:
        """The saga's postings summed per ledger account (a refund nets every leg to zero)."""
        rows = await self.fetch(
            self.wallet_db,
            "SELECT l.account_id, sum(l.amount)::bigint AS amount FROM ledger.lines l"
            "  JOIN ledger.transactions t ON t.id = l.transaction_id AND t.bucket = l.bucket"
            " WHERE t.ref = $1 GROUP BY l.account_id",
            f"withdrawal:{saga_id}",
        )
        return {r["account_id"]: int(r["amount"]) for r in rows}

    async def withdrawal_limit_used(self, account_id: str) -> int:
        """What the account's withdrawals count against its monthly limit (wallet.limit_usage)."""
        rows = await self.fetch(
            self.wallet_db,
            "SELECT coalesce(sum(used), 0)::bigint AS n FROM wallet.limit_usage"
            " WHERE kind = 'withdrawal' AND account_id = $1",
            account_id,
        )
        return int(rows[0]["n"])

    async def cash(self, wallet: str) -> int:
        assert self.readonly is not None
        return int((await LedgerStore(self.readonly).wallet_balance(wallet)).cash)

    async def transfers(self, saga_id: str) -> list[asyncpg.Record]:
        """bank-adapter's record of the saga's transfers (bank.transfers)."""
        return await self.fetch(self.bank_db, "SELECT * FROM bank.transfers WHERE saga_id = $1", saga_id)

    async def inbox(self, reference: str) -> list[asyncpg.Record]:
        return await self.fetch(
            self.bank_db, "SELECT * FROM bank.inbox WHERE bank_reference = $1 ORDER BY id", reference
        )

    async def verify(self) -> None:
        """``hiwallet ledger verify``: every balance, sum and hash chain holds."""
        assert self.readonly is not None
        report = await LedgerStore(self.readonly).verify()
        assert report.ok, report.problems

    async def queues(self) -> dict[str, int]:
        return await harness.queue_depths(self.vhost, QUEUES)

    async def quiet(self, timeout_s: float = 20.0) -> None:
        """Every queue of the saga empty, no dead letter, every outbox sent."""

        async def drained() -> bool:
            depths = await self.queues()
            return all(n == 0 for n in depths.values()) and await self.unsent() == 0

        await harness.until(drained, timeout_s, "queues and outboxes drained")

    async def unsent(self) -> int:
        n = 0
        for database, table in (
            (self.withdrawal_db, "withdrawal.outbox"),
            (self.wallet_db, "wallet.outbox"),
            (self.bank_db, "bank.outbox"),
        ):
            rows = await self.fetch(database, f"SELECT count(*) AS n FROM {table} WHERE sent_at IS NULL")
            n += int(rows[0]["n"])
        return n

    async def ended(
        self, saga_id: str, state: str, wallet: str, cash: int, postings: list[str], timeout_s: float = 30.0
    ) -> asyncpg.Record:
        """The saga ended in ``state``; the wallet holds exactly ``cash``; the saga's postings
        are exactly ``postings`` (after a moment in which a duplicate would have arrived); the
        ledger verifies."""
        saga = await self.reaches(saga_id, state, timeout_s)
        await self.quiet()
        assert await self.postings(saga_id) == postings, await self.postings(saga_id)
        assert await self.cash(wallet) == cash
        assert (await self.saga(saga_id))["state"] == state
        await self.verify()
        return saga

    # -- publishing by hand (a command delivered again) ----------------------------------------

    async def publish(self, kind: str, body: dict[str, Any], saga_id: str) -> str:
        """A saga message published as the services do (type = routing key, correlation id =
        the saga), with a new message id; that id."""
        message_id = new_id()
        connection = await aio_pika.connect(harness.amqp_url(self.vhost), timeout=10)
        try:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.get_exchange(WITHDRAWALS_EXCHANGE)
            await exchange.publish(
                aio_pika.Message(
                    body=orjson.dumps(body),
                    message_id=message_id,
                    type=kind,
                    correlation_id=saga_id,
                    content_type="application/json",
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                ),
                routing_key=kind,
                mandatory=True,
            )
        finally:
            await connection.close()
        return str(message_id)


def debit_command(saga: asyncpg.Record) -> dict[str, Any]:
    """The saga's DebitForWithdrawal as the orchestrator sent it (same command id)."""
    return {
        "command_id": command_id(saga["id"], "debit"),
        "saga_id": saga["id"],
        "wallet": saga["wallet"],
        "amount_minor": saga["amount_minor"],
        "currency": saga["currency"],
        "requested_by": {"issuer": saga["requested_by_issuer"], "subject": saga["requested_by_subject"]},
    }


def settle_command(saga: asyncpg.Record) -> dict[str, Any]:
    return {
        "command_id": command_id(saga["id"], "settle"),
        "saga_id": saga["id"],
        "wallet": saga["wallet"],
        "amount_minor": saga["amount_minor"],
        "currency": saga["currency"],
        "debit_transaction_id": saga["debit_transaction_id"],
    }


def refund_command(saga: asyncpg.Record, actor: str = "system") -> dict[str, Any]:
    return {
        "command_id": command_id(saga["id"], "refund"),
        "saga_id": saga["id"],
        "wallet": saga["wallet"],
        "debit_transaction_id": saga["debit_transaction_id"],
        "actor": actor,
    }


def bank_command(saga: asyncpg.Record) -> dict[str, Any]:
    return {
        "command_id": command_id(saga["id"], "bank"),
        "saga_id": saga["id"],
        "amount_minor": saga["amount_minor"],
        "currency": saga["currency"],
        "destination_iban": saga["destination_iban"],
    }


@asynccontextmanager
async def withdrawal_system(
    vhost: str,
    templates: tuple[str, str, str],
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
    log_dir: Path,
    *,
    proxied: bool = False,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[WithdrawalSystem]:
    """A module's system: fresh clones of the wallet, withdrawal and bank templates, wallet-api
    in a thread, the five processes started (all dropped and stopped at the end)."""
    async with AsyncExitStack() as stack:
        wallet_db, withdrawal_db, bank_db = [
            await stack.enter_async_context(pgtemplate.temporary(pgtemplate.clone(t))) for t in templates
        ]
        api = await stack.enter_async_context(running_api(wallet_db, customer_idp, staff_idp))
        system = WithdrawalSystem(
            vhost=vhost,
            wallet_db=wallet_db,
            withdrawal_db=withdrawal_db,
            bank_db=bank_db,
            log_dir=log_dir,
            api=api,
            proxied=proxied,
            extra_env=dict(extra_env or {}),
        )
        stack.push_async_callback(system.close)
        await system.open()
        yield system
