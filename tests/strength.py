"""How hard the generated tests try, from the Hypothesis profile (tests/conftest.py): `make test`
keeps to its time budget with the "default" profile (25 examples); HYPOTHESIS_PROFILE=long (200)
tries eight times as hard, e.g. after touching the ledger's rules or a service's document.

A test's own count is a fraction of the profile's: the expensive ones (a schemathesis case is an
HTTP request against a running service; a ledger state machine's example is a database) take a
smaller share, so that the suite's time stays where the README says."""

from __future__ import annotations

from hypothesis import settings

__all__ = ["scaled"]


def scaled(fraction: float) -> int:
    """``fraction`` of the profile's examples, at least one."""
    return max(1, round(settings.default.max_examples * fraction))
