"""The wallet-consumer process: core's Consumer on the top-up partitions, the handler, and an
HTTP app for ``/health``, ``/ready`` (database, broker, consumers, background) and ``/metrics``
only. Beside it, a second Consumer on ``hiwallet.withdrawals.wallet`` (the withdrawal saga's
wallet commands, withdrawals.py, up to withdrawals_batch a transaction), a third on
``hiwallet.wallet.settlements`` (the providers' payouts, settlements.py, one a transaction), the
relay of ``wallet.outbox`` that publishes their responses, that outbox's purge job, and the
ledger's jobs (jobs.py: promo expiry and the sweep of per-bucket sub-accounts).

Built by core.service: at start it connects to PostgreSQL as the wallet database's application
role; as soon as RabbitMQ answers it declares the top-ups', withdrawals' and events' topology
itself (idempotent: whoever starts first declares it), then relays and consumes every partition
with a prefetch of ``prefetch`` (200), handling what each queue has delivered in batches of up
to ``max_batch`` (100) in delivery order, one transaction a batch (core.consumer's batch mode;
the queues are single-active-consumer: another instance is a standby). At stop (SIGTERM,
Ctrl-C) it takes no new batch, finishes the one in hand (within ``stop_timeout_s``), and
closes; a message it could not finish is redelivered, and its processed_events row makes that
harmless.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import asyncpg
import structlog
from fastapi import FastAPI

from hiwallet.contracts.databases import DATABASES, service_role
from hiwallet.contracts.events import WALLET_SETTLEMENTS_QUEUE, events_topology
from hiwallet.contracts.merchant_events import NOTIFY_CHANNEL
from hiwallet.contracts.withdrawals import WALLET_QUEUE, withdrawals_topology
from hiwallet.core.broker import Topology, partition_queues, partitioned_topology
from hiwallet.core.consumer import Consumer, ConsumerMetrics, batched_or_concurrent
from hiwallet.core.http import ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.jobs import PeriodicJob, in_batches
from hiwallet.core.logging import configure_logging
from hiwallet.core.messaging import Messaging
from hiwallet.core.outbox import OutboxMetrics, RelayHint, purge_sent
from hiwallet.core.service import DatabaseSpec, OutboxSpec, Runtime, ServiceSpec, service_lifespan
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.ledger import Fees, Ledger, LedgerStore, init_connection
from hiwallet.reconciliation import (
    Reconciler,
    ReconciliationMetrics,
    ReconciliationSettings,
    get_reconciliation_settings,
    reconciliation_job,
    summary_job,
    verify_job,
)
from hiwallet.wallet_consumer.handler import CONSUMER_NAME, TopupHandler, is_transient
from hiwallet.wallet_consumer.jobs import LedgerJobs
from hiwallet.wallet_consumer.metrics import LedgerJobMetrics, TopupMetrics, WithdrawalMetrics
from hiwallet.wallet_consumer.settings import WalletConsumerSettings, get_wallet_consumer_settings
from hiwallet.wallet_consumer.settlements import (
    SETTLEMENTS_CONSUMER_NAME,
    SettlementHandler,
    SettlementMetrics,
)
from hiwallet.wallet_consumer.topups import OUTBOX_TABLE, count_unattributed
from hiwallet.wallet_consumer.withdrawals import (
    OUTBOX_CHANNEL,
    WITHDRAWALS_CONSUMER_NAME,
    WithdrawalHandler,
    WithdrawalLimits,
)

log = structlog.get_logger(__name__)

SERVICE = "wallet-consumer"
# Advisory lock keys in hiwallet_wallet (locks are per database): one relay of wallet.outbox,
# one round of its purge at a time, across every instance.
RELAY_LOCK_KEY = 0x6877_7772  # "hwwr"
OUTBOX_PURGE_LOCK_KEY = 0x6877_7770  # "hwwp"
# The outbox this service's relay publishes (core.service.Runtime.outbox_relay).
OUTBOX = OutboxSpec(OUTBOX_TABLE, OUTBOX_CHANNEL, RELAY_LOCK_KEY)


def topology_of(settings: WalletConsumerSettings) -> Topology:
    """What the consumer declares: contracts.topups.topups_topology(),
    contracts.withdrawals.withdrawals_topology() and contracts.events.events_topology() with the default
    settings."""
    topups = partitioned_topology(
        settings.exchange,
        partitions=settings.partitions,
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_key=settings.dead_letter_key,
        dead_letter_queue=settings.dead_letter_queue,
    )
    return topups + withdrawal_topology_of(settings) + events_topology_of(settings)


def declared_topology() -> Topology:
    """What the process declares with the environment's settings (the deployment registry)."""
    return topology_of(get_wallet_consumer_settings())


def events_topology_of(settings: WalletConsumerSettings) -> Topology:
    return events_topology(
        exchange=settings.events_exchange,
        queue_prefix=settings.events_queue_prefix,
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_key=settings.events_dead_letter_key,
        dead_letter_queue=settings.events_dead_letter_queue,
    )


