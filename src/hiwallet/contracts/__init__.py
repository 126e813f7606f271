"""What the services agree on, and nothing that runs: the messages, exchanges, queues and routing
keys they exchange (``topups``, ``withdrawals``, ``events``), the staff permissions and the
``/v1/me`` contract (``staff``), and the registry of the deployment's databases (``databases``).

Services depend on the contracts and on the platform (``hiwallet.core``), never on each other;
the contracts depend only on the platform (import-linter's layers in pyproject.toml)."""

import importlib
from types import ModuleType

# The submodules are loaded when first used, not here: several need the broker's or the
# database's client library (aio-pika, asyncpg), and the front APIs and BFFs, which use neither,
# import this package (problems, public, front). Loading both cost each front process about
# 10 MB (docs/performance.md); tests/test_deployables.py keeps them out.
__all__ = [
    "bank_references",
    "currency",
    "databases",
    "events",
    "merchant_events",
    "settlements",
    "staff",
    "topups",
    "withdrawals",
]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"hiwallet.contracts.{name}")
    raise AttributeError(f"module 'hiwallet.contracts' has no attribute {name!r}")
