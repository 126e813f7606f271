"""Reconciliation's refusals (plain exceptions: the services that expose them map them to their
own problem types, wallet-api in wallet_api/errors.py)."""

from __future__ import annotations

__all__ = ["FindingAlreadyResolved", "FindingNotFound", "ReconciliationBusy", "ReconciliationError"]


class ReconciliationError(Exception):
    """A refusal of reconciliation's."""


class FindingNotFound(ReconciliationError):
    pass


class FindingAlreadyResolved(ReconciliationError):
    def __init__(self, finding_id: str, resolved_by: str | None) -> None:
        super().__init__(f"finding {finding_id} is resolved already")
        self.finding_id = finding_id
        self.resolved_by = resolved_by


class ReconciliationBusy(ReconciliationError):
    """Another instance is running a round now (its advisory lock is held)."""
