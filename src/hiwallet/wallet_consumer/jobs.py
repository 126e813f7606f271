"""The ledger's periodic jobs in wallet-consumer: promo expiry and the sweep of the per-bucket
sub-accounts. Each is a core.jobs.PeriodicJob (one instance a round across every
wallet-consumer: ``pg_try_advisory_lock`` on a connection of its own; the first round one
interval after the start), and a round the operator runs by hand (``hiwallet ledger
expire-promos`` / ``sweep``) takes the same lock.

The work is the ledger's (``Ledger.expire_promos``, ``Ledger.sweep_all``): this module only
schedules it, counts it and reports it. Exactly once per batch does not rest on the lock alone:
each expiry is keyed by its batch (a second posting of it is a replay) and the posting function
locks the batch row and refuses one that holds nothing (``NothingToExpire``), so two rounds that
overlapped anyway (a lock lost with its connection mid-round) still return each remainder once.
The lock keeps them from doing the work twice over.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import asyncpg
import structlog

from hiwallet.core.jobs import PeriodicJob
from hiwallet.ledger import Ledger, PostResult, Role
from hiwallet.wallet_consumer.metrics import LedgerJobMetrics
from hiwallet.wallet_consumer.settings import WalletConsumerSettings

__all__ = [
    "JOB_ACTOR",
    "PROMO_EXPIRY_JOB",
    "PROMO_EXPIRY_LOCK_KEY",
    "SWEEP_JOB",
    "SWEEP_LOCK_KEY",
    "LedgerJobs",
    "PromoExpiry",
    "PromoExpiryReport",
    "SweepReport",
    "Swept",
]

log = structlog.get_logger(__name__)

# Advisory lock keys in hiwallet_wallet (beside app.py's relay and purge keys; locks are per
# database): one promo expiry round and one sweep round at a time, across every instance.
PROMO_EXPIRY_LOCK_KEY = 0x6877_7065  # "hwpe"
SWEEP_LOCK_KEY = 0x6877_7377  # "hwsw"
PROMO_EXPIRY_JOB = "promo-expiry"
SWEEP_JOB = "ledger-sweep"
# The actor of the postings the jobs make (the ledger's lines say who moved the money).
JOB_ACTOR = "system:wallet-consumer"

Destination = Literal["business", "breakage"]


@dataclass(frozen=True, slots=True)
class PromoExpiry:
    batch_id: str
    transaction_id: str
    currency: str
    to: Destination
    account: str  # where the remainder went: the business's cash or promo_breakage
    amount_minor: int


@dataclass
class PromoExpiryReport:
    expired: list[PromoExpiry] = field(default_factory=list)

    def returned_minor(self, currency: str, to: Destination) -> int:
        return sum(e.amount_minor for e in self.expired if e.currency == currency and e.to == to)


@dataclass(frozen=True, slots=True)
class Swept:
    role: str
    currency: str
    amount_minor: int


@dataclass
class SweepReport:
    swept: list[Swept] = field(default_factory=list)


def _destination(account: str) -> Destination:
    # The ledger's rule decides where a batch's remainder goes (rules.promo_grant: the
    # business's cash when it funded the batch, the platform's promo_breakage otherwise);
    # this only names it for the metrics and the report.
    return "breakage" if f":sys:{Role.PROMO_BREAKAGE.value}:" in account else "business"


class LedgerJobs:
    """The rounds of the ledger's jobs over one :class:`Ledger`, counted in ``metrics``."""

    def __init__(
        self,
        ledger: Ledger,
        settings: WalletConsumerSettings,
        metrics: LedgerJobMetrics | None = None,
        *,
        actor: str = JOB_ACTOR,
    ) -> None:
        self.ledger = ledger
        self.settings = settings
        self.metrics = metrics or LedgerJobMetrics()
        self.actor = actor

    async def expire_promos(self) -> PromoExpiryReport:
        """One promo expiry round (no lock: :meth:`promo_expiry_job` holds it): every batch
        past its date that still holds money, bounded by the settings' pages."""
        report = PromoExpiryReport()

        def expired(batch_id: str, result: PostResult, expire_to: str, currency: str) -> None:
            line = result.line_of(expire_to)
            if line is None:  # a defect of the rule: an expiry always credits its destination
                raise RuntimeError(f"expiry {result.id} has no line on {expire_to}")
            to = _destination(expire_to)
            report.expired.append(PromoExpiry(batch_id, result.id, currency, to, expire_to, line.amount))
            self.metrics.promo_expired.labels(currency, to).inc()
            self.metrics.promo_returned.labels(currency, to).inc(line.amount)

        await self.ledger.expire_promos(
            actor=self.actor,
            batch_size=self.settings.promo_expiry_batch,
            max_rounds=self.settings.promo_expiry_max_pages,
            on_expired=expired,
        )
        return report

    async def sweep(self) -> SweepReport:
        """One sweep round (no lock: :meth:`sweep_job` holds it)."""
        report = SweepReport()

        def swept(role: Role, currency: str, amount: int) -> None:
            report.swept.append(Swept(role.value, currency, amount))
            self.metrics.swept.labels(role.value, currency).inc()
            self.metrics.swept_amount.labels(role.value, currency).inc(abs(amount))

        await self.ledger.sweep_all(actor=self.actor, on_swept=swept)
        return report

    def _counted(self, name: str, work: Callable[[], Awaitable[int]]) -> Callable[[], Awaitable[int]]:
        """``work`` as a job's round: its duration and result counted (the lock is held)."""

        async def round_() -> int:
            started = time.monotonic()
            try:
                done = await work()
            except BaseException:
                # a timeout (CancelledError inside asyncio.timeout) counts as failed too
                self.metrics.rounds.labels(name, "failed").inc()
                raise
            finally:
                self.metrics.duration.labels(name).observe(time.monotonic() - started)
            self.metrics.rounds.labels(name, "done").inc()
            self.metrics.last_success.labels(name).set(time.time())
            return done

        return round_

    def _job(
        self,
        name: str,
        interval_s: float,
        lock_key: int,
        timeout_s: float,
        work: Callable[[], Awaitable[int]],
        connect: Callable[[], Awaitable[asyncpg.Connection]],
    ) -> PeriodicJob:
        return PeriodicJob(
            name, interval_s, lock_key, self._counted(name, work), connect, timeout_s=timeout_s
        )

    def _scheduled(self, job: PeriodicJob) -> PeriodicJob:
        # Skipped rounds (another instance held the lock) are the scheduled job's own count.
        self.metrics.skipped.labels(job.name).set_function(lambda: job.skipped)
        return job

    async def expire_promos_now(
        self, connect: Callable[[], Awaitable[asyncpg.Connection]]
    ) -> PromoExpiryReport | None:
        """A promo expiry round now, under the job's lock (the operator's command): None when
        another instance is running one."""
        reports: list[PromoExpiryReport] = []

        async def work() -> int:
            reports.append(await self.expire_promos())
            return len(reports[-1].expired)

        job = self._job(
            PROMO_EXPIRY_JOB,
            self.settings.promo_expiry_interval_s,
            PROMO_EXPIRY_LOCK_KEY,
            self.settings.promo_expiry_timeout_s,
            work,
            connect,
        )
        return reports[0] if await job.run_once() else None

    async def sweep_now(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> SweepReport | None:
        """A sweep round now, under the job's lock: None when another instance is running one."""
        reports: list[SweepReport] = []

        async def work() -> int:
            reports.append(await self.sweep())
            return len(reports[-1].swept)

        s = self.settings
        job = self._job(SWEEP_JOB, s.sweep_interval_s, SWEEP_LOCK_KEY, s.sweep_timeout_s, work, connect)
        return reports[0] if await job.run_once() else None

    def promo_expiry_job(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> PeriodicJob:
        async def work() -> int:
            report = await self.expire_promos()
            if report.expired:
                log.info("promo batches expired", batches=len(report.expired))
            return len(report.expired)

        s = self.settings
        return self._scheduled(
            self._job(
                PROMO_EXPIRY_JOB,
                s.promo_expiry_interval_s,
                PROMO_EXPIRY_LOCK_KEY,
                s.promo_expiry_timeout_s,
                work,
                connect,
            )
        )

    def sweep_job(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> PeriodicJob:
        async def work() -> int:
            return len((await self.sweep()).swept)

        s = self.settings
        return self._scheduled(
            self._job(SWEEP_JOB, s.sweep_interval_s, SWEEP_LOCK_KEY, s.sweep_timeout_s, work, connect)
        )