def withdrawal_topology_of(settings: WalletConsumerSettings) -> Topology:
    """The whole withdrawal topology (every process of the saga declares it), its queues'
    names behind ``withdrawals_queue_prefix`` (empty: the real names)."""
    topology = withdrawals_topology(
        exchange=settings.withdrawals_exchange,
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_key=settings.withdrawals_dead_letter_key,
        dead_letter_queue=settings.withdrawals_dead_letter_queue,
    )
    prefix = settings.withdrawals_queue_prefix
    if not prefix:
        return topology
    own = {settings.withdrawals_dead_letter_queue}  # named by the settings already
    return Topology(
        exchanges=topology.exchanges,
        queues=tuple(q if q.name in own else replace(q, name=prefix + q.name) for q in topology.queues),
    )


def settlements_queue(settings: WalletConsumerSettings) -> str:
    return settings.events_queue_prefix + WALLET_SETTLEMENTS_QUEUE


def withdrawals_queue(settings: WalletConsumerSettings) -> str:
    return settings.withdrawals_queue_prefix + WALLET_QUEUE


def database_of(settings: WalletConsumerSettings, database: str | None = None) -> str:
    return database or settings.database or DATABASES["wallet"]


def purge_job(
    pool: asyncpg.Pool,
    settings: WalletConsumerSettings,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
) -> PeriodicJob:
    """wallet.outbox's sent rows older than the retention, in bounded batches, one instance a
    round."""

    async def purge_round() -> int:
        async with pool.acquire() as conn:
            return await in_batches(
                lambda: purge_sent(
                    conn, OUTBOX_TABLE, settings.outbox_retention_s, settings.outbox_purge_batch
                ),
                batch=settings.outbox_purge_batch,
                max_batches=settings.outbox_purge_max_batches,
            )

    return PeriodicJob(
        "wallet-outbox-purge", settings.outbox_purge_interval_s, OUTBOX_PURGE_LOCK_KEY, purge_round, connect
    )


