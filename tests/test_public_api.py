"""Every package declares its public API (``__all__``): the names exist, are unique and sorted,
and nothing private is declared. The ledger's exact list is held in tests/ledger/test_api.py;
import-linter holds who may import what (pyproject.toml)."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "hiwallet.core.http",
    "hiwallet.core.http.idempotency",
    "hiwallet.core.broker",
    "hiwallet.core.outbox",
    "hiwallet.core.consumer",
    "hiwallet.core.jobs",
    "hiwallet.core.deadletters",
    "hiwallet.contracts",
    "hiwallet.contracts.databases",
    "hiwallet.contracts.topups",
    "hiwallet.contracts.withdrawals",
    "hiwallet.contracts.events",
    "hiwallet.core.background",
    "hiwallet.core.service",
    "hiwallet.core.webhooks",
    "hiwallet.contracts.staff",
    "hiwallet.ledger",
    "hiwallet.topup_webhook",
    "hiwallet.wallet_consumer",
    "hiwallet.bank",
    "hiwallet.fakes",
    "hiwallet.withdrawals",
    "hiwallet.onboarding",
    "hiwallet.staff_admin",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_the_package_declares_what_it_offers(name: str) -> None:
    module = importlib.import_module(name)
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list), f"{name} declares no __all__"
    assert len(set(declared)) == len(declared), f"{name}: a name declared twice"
    for attr in declared:
        assert not attr.startswith("_"), f"{name} declares the private {attr}"
        assert hasattr(module, attr), f"{name} declares {attr}, which it does not have"
