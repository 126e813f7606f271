"""The bank-adapter process: core's Consumer on ``hiwallet.withdrawals.bank`` (StartBankTransfer,
handler.TransferHandler), the relay of bank.outbox (the outcomes bank-webhook, the handler and
the reconciliation record, to ``hiwallet.withdrawals``), the bank reconciliation (a PeriodicJob),
and an HTTP app for ``/health``, ``/ready`` (database, broker, consumer) and ``/metrics`` only
(port 9102).

Built by core.service: at start it connects to PostgreSQL as the bank database's application
role; as soon as RabbitMQ answers it declares the whole withdrawals topology
(contracts.withdrawals.withdrawals_topology(): every process of the saga does, whoever starts
first), then consumes and relays. At stop it takes no new command, finishes the one in hand (its
bank call included, within stop_timeout_s), and closes; a command it could not finish is
redelivered, and the bank's idempotency key makes that harmless.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import httpx
import structlog
from fastapi import FastAPI

from hiwallet.bank.client import BankClient, BankUnavailable
from hiwallet.bank.handler import CONSUMER_NAME, TransferHandler
from hiwallet.bank.metrics import AdapterMetrics
from hiwallet.bank.pool import database_spec
from hiwallet.bank.reconcile import Reconciler
from hiwallet.bank.settings import BankSettings, get_bank_settings
from hiwallet.bank.statements import StatementImporter
from hiwallet.bank.store import OUTBOX_CHANNEL, OUTBOX_TABLE, BankStore, StoreUnavailable
from hiwallet.contracts.events import events_topology
from hiwallet.contracts.withdrawals import withdrawals_topology
from hiwallet.core.broker import Topology
from hiwallet.core.consumer import Consumer, ConsumerMetrics, batched_or_concurrent
from hiwallet.core.http import serve, settle_heap_once_started
from hiwallet.core.jobs import PeriodicJob, in_batches
from hiwallet.core.logging import configure_logging
from hiwallet.core.messaging import Messaging
from hiwallet.core.outbox import OutboxMetrics, RelayHint, purge_sent
from hiwallet.core.service import OutboxSpec, Runtime, ServiceSpec, build_app
from hiwallet.core.settings import Settings, refuse_insecure_start

log = structlog.get_logger(__name__)

SERVICE = "bank-adapter"
PROCESSED_TABLE = "bank.processed_events"
# Advisory lock keys in hiwallet_bank (locks are per database): one relay, one reconciliation
# round at a time, across every instance.
RELAY_LOCK_KEY = 0x6877_6272  # "hwbr"
RECONCILE_LOCK_KEY = 0x6877_6263  # "hwbc"
RETENTION_LOCK_KEY = 0x6877_6264  # "hwbd"
STATEMENT_LOCK_KEY = 0x6877_6273  # "hwbs"
# The outbox this service's relay publishes (core.service.Runtime.outbox_relay).
OUTBOX = OutboxSpec(OUTBOX_TABLE, OUTBOX_CHANNEL, RELAY_LOCK_KEY)


def topology_of(settings: BankSettings) -> Topology:
    """What bank-adapter declares: contracts.withdrawals.withdrawals_topology() with the default
    settings, and contracts.events.events_topology() (the statements' SettlementReported)."""
    return (
        withdrawals_topology(
            exchange=settings.exchange,
            dead_letter_exchange=settings.dead_letter_exchange,
            dead_letter_key=settings.dead_letter_key,
            dead_letter_queue=settings.dead_letter_queue,
        )
        + events_topology()
    )


def declared_topology() -> Topology:
    """What the process declares with the environment's settings (the deployment registry)."""
    return topology_of(get_bank_settings())


def statement_client(settings: BankSettings) -> httpx.AsyncClient:
    """The bank's API for its statements: its key, a timeout on everything."""
    return httpx.AsyncClient(
        base_url=settings.bank_url,
        headers={"authorization": f"Bearer {settings.bank_api_key.get_secret_value()}"},
        timeout=httpx.Timeout(settings.bank_timeout_s),
    )


def statement_job(
    run: Callable[[], Awaitable[int | None]],
    settings: BankSettings,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    """The statements' import (``run``: StatementImporter.run), one round at a time across
    instances and the operator's command, the first one interval after the start."""
    return PeriodicJob("bank-statements", settings.statement_interval_s, STATEMENT_LOCK_KEY, run, connect)


def reconcile_job(
    run: Callable[[], Awaitable[int | None]],
    settings: BankSettings,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    """The reconciliation's rounds (``run``: Reconciler.run), one at a time across instances.
    A round asks the bank once per transfer: bounded by the batch, and by its own timeout (at
    most one interval, and never more than an hour)."""
    return PeriodicJob(
        "bank-reconcile",
        settings.reconcile_interval_s,
        RECONCILE_LOCK_KEY,
        run,
        connect,
        timeout_s=min(settings.reconcile_interval_s, 3_600.0),
    )


def retention_job(
    store: BankStore,
    settings: BankSettings,
    metrics: AdapterMetrics,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    """Applied callbacks and sent outbox rows older than the retention, in bounded batches, one
    instance a round; how many callbacks a round deleted."""

    async def purge() -> int:
        async def inbox_batch() -> int:
            count = await store.purge_inbox(settings.retention_h, settings.retention_batch)
            metrics.inbox_purged.inc(count)
            return count

        purged = await in_batches(
            inbox_batch, batch=settings.retention_batch, max_batches=settings.retention_max_batches
        )
        older_than_s = settings.retention_h * 3_600.0
        async with store.pool.acquire() as conn:
            await in_batches(
                lambda: purge_sent(conn, OUTBOX_TABLE, older_than_s, settings.retention_batch),
                batch=settings.retention_batch,
                max_batches=settings.retention_max_batches,
            )
        return purged

    return PeriodicJob("bank-retention", settings.retention_interval_s, RETENTION_LOCK_KEY, purge, connect)


def service_spec(
    settings: BankSettings,
    topology: Topology,
    *,
    bank_transport: httpx.AsyncBaseTransport | None = None,
    reconcile: bool = True,
) -> ServiceSpec:
    """bank-adapter, declared: the bank database, the withdrawals topology, and in ``setup`` the
    bank's client, the consumer of StartBankTransfer, the relay of bank.outbox, the
    reconciliation, the retention and the gauges."""

    async def setup(rt: Runtime) -> None:
        app, pool = rt.app, rt.db
        registry = app.state.metrics_registry
        consumer_metrics = ConsumerMetrics(registry)
        outbox_metrics = OutboxMetrics(registry)
        metrics = app.state.bank_metrics = AdapterMetrics(registry)
        bank = BankClient.from_settings(settings, bank_transport)
        rt.close(bank.aclose)
        # What this process commits wakes its own relay directly once the relay leads (set
        # below), else the leader elsewhere by one NOTIFY (bank.outbox has no trigger: 0003).
        hint = app.state.relay_hint = RelayHint(pool, OUTBOX_CHANNEL)
        rt.close(hint.aclose)
        store = app.state.store = BankStore(pool, settings.exchange, on_committed=hint.committed)
        reconciler = app.state.reconciler = Reconciler(
            store,
            bank,
            metrics,
            stale_after_s=settings.reconcile_stale_after_s,
            batch=settings.reconcile_batch,
        )
        handler = TransferHandler(store, bank, metrics)
        app.state.consumer = rt.consumer(
            "consumer",
            Consumer(
                broker=rt.bus,
                pool=pool,
                queues=[settings.queue],
                consumer_name=CONSUMER_NAME,
                handler=handler,
                dead_letter_exchange=settings.dead_letter_exchange,
                dead_letter_key=settings.dead_letter_key,
                max_attempts=settings.max_attempts,
                metrics=consumer_metrics,
                # the bank away, or our database: the command waits, nothing dead-lettered
                transient_errors=(BankUnavailable, StoreUnavailable),
                table=PROCESSED_TABLE,
                **batched_or_concurrent(
                    handler.batch, settings.consumer_batch, settings.consumer_concurrency
                ),
            ),
        )
        connect = rt.connect()
        app.state.relay = hint.relay = rt.outbox_relay(
            OUTBOX, settings, on_published=outbox_metrics.on_published
        )

        async def refresh_gauges() -> None:
            for state, count in (await store.transfers_by_state()).items():
                metrics.transfers.labels(state).set(count)
            async with pool.acquire() as conn:
                await outbox_metrics.refresh(conn, OUTBOX_TABLE)

        rt.every("gauges", settings.metrics_interval_s, refresh_gauges)
        client = statement_client(settings)
        rt.close(client.aclose)
        statements = app.state.statements = StatementImporter(
            store,
            client,
            lookback_days=settings.statement_lookback_days,
            exchange=settings.events_exchange,
        )
        if reconcile:
            rt.job(reconcile_job(reconciler.run, settings, connect))
            rt.job(retention_job(store, settings, metrics, connect))
            rt.job(statement_job(statements.run, settings, connect))

    return ServiceSpec(
        SERVICE,
        setup,
        database=database_spec(settings),
        messaging=Messaging(topology),
        # the command in hand finishes (its bank call included); past this it is given back
        consumer_stop_timeout_s=settings.stop_timeout_s,
    )


def create_bank_adapter_app(
    settings: BankSettings | None = None,
    *,
    core_settings: Settings | None = None,
    topology: Topology | None = None,
    bank_transport: httpx.AsyncBaseTransport | None = None,
    reconcile: bool = True,
) -> FastAPI:
    """``topology``: what it declares (default from the settings; tests pass their own names,
    with ``settings.queue`` and ``settings.exchange`` among them). ``bank_transport``: the
    bank's HTTP side in-process (tests). ``reconcile=False``: no periodic reconciliation (tests
    run rounds by hand through ``app.state.reconciler``)."""
    settings = settings or get_bank_settings()
    spec = service_spec(
        settings, topology or topology_of(settings), bank_transport=bank_transport, reconcile=reconcile
    )
    return build_app(spec, settings=core_settings)


def run_bank_adapter(port: int | None, host: str) -> None:
    """Serve bank-adapter (the process entry point): the consumer, the relay and the
    reconciliation in one process; more instances share the queue (the transfers' command ids
    and the bank's idempotency keep a command's effect single), one relay and one
    reconciliation round at a time among them (advisory locks)."""
    configure_logging(SERVICE)
    settings = get_bank_settings()
    refuse_insecure_start(settings)
    serve(
        settle_heap_once_started(create_bank_adapter_app(settings)),
        host=host,
        port=port or settings.adapter_port,
    )
