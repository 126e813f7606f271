"""Every package under ``hiwallet`` declares its public API (``__all__``), found by walking the
source tree, so a new package is held to it without a new line here. The kernel (``core``) is the
exception: its modules are its API, and those listed below, which other packages import by name,
declare theirs. What is checked: ``__all__`` is a list, its names are unique, none is private,
and each exists. Not checked: that it names everything other packages use (import-linter holds
who may import what: pyproject.toml), nor its order. The ledger's exact list is held in
tests/ledger/test_api.py."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import hiwallet

# Every package directly under hiwallet (a service, the ledger, the fakes), the kernel aside.
FOUND = sorted(f"hiwallet.{m.name}" for m in pkgutil.iter_modules(hiwallet.__path__) if m.ispkg)
PACKAGES = [name for name in FOUND if name != "hiwallet.core"]

# The kernel's modules that other packages import by name.
KERNEL_MODULES = [
    "hiwallet.core.http",
    "hiwallet.core.http.idempotency",
    "hiwallet.core.broker",
    "hiwallet.core.outbox",
    "hiwallet.core.consumer",
    "hiwallet.core.jobs",
    "hiwallet.core.deadletters",
    "hiwallet.core.messaging",
    "hiwallet.core.service",
    "hiwallet.core.cli",
    "hiwallet.core.webhooks",
]
# Every module of the contracts: each is a contract some service imports.
CONTRACT_MODULES = sorted(
    f"hiwallet.contracts.{m.name}"
    for m in pkgutil.iter_modules(importlib.import_module("hiwallet.contracts").__path__)
)


def test_every_package_is_found() -> None:
    # The walk itself: a packaging change that hid the packages would make the test below vacuous.
    assert {"hiwallet.core", "hiwallet.ledger", "hiwallet.wallet_api", "hiwallet.identity"} <= set(FOUND)
    assert "hiwallet.contracts.withdrawals" in CONTRACT_MODULES


@pytest.mark.parametrize("name", PACKAGES + KERNEL_MODULES + CONTRACT_MODULES)
def test_the_package_declares_what_it_offers(name: str) -> None:
    module = importlib.import_module(name)
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list), f"{name} declares no __all__"
    assert len(set(declared)) == len(declared), f"{name}: a name declared twice"
    for attr in declared:
        assert not attr.startswith("_"), f"{name} declares the private {attr}"
        assert hasattr(module, attr), f"{name} declares {attr}, which it does not have"