def service_spec(
    settings: WalletConsumerSettings,
    *,
    database: str | None = None,
    reconciliation: ReconciliationSettings | None = None,
) -> ServiceSpec:
    """wallet-consumer, declared: the wallet database (the ledger's codecs on each connection),
    the top-ups', withdrawals' and events' topology, and in ``setup`` the two consumers (top-ups,
    the saga's wallet commands), the relay of wallet.outbox, its purge, the ledger's jobs (promo
    expiry, sweep), the books' jobs (verify, reconciliation, the daily summary:
    hiwallet.reconciliation) and the gauges."""
    recon_settings = reconciliation or get_reconciliation_settings()

    async def setup(rt: Runtime) -> None:
        app, pool = rt.app, rt.db
        registry = app.state.metrics_registry
        consumer_metrics = ConsumerMetrics(registry)
        topup_metrics = TopupMetrics(registry)
        withdrawal_metrics = WithdrawalMetrics(registry)
        outbox_metrics = OutboxMetrics(registry)
        ledger = Ledger(LedgerStore.from_settings(pool), Fees.from_settings())
        handler = TopupHandler(ledger, topup_metrics, events_exchange=settings.events_exchange)
        app.state.consumer = rt.consumer(
            "consumer",
            Consumer(
                broker=rt.bus,
                pool=pool,
                queues=partition_queues(settings.exchange, settings.partitions),
                consumer_name=CONSUMER_NAME,
                handler=handler,
                dead_letter_exchange=settings.dead_letter_exchange,
                dead_letter_key=settings.dead_letter_key,
                max_attempts=settings.max_attempts,
                is_transient=is_transient,
                metrics=consumer_metrics,
                prefetch=settings.prefetch,
                batch_handler=handler.batch if settings.max_batch > 1 else None,
                max_batch=settings.max_batch,
                batch_turns=settings.batch_turns,
            ),
        )
        # The withdrawal saga's commands: up to withdrawals_batch a transaction (the queue is
        # unordered; settings.py), the responses through wallet.outbox and its relay below.
        # What the handler commits wakes this process's relay directly once it leads (set
        # below), else the leader elsewhere by one NOTIFY (wallet.outbox has no trigger).
        hint = RelayHint(pool, OUTBOX_CHANNEL)
        rt.close(hint.aclose)
        # The merchants' withdrawal events wake merchant-webhooks the same way.
        events_hint = RelayHint(pool, NOTIFY_CHANNEL)
        rt.close(events_hint.aclose)
        command_handler = WithdrawalHandler(
            ledger,
            exchange=settings.withdrawals_exchange,
            limits=WithdrawalLimits(
                verified_minor=settings.limit_verified_withdrawal_minor,
                contracted_minor=settings.limit_contracted_withdrawal_minor,
            ),
            count=withdrawal_metrics.count,
            on_committed=hint.committed,
            on_events=events_hint.committed,
        )
        app.state.withdrawals = rt.consumer(
            "withdrawals",
            Consumer(
                broker=rt.bus,
                pool=pool,
                queues=[withdrawals_queue(settings)],
                consumer_name=WITHDRAWALS_CONSUMER_NAME,
                handler=command_handler,
                dead_letter_exchange=settings.dead_letter_exchange,
                dead_letter_key=settings.withdrawals_dead_letter_key,
                max_attempts=settings.max_attempts,
                is_transient=is_transient,
                metrics=consumer_metrics,
                **batched_or_concurrent(
                    command_handler.batch, settings.withdrawals_batch, settings.withdrawals_concurrency
                ),
            ),
        )
        # The providers' payouts (settlements.py): one at a time, each in its own transaction
        # (a payout is rare and may be long; order does not matter, the ledger's key and
        # settled_topups make each payout and each top-up settle once).
        settlement_metrics = SettlementMetrics(registry)
        app.state.settlements = rt.consumer(
            "settlements",
            Consumer(
                broker=rt.bus,
                pool=pool,
                queues=[settlements_queue(settings)],
                consumer_name=SETTLEMENTS_CONSUMER_NAME,
                handler=SettlementHandler(ledger, settlement_metrics),
                dead_letter_exchange=settings.dead_letter_exchange,
                dead_letter_key=settings.events_dead_letter_key,
                max_attempts=settings.max_attempts,
                is_transient=is_transient,
                metrics=consumer_metrics,
            ),
        )
        connect = rt.connect()
        app.state.relay = hint.relay = rt.outbox_relay(
            OUTBOX, settings, on_published=outbox_metrics.on_published
        )
        rt.job(purge_job(pool, settings, connect))
        # The ledger's jobs (jobs.py): promo expiry and the sweep, each one instance a round.
        ledger_jobs = LedgerJobs(ledger, settings, LedgerJobMetrics(registry))
        app.state.ledger_jobs = ledger_jobs
        app.state.promo_expiry_job = rt.job(ledger_jobs.promo_expiry_job(connect))
        app.state.sweep_job = rt.job(ledger_jobs.sweep_job(connect))
        # The books' jobs, each one instance a round (core.jobs), the first one interval after
        # the start: verify, reconciliation, the daily summary.
        recon_metrics = app.state.reconciliation_metrics = ReconciliationMetrics(registry)
        app.state.reconciler = Reconciler(pool, recon_settings, recon_metrics)
        app.state.verify_job = rt.job(verify_job(pool, recon_settings, recon_metrics, connect))
        app.state.reconciliation_job = rt.job(reconciliation_job(app.state.reconciler, connect))
        app.state.summary_job = rt.job(summary_job(pool, recon_settings, recon_metrics, connect))

        async def findings_gauge() -> None:
            await recon_metrics.refresh(pool)

        async def outbox_gauges() -> None:
            async with pool.acquire() as conn:
                await outbox_metrics.refresh(conn, OUTBOX_TABLE)

        async def unattributed_gauge() -> None:
            topup_metrics.unattributed.set(await count_unattributed(pool))

        rt.every("outbox-gauges", settings.outbox_metrics_interval_s, outbox_gauges)
        rt.every("unattributed-gauge", settings.unattributed_refresh_s, unattributed_gauge)
        rt.every("findings-gauge", recon_settings.metrics_refresh_s, findings_gauge)

    return ServiceSpec(
        SERVICE,
        setup,
        database=DatabaseSpec(
            database_of(settings, database),
            service_role("wallet", "wallet_consumer"),  # its own role: nothing of wallet-api's
            settings.db_pool_max_size,
            init=init_connection,
        ),
        messaging=Messaging(topology_of(settings)),
        # the batch in hand finishes; past this it is given back (its processed_events rows
        # make the redelivery harmless)
        consumer_stop_timeout_s=settings.stop_timeout_s,
    )


def create_wallet_consumer_app(
    settings: WalletConsumerSettings | None = None,
    *,
    database: str | None = None,
    core_settings: Settings | None = None,
    reconciliation: ReconciliationSettings | None = None,
) -> FastAPI:
    """``database`` overrides hiwallet_wallet (tests use fresh ones)."""
    settings = settings or get_wallet_consumer_settings()
    checks: dict[str, ReadyCheck] = {}
    spec = service_spec(settings, database=database, reconciliation=reconciliation)
    return create_app(
        SERVICE, ready_checks=checks, lifespan=service_lifespan(spec, checks, settings=core_settings)
    )


def run_wallet_consumer(port: int | None, host: str) -> None:
    """Serve wallet-consumer (the process entry point): one process; more instances are
    standbys (single active consumer per partition)."""
    configure_logging(SERVICE)
    settings = get_wallet_consumer_settings()
    refuse_insecure_start(settings)
    serve(
        settle_heap_once_started(create_wallet_consumer_app(settings)), host=host, port=port or settings.port
    )
