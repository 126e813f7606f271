"""views.ts: the API's times, formatted by orjson as isoformat() with "Z" for "+00:00" was."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from hiwallet.wallet_api.views import ts

pytestmark = pytest.mark.in_process


def test_times_read_as_isoformat_in_utc_with_a_z() -> None:
    zones = [UTC, timezone(timedelta(hours=3)), ZoneInfo("Europe/Istanbul")]
    rng = random.Random(26)
    for _ in range(20_000):
        micro = rng.choice([0, 1, 500, 999_999, rng.randrange(10**6)])
        value = datetime(
            rng.randrange(1900, 2200), rng.randrange(1, 13), rng.randrange(1, 29), rng.randrange(24),
            rng.randrange(60), rng.randrange(60), micro, tzinfo=rng.choice(zones),
        )  # fmt: skip
        assert ts(value) == value.astimezone(UTC).isoformat().replace("+00:00", "Z"), value
    assert ts(datetime(2026, 12, 6, 2, 11, 22, tzinfo=UTC)) == "2026-12-06T02:11:22Z"
    assert ts(datetime(2026, 12, 6, 5, 11, 22, 500, tzinfo=timezone(timedelta(hours=3)))) == (
        "2026-12-06T02:11:22.000500Z"
    )
