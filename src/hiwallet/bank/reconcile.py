"""The callback that never arrived: each round takes the transfers pending for longer than
``stale_after_s`` (oldest first, at most ``batch``), asks the bank for each
(``GET /v1/transfers/{reference}``) and records a final status through the same function as a
callback (bank.reconcile_transfer: once per transfer, announced in the same transaction). A
transfer whose callback came meanwhile is found recorded ('already') and nothing is announced
twice. A bank that does not answer ends the round (the next one tries again); a transfer the
bank does not know is logged and left pending for an operator.
"""

from __future__ import annotations

import structlog

from hiwallet.bank.client import BankClient, BankProtocolError, BankUnavailable
from hiwallet.bank.metrics import AdapterMetrics
from hiwallet.bank.store import BankStore, Reconciled

log = structlog.get_logger(__name__)


class Reconciler:
    def __init__(
        self, store: BankStore, bank: BankClient, metrics: AdapterMetrics, *, stale_after_s: float, batch: int
    ) -> None:
        self.store = store
        self.bank = bank
        self.metrics = metrics
        self.stale_after_s = stale_after_s
        self.batch = batch

    async def run(self) -> int:
        """One round: how many outcomes it recorded that no callback had reported."""
        found = 0
        for pending in await self.store.stale_pending(self.stale_after_s, self.batch):
            try:
                status = await self.bank.transfer_status(pending.bank_reference)
            except BankUnavailable as exc:
                self.metrics.bank_unavailable.inc()
                log.warning("reconciliation stopped: the bank is unavailable", error=str(exc), found=found)
                break
            except BankProtocolError as exc:
                log.error(
                    "reconciliation cannot read the bank's answer",
                    bank_reference=pending.bank_reference,
                    error=str(exc),
                )
                continue
            if status is None:
                log.error(
                    "the bank knows no transfer we recorded pending",
                    command_id=pending.command_id,
                    bank_reference=pending.bank_reference,
                )
                continue
            if status.status == "pending":
                continue
            succeeded = status.status == "succeeded"
            outcome = await self.store.reconcile_transfer(
                pending.bank_reference, succeeded, status.failure_reason if not succeeded else None
            )
            if outcome is Reconciled.RECORDED:
                found += 1
                self.metrics.reconciliation_found.labels(status.status).inc()
                log.info(
                    "reconciliation recorded a transfer's outcome no callback reported",
                    command_id=pending.command_id,
                    bank_reference=pending.bank_reference,
                    outcome=status.status,
                )
        return found
