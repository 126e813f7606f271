"""The top-ups' topology: ``hiwallet.topups``, where topup-webhook's relay publishes a recorded
payment and wallet-consumer takes it to the ledger, and the one dead-letter exchange of the
deployment (``hiwallet.dead-letters``), which every partitioned topology dead-letters to.

A contract between services: the exchange, its partition queues and the dead-letter routing
are named here once; the platform (``hiwallet.core.broker``) only knows how to build such a
topology."""

from __future__ import annotations

from hiwallet.core.broker import Topology, partitioned_topology

__all__ = [
    "DEAD_LETTER_EXCHANGE",
    "TOPUPS_DEAD_LETTER_KEY",
    "TOPUPS_DEAD_LETTER_QUEUE",
    "TOPUPS_EXCHANGE",
    "topups_topology",
]

TOPUPS_EXCHANGE = "hiwallet.topups"
# The deployment's one dead-letter exchange (direct): each topology binds its own dead queue.
DEAD_LETTER_EXCHANGE = "hiwallet.dead-letters"
TOPUPS_DEAD_LETTER_KEY = "hiwallet.topups"
TOPUPS_DEAD_LETTER_QUEUE = "hiwallet.topups.dead"


def topups_topology(partitions: int = 4) -> Topology:
    """``hiwallet.topups`` (x-consistent-hash) over ``hiwallet.topups.p0`` ... ``p3``, and the
    dead letters: ``hiwallet.dead-letters`` (direct) -> ``hiwallet.topups.dead``."""
    return partitioned_topology(
        TOPUPS_EXCHANGE,
        partitions=partitions,
        dead_letter_exchange=DEAD_LETTER_EXCHANGE,
        dead_letter_key=TOPUPS_DEAD_LETTER_KEY,
        dead_letter_queue=TOPUPS_DEAD_LETTER_QUEUE,
    )
