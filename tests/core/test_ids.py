"""core.ids: derived ids stay exactly the UUIDv5 they always were (ledger keys, payment ids and
message ids already stored are derived ones: a different answer would break idempotency)."""

from __future__ import annotations

import time
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


def test_new_ids_sort_as_made_and_carry_the_time_they_were_made() -> None:
    # 20,000 ids as fast as one process makes them (well over 1,000 a millisecond's worth): in
    # order, each a UUIDv7, and the last one's timestamp not ahead of the clock (an id generator
    # that keeps order by moving the timestamp on ran seconds ahead here).
    before_ms = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(20_000)]
    after_ms = time.time_ns() // 1_000_000
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    parsed = [uuid.UUID(i) for i in (ids[0], ids[-1])]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in parsed)
    first_ms, last_ms = (u.int >> 80 for u in parsed)
    assert before_ms <= first_ms <= last_ms <= after_ms
