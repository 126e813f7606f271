"""One test's top-up system: its databases, the processes it starts, and what the test reads
back (balances, ledger lines, the topup database's records, verify).

The tests' own connections are the owner's (to read every table and to stage a fault) or, to
open wallets and post as wallet-api does, the wallet database's application role; verify runs
as its read-only role, as ``hiwallet ledger verify`` does.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from hiwallet.core import db
from hiwallet.ledger import Fees, Ledger, LedgerStore, cash_account, get_ledger_settings, init_connection
from hiwallet.wallet_api import domain
from hiwallet.wallet_api.accounts import Accounts
from hiwallet.wallet_api.service import WalletService
from hiwallet.wallet_api.settings import WalletApiSettings
from tests import pgtemplate
from tests.e2e import harness
from tests.e2e.harness import BankFake, Children, Process, StallingProxy, StripeFake
from tests.servers import free_port

# The settings each process reads (CONTRACT-10, "Settings", and the services' settings modules).
TOPUP_ENV = "HIWALLET_TOPUP_"
CONSUMER_ENV = "HIWALLET_WALLET_CONSUMER_"
STRIPE_FAKE_ENV = "STRIPE_FAKE_"
BANK_FAKE_ENV = "BANK_FAKE_"


@dataclass
class System:
    vhost: str
    topup_db: str
    wallet_db: str
    log_dir: Path
    children: Children = field(default_factory=Children)
    # One port per role, fixed for the test: a restarted process comes back where the others
    # (the fakes' webhook target, topup-webhook's provider URLs) expect it.
    ports: dict[str, int] = field(default_factory=dict)
    pool: asyncpg.Pool | None = None
    readonly: asyncpg.Pool | None = None
    ledger: Ledger | None = None
    service: WalletService | None = None

    async def open(self) -> None:
        for role in ("topup-webhook", "wallet-consumer", "stripe-fake", "bank-fake"):
            self.ports[role] = free_port()
        self.pool = await db.create_pool(
            self.wallet_db, role=db.app_role("wallet"), min_size=1, max_size=4, init=init_connection
        )
        self.readonly = await db.create_pool(
            self.wallet_db, role=db.readonly_role("wallet"), min_size=1, max_size=1, init=init_connection
        )
        store = LedgerStore(self.pool, transit_legs=get_ledger_settings().transit_legs)
        self.ledger = Ledger(store, Fees.from_settings())
        self.service = WalletService(self.pool, store, Fees.from_settings(), WalletApiSettings())

    def leaks(self) -> list[str]:
        """What the processes wrote that no log may hold (COMMON: never a body, secret, IBAN or
        name): the webhook signing secrets, a wire sender's name and IBAN."""
        needles = (
            harness.STRIPE_SECRET,
            harness.BANK_SECRET,
            harness.ROTATED_STRIPE_SECRET,
            harness.SENDER_NAME,
            harness.SENDER_IBAN,
        )
        return [f"{p.name}: {line}" for p in self.children.processes for line in p.log_holds(*needles)]

    async def close(self) -> None:
        await self.children.close()
        for pool in (self.pool, self.readonly):
            if pool is not None:
                await pool.close()

    # -- processes -------------------------------------------------------------------------------

    def base_env(self, *, amqp_port: int = harness.AMQP_PORT, db_port: int | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["HIWALLET_AMQP_URL"] = harness.amqp_url(self.vhost, amqp_port)
        if db_port is not None:
            env["HIWALLET_DATABASE_URL"] = f"postgresql://127.0.0.1:{db_port}"
        return env

    def _process(self, name: str, port: int, env: dict[str, str], ready_path: str = "/ready") -> Process:
        process = Process(name=name, port=port, env=env, log_dir=self.log_dir, ready_path=ready_path)
        self.children.processes.append(process)
        return process

    def topup_webhook(
        self, *, port: int | None = None, amqp_port: int = harness.AMQP_PORT, **settings: Any
    ) -> Process:
        port = port or self.ports["topup-webhook"]
        values = {
            "PORT": port,
            "DATABASE": self.topup_db,
            "STRIPE_URL": f"http://127.0.0.1:{self.ports['stripe-fake']}",
            "BANK_URL": f"http://127.0.0.1:{self.ports['bank-fake']}",
            **{k.upper(): v for k, v in settings.items()},
        }
        env = harness.env_of(
            self.base_env(amqp_port=amqp_port), **{TOPUP_ENV + k: v for k, v in values.items()}
        )
        return self._process("topup-webhook", port, env)

    def wallet_consumer(
        self,
        *,
        port: int | None = None,
        amqp_port: int = harness.AMQP_PORT,
        db_port: int | None = None,
        **settings: Any,
    ) -> Process:
        port = port or self.ports["wallet-consumer"]
        values = {"PORT": port, "DATABASE": self.wallet_db, **{k.upper(): v for k, v in settings.items()}}
        env = harness.env_of(
            self.base_env(amqp_port=amqp_port, db_port=db_port),
            **{CONSUMER_ENV + k: v for k, v in values.items()},
        )
        return self._process("wallet-consumer", port, env)

    def _target(self, provider: str) -> str:
        return f"http://127.0.0.1:{self.ports['topup-webhook']}/v1/webhooks/topup/{provider}"

    def _fake(self, name: str, env_prefix: str, provider: str, settings: dict[str, Any]) -> Process:
        """A fake's process notifying this system's topup-webhook, ``settings`` as its env."""
        port = self.ports[name]
        values = {
            "PORT": port,
            "WEBHOOK_URL": self._target(provider),
            **{k.upper(): v for k, v in settings.items()},
        }
        env = harness.env_of(os.environ, **{env_prefix + k: v for k, v in values.items()})
        return self._process(name, port, env, "/health")

    def stripe_fake(self, **settings: Any) -> StripeFake:
        process = self._fake("stripe-fake", STRIPE_FAKE_ENV, "stripe", settings)
        return StripeFake(process, harness.STRIPE_API_KEY)

    def bank_fake(self, **settings: Any) -> BankFake:
        process = self._fake("bank-fake", BANK_FAKE_ENV, "bank", settings)
        return BankFake(process, harness.BANK_API_KEY)

    @staticmethod
    async def start(*processes: Process) -> None:
        """Start them all at once (they import in parallel), then wait until each is ready."""
        for process in processes:
            process.start()
        await asyncio.gather(*(p.wait_ready() for p in processes))

    async def cli(self, *args: str, timeout_s: float = 60.0) -> tuple[int, str]:
        """``hiwallet <args>`` as an operator runs it against this system (the wallet-consumer's
        database, this vhost): its exit status and output (rich folds long lines; callers search
        the output with the line breaks taken out)."""
        env = harness.env_of(
            self.base_env(),
            **{CONSUMER_ENV + "DATABASE": self.wallet_db, TOPUP_ENV + "DATABASE": self.topup_db},
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

    async def proxy(self, port: int) -> StallingProxy:
        proxy = StallingProxy("127.0.0.1", port)
        await proxy.start()
        self.children.proxies.append(proxy)
        return proxy

    # -- wallets and the ledger ------------------------------------------------------------------

    async def open_wallet(self) -> str:
        """A business account's TRY wallet (opened as an operator does: no identity needed)."""
        assert self.service is not None
        account = await self.service.open_business("E2E Kahve", operator="operator:e2e")
        wallet_id: str = account["wallets"][0]["id"]
        return wallet_id

    async def open_wallet_without_card_clearing(self, currency: str) -> str:
        """A business wallet in ``currency`` opened while only the bank's clearing accounts exist
        in that currency (a currency the card provider was never set up for): a card top-up to it
        cannot be posted until the card provider's accounts are opened."""
        assert self.service is not None and self.pool is not None
        bank_only = LedgerStore(self.pool, providers=["bank"])
        accounts = Accounts(self.pool, Ledger(bank_only, Fees.from_settings()), WalletApiSettings())
        business = await self.service.open_business("E2E Euro", operator="operator:e2e")
        bucket = domain.bucket_in(business["id"])
        async with self.pool.acquire() as conn, conn.transaction():
            row = await accounts._add_wallet(conn, bucket, business["id"], currency, owner=business["id"])
        return row.id

    async def open_card_clearing(self, currency: str) -> None:
        """The cause of the above fixed: every provider's clearing accounts in ``currency``."""
        assert self.pool is not None
        await LedgerStore(self.pool).ensure_system_accounts(currency)

    async def owner(self, database: str) -> asyncpg.Connection:
        return await asyncpg.connect(db.owner_dsn(database))

    async def cash(self, wallet: str) -> int:
        assert self.ledger is not None
        return (await self.ledger.store.wallet_balance(wallet)).cash

    async def topup_lines(self, wallet: str) -> list[asyncpg.Record]:
        """The wallet's top-up lines, in the order posted (version)."""
        return await self.wallet_fetch(
            "SELECT l.version, l.amount, l.transaction_id, t.ref, t.actor, t.metadata"
            "  FROM ledger.lines l JOIN ledger.transactions t"
            "    ON t.id = l.transaction_id AND t.bucket = l.bucket"
            " WHERE l.account_id = $1 AND l.type = 'topup' ORDER BY l.version",
            cash_account(wallet),
        )

    async def credited(self, wallet: str, amounts: list[int], timeout_s: float = 20.0) -> None:
        """Wait until the wallet holds exactly ``amounts`` as top-ups (in any order), then check
        that nothing more arrives for a moment and that the ledger verifies."""

        async def arrived() -> bool:
            return len(await self.topup_lines(wallet)) >= len(amounts)

        await harness.until(arrived, timeout_s, f"{len(amounts)} top-up(s) in {wallet}")

        # A duplicate would be posted within the same moments as the first: watch for it over
        # the time the relay and the consumer need for one round (LISTEN/NOTIFY, prefetch 1).
        async def no_more() -> bool:
            return len(await self.topup_lines(wallet)) == len(amounts)

        await harness.stays(no_more, 0.5, f"{len(amounts)} top-up(s) in {wallet}, no more", interval_s=0.05)
        lines = await self.topup_lines(wallet)
        assert sorted(line["amount"] for line in lines) == sorted(amounts), lines
        assert await self.cash(wallet) == sum(amounts)
        await self.verify()

    async def verify(self) -> None:
        """``hiwallet ledger verify``: every balance, sum and hash chain holds."""
        assert self.readonly is not None
        store = LedgerStore(self.readonly)
        report = await store.verify()
        assert report.ok, report.problems

    # -- the topup database ----------------------------------------------------------------------

    async def topup_fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._fetch(self.topup_db, sql, *args)

    async def payments(self) -> list[asyncpg.Record]:
        return await self.topup_fetch("SELECT * FROM topup.payments ORDER BY created_at")

    async def outbox_unsent(self) -> int:
        rows = await self.topup_fetch("SELECT count(*) AS n FROM topup.outbox WHERE sent_at IS NULL")
        return int(rows[0]["n"])

    async def wallet_fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._fetch(self.wallet_db, sql, *args)

    async def _fetch(self, database: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        """One query as the database's owner, on a connection of its own."""
        async with pgtemplate.owner_connection(database) as conn:
            return list(await conn.fetch(sql, *args))
