"""What the services agree on, and nothing that runs: the messages, exchanges, queues and routing
keys they exchange (``topups``, ``withdrawals``, ``events``), the staff permissions and the
``/v1/me`` contract (``staff``), and the registry of the deployment's databases (``databases``).

Services depend on the contracts and on the platform (``hiwallet.core``), never on each other;
the contracts depend only on the platform (import-linter's layers in pyproject.toml)."""

from hiwallet.contracts import (
    currency,
    databases,
    events,
    merchant_events,
    settlements,
    staff,
    topups,
    withdrawals,
)

__all__ = [
    "currency",
    "databases",
    "events",
    "merchant_events",
    "settlements",
    "staff",
    "topups",
    "withdrawals",
]
