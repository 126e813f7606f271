"""wallet-consumer settings: ``HIWALLET_WALLET_CONSUMER_*`` environment variables with local
defaults (the broker's URL and the database server are the core settings' ``HIWALLET_AMQP_URL``
and ``HIWALLET_DATABASE_URL``)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.contracts.events import EVENTS_DEAD_LETTER_KEY, EVENTS_DEAD_LETTER_QUEUE, EVENTS_EXCHANGE
from hiwallet.contracts.topups import (
    DEAD_LETTER_EXCHANGE,
    TOPUPS_DEAD_LETTER_KEY,
    TOPUPS_DEAD_LETTER_QUEUE,
    TOPUPS_EXCHANGE,
)
from hiwallet.contracts.withdrawals import (
    WITHDRAWALS_DEAD_LETTER_KEY,
    WITHDRAWALS_DEAD_LETTER_QUEUE,
    WITHDRAWALS_EXCHANGE,
)
from hiwallet.ledger import MAX_BATCH


class WalletConsumerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_WALLET_CONSUMER_", extra="ignore")

    # /health, /ready and /metrics only (CONTRACT-10)
    port: int = 9101
    # The database name; empty means hiwallet_wallet. Tests use clones.
    database: str = ""
    # The topology it declares and consumes: contracts.topups.topups_topology() by default, i.e.
    # <exchange>.p0 .. p{partitions-1}. Tests (and a process started by them) pass their own.
    exchange: str = TOPUPS_EXCHANGE
    partitions: int = 4
    dead_letter_exchange: str = DEAD_LETTER_EXCHANGE
    dead_letter_key: str = TOPUPS_DEAD_LETTER_KEY
    dead_letter_queue: str = TOPUPS_DEAD_LETTER_QUEUE
    # Messages in hand per queue, handled in batches in delivery order (core.consumer's batch
    # mode): with single active consumer, one channel per queue, one batch at a time per queue
    # and the ack after the commit, a wallet's messages are handled in the order they were
    # published to its partition, as with prefetch 1. Prefetch 1 itself, one message
    # per transaction carried ~260-320/s end to end, short of 1,000/s (docs/spine.md, figures).
    # Twice max_batch: the next batch is delivered while one is handled (with prefetch =
    # max_batch, a full batch leaves the broker nothing to send until its ack).
    prefetch: int = Field(default=200, ge=1)
    # The most messages handled in one transaction (what is already delivered, never waited
    # for); 1 = one message per transaction (the single path, still in order). A batch is one
    # call of the ledger's batched posting, which takes at most ledger.MAX_BATCH postings: a
    # larger setting refuses to start rather than failing every batch.
    max_batch: int = Field(default=100, ge=1, le=MAX_BATCH)
    # The partitions' batches take turns (one transaction at a time in the process): wallets of
    # every partition share a bucket's clearing sub-account, and concurrent batches waited on
    # each other's lock of it until each commit (core.consumer, batch_turns).
    batch_turns: bool = True
    # A message the handler cannot handle (Unprocessable, a defect) is tried this many times,
    # then dead-lettered with its reason. A database outage is not counted (the consumer pauses).
    max_attempts: int = 5
    # A connection per partition being handled, one for the ledger's reads (a reused key), one
    # for /ready and the unattributed count; one for the withdrawal commands, one for the
    # ledger's read of a refunded debit, one for the outbox's gauges and purge; one for each of
    # the ledger's jobs (promo expiry, sweep: a posting at a time each); one per withdrawal
    # command in hand (withdrawals_concurrency); one for each of the books' jobs (verify,
    # reconciliation, the daily summary: hiwallet.reconciliation) and their gauge; one for the
    # settlements' consumer (a payout a transaction).
    db_pool_max_size: int = 33
    # How often the unattributed top-ups gauge is read from the database.
    unattributed_refresh_s: float = 30.0
    # At stop: how long the message in hand may take to finish (else it is given back and
    # redelivered: its processed_events row makes that harmless).
    stop_timeout_s: float = 15.0

    # The withdrawal saga's wallet commands (contracts.withdrawals, CONTRACT-11 part B): consumed
    # from <withdrawals_queue_prefix>hiwallet.withdrawals.wallet, the responses published to
    # withdrawals_exchange through wallet.outbox and its relay (in this process). The whole
    # contracts.withdrawals.withdrawals_topology() is declared at start; the prefix renames its queues (tests
    # and a process started by them: never the real names), dead letters go to
    # dead_letter_exchange under withdrawals_dead_letter_key.
    withdrawals_exchange: str = WITHDRAWALS_EXCHANGE
    withdrawals_queue_prefix: str = ""
    withdrawals_dead_letter_key: str = WITHDRAWALS_DEAD_LETTER_KEY
    withdrawals_dead_letter_queue: str = WITHDRAWALS_DEAD_LETTER_QUEUE
    # Withdrawal commands in one transaction, up to withdrawals_batch at once, in delivery order
    # (core.consumer's batch path, as the orchestrator's results: one claim, one outcome
    # statement, one commit and one ack for the batch; a batch that fails goes one message at a
    # time). wallet-consumer's transactions a saga 5.3 -> 2.0 (bench/withdrawal_bench.py). 64
    # with the orchestrator's consumer_batch (which see), as measured together.
    withdrawals_batch: int = Field(default=64, ge=0, le=MAX_BATCH)
    # withdrawals_batch 0: the single path instead, this many commands at once, each its own
    # transaction (core.consumer concurrency; the queue's order does not matter: the saga's
    # state and the ledger's row locks decide).
    withdrawals_concurrency: int = 16
    # Monthly withdrawal limits of personal accounts, per tier, per currency, in minor units
    # (as wallet-api's transfer limits: 50,000.00 and 500,000.00 TRY). Unknown and unverified
    # accounts may not withdraw; business accounts have no limit. A refund gives back what
    # its debit counted.
    limit_verified_withdrawal_minor: int = 50_000_00
    limit_contracted_withdrawal_minor: int = 500_000_00
    # The relay of wallet.outbox (core/outbox.py): rows a pass publishes, and its poll (the
    # NOTIFY at commit wakes it first; the poll is the safety net).
    relay_batch: int = 200
    relay_poll_s: float = 1.0
    # Sent outbox rows are deleted after this long (a PeriodicJob, one instance a round).
    outbox_retention_s: float = 7 * 24 * 3600.0
    outbox_purge_interval_s: float = 3600.0
    outbox_purge_batch: int = 1000
    # At most this many batches a round (the rest waits for the next round): a round stays short.
    outbox_purge_max_batches: int = 100
    # How often the outbox lag gauges are read.
    outbox_metrics_interval_s: float = 15.0

    # The ledger's jobs (jobs.py; PeriodicJob: one instance a round, the first one interval
    # after the start). Promo expiry: each batch past its expires_at that still holds money is
    # returned to its funder (the business, or promo_breakage for the platform's), once. A
    # round reads promo_expiry_batch batches a page, at most promo_expiry_max_pages pages (the
    # rest waits for the next round), each expiry its own short transaction, and may take
    # promo_expiry_timeout_s. Until the round runs, shown balances and payments leave an
    # expired batch out already (the ledger), so the interval is about when the funder gets
    # the money back, not about what the customer can spend.
    promo_expiry_interval_s: float = Field(default=300.0, gt=0)
    promo_expiry_batch: int = Field(default=500, ge=1, le=10_000)
    promo_expiry_max_pages: int = Field(default=20, ge=1, le=1_000)
    promo_expiry_timeout_s: float = Field(default=240.0, gt=0)
    # The sweep: each per-bucket sub-account of clearing, revenue, promo_expense and
    # promo_breakage that holds something is moved into its central account (Ledger.sweep),
    # one posting a sub-account, keyed by its version (a repeat moves nothing).
    sweep_interval_s: float = Field(default=3600.0, gt=0)
    sweep_timeout_s: float = Field(default=600.0, gt=0)

    # Events (contracts.events): a credited wire's TopupCredited goes to events_exchange through
    # wallet.outbox. Publishing is mandatory, so the whole contracts.events.events_topology() (the
    # subscribers' queues too) is declared at start; the prefix renames its queues (tests and
    # a process started by them: never the real names).
    events_exchange: str = EVENTS_EXCHANGE
    events_queue_prefix: str = ""
    events_dead_letter_key: str = EVENTS_DEAD_LETTER_KEY
    events_dead_letter_queue: str = EVENTS_DEAD_LETTER_QUEUE


@lru_cache(maxsize=1)
def get_wallet_consumer_settings() -> WalletConsumerSettings:
    return WalletConsumerSettings()
