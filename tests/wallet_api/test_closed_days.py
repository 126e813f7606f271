"""parties.ClosedDays: a cash account's run of closed days' balances, kept and read back."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pydantic
import pytest

from hiwallet.ledger import MAX_BALANCE_DAYS
from hiwallet.wallet_api import parties
from hiwallet.wallet_api.parties import ClosedDays
from hiwallet.wallet_api.settings import WalletApiSettings

pytestmark = pytest.mark.in_process

D = date(2026, 12, 1)


def day(n: int) -> date:
    return D + timedelta(days=n)


def test_only_days_over_by_the_grace_are_closed() -> None:
    # a day is closed once it ended CLOSED_DAY_GRACE ago: at 00:59 the day before is not yet
    just_after = datetime(2026, 12, 6, 0, 59, tzinfo=UTC)
    assert timedelta(minutes=60) <= parties.CLOSED_DAY_GRACE
    assert ClosedDays.closed_before(just_after) == date(2026, 12, 5)
    later = datetime(2026, 12, 6, 0, 0, tzinfo=UTC) + parties.CLOSED_DAY_GRACE
    assert ClosedDays.closed_before(later) == date(2026, 12, 6)


def test_kept_days_are_those_closed_and_read_back_in_a_row() -> None:
    cache = ClosedDays(10)
    cache.keep("w:cash", day(0), [1, 2, 3, 4, 5], closed_before=day(3))  # days 3, 4 open
    assert cache.get("w:cash") == (day(0), (1, 2, 3))
    assert cache.known("w:cash", day(0), 5) == (1, 2, 3)
    assert cache.known("w:cash", day(1), 1) == (2,)
    assert cache.known("w:cash", day(3), 2) == ()  # after the run
    assert cache.known("w:cash", day(-1), 5) == ()  # the run starts later: none in a row
    assert cache.known("other:cash", day(0), 5) == ()
    # the window moves a day on: the run grows from where it was
    cache.keep("w:cash", day(1), [2, 3, 4, 5, 6], closed_before=day(4))
    assert cache.get("w:cash") == (day(0), (1, 2, 3, 4))
    # a read that does not continue the run starts a new one
    cache.keep("w:cash", day(6), [7, 8], closed_before=day(8))
    assert cache.get("w:cash") == (day(6), (7, 8))
    # nothing closed: nothing kept; size 0: off
    cache.keep("x:cash", day(0), [1], closed_before=day(0))
    assert cache.get("x:cash") is None
    off = ClosedDays(0)
    off.keep("w:cash", day(0), [1], closed_before=day(5))
    assert off.get("w:cash") is None and off.known("w:cash", day(0), 1) == ()


def test_a_run_keeps_no_more_days_than_a_read_can_ask() -> None:
    cache = ClosedDays(10)
    start = day(0)
    cache.keep("w:cash", start, list(range(MAX_BALANCE_DAYS)), closed_before=day(MAX_BALANCE_DAYS))
    later = list(range(10, MAX_BALANCE_DAYS + 10))
    cache.keep("w:cash", day(10), later, closed_before=day(MAX_BALANCE_DAYS + 10))
    run = cache.get("w:cash")
    assert run is not None and run[0] == day(10) and run[1] == tuple(range(10, MAX_BALANCE_DAYS + 10))


@pytest.mark.parametrize(
    "name", ["party_cache_size", "statement_party_cache_size", "overview_day_cache_size"]
)
def test_a_negative_cache_size_refuses_to_start(name: str) -> None:
    # 0 turns a cache off; a negative size is a misconfiguration, refused rather than read as 0
    with pytest.raises(pydantic.ValidationError):
        WalletApiSettings(**{name: -1})
