"""core.ids: derived ids stay exactly the UUIDv5 they always were (ledger keys, payment ids and
message ids already stored are derived ones: a different answer would break idempotency)."""

from __future__ import annotations

import uuid

import pytest

from hiwallet.core.ids import HIWALLET_NAMESPACE, derived_id, new_id


@pytest.mark.parametrize(
    "parts",
    [
        ("topup", "stripe", "pi_3PqXyZ"),
        ("topup", "bank", "wire_0001"),
        ("refund", new_id()),
        ("",),
        ("ünïcødé", "ş", "\x1f inside"),
        ("x" * 10_000,),
    ],
)
def test_derived_id_is_uuid5_of_the_joined_parts(parts: tuple[str, ...]) -> None:
    expected = str(uuid.uuid5(HIWALLET_NAMESPACE, "\x1f".join(parts)))
    assert derived_id(*parts) == expected
    assert uuid.UUID(derived_id(*parts)).version == 5


def test_a_known_derived_id_never_changes() -> None:
    # Computed once with uuid.uuid5 (the implementation before the faster one): pinned.
    assert derived_id("topup", "stripe", "pi_1") == "c603f053-93e5-5a64-8ed4-710bd31ad53b"
