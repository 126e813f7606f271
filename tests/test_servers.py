"""The test servers' ports: pytest-xdist workers choose from disjoint slices."""

from __future__ import annotations

import pytest

from tests.servers import _worker_ports


def test_workers_take_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    ports = range(20_000, 32_768)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(_worker_ports(ports)))
    assert all(len(s) == len(ports) // 3 for s in slices)
    assert not (slices[0] & slices[1]) and not (slices[1] & slices[2]) and not (slices[0] & slices[2])
    assert set().union(*slices) <= set(ports)


def test_without_workers_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    assert _worker_ports(range(20_000, 30_000)) == range(20_000, 30_000)
