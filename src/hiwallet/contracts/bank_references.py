"""The shapes of the bank's own references that more than one service reads, and nothing that
runs (no broker, no database: wallet-api loads reconciliation's checks, which read these).

bank-adapter picks a statement's incoming wires (a customer's bank top-up) by the reference's
prefix; reconciliation matches the same wires to the ledger's settled top-ups by it."""

from __future__ import annotations

__all__ = ["WIRE_PREFIX"]

# The bank's reference of an incoming wire (bank-fake writes it so; docs/fakes.md).
WIRE_PREFIX = "wire_"
