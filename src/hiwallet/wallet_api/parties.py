"""What wallet-api keeps of what it read, each bounded: the parties of recent transfers (a
transfer usually needs no statement to find them), statement lines with their counterparties and
cash accounts' closed days' balances (neither ever changes)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Generic, TypeVar

import asyncpg

from hiwallet.ledger import MAX_BALANCE_DAYS
from hiwallet.wallet_api import adapters, errors
from hiwallet.wallet_api.adapters import Q, WalletAccess
from hiwallet.wallet_api.domain import Caller
from hiwallet.wallet_api.idempotency import Answer, stored_answer
from hiwallet.wallet_api.retry import problem_for

K = TypeVar("K")
V = TypeVar("V")


class _Bounded(Generic[K, V]):
    """A dict of at most ``size`` entries; the oldest goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def put(self, key: K, value: V) -> None:
        if self.size <= 0:
            return
        self._items.pop(key, None)
        while len(self._items) >= self.size:
            del self._items[next(iter(self._items))]
        self._items[key] = value


# A statement line's counterparty as its page shows it: the wallet's number, its account's kind
# and (a business's) name.
LineParty = tuple[str, str, str | None]

# A statement line as its page shows it, but for its version (the key's): its transaction's id,
# type, reference, amount, currency, the balance after it, its time as ts() writes it and its
# counterparty (None: its transaction moved money on no other customer wallet, as a top-up).
StatementLine = tuple[str, str, str, int, str, int, str, LineParty | None]


class StatementLines(_Bounded[tuple[str, int], StatementLine]):
    """Statement lines as their pages show them, by the line (its account, its version), read
    once. None of it ever changes: a line and its transaction's lines are never updated or
    deleted, nor an account's role, and a wallet's number and its account's kind and name are not
    updatable (migrations/wallet/grants.sql). Their counterparties were four index probes a line,
    ~80 % of a page's database CPU on bench/read_bench.py; a page whose lines are all kept is not
    read at all, only counted, with the caller's membership (wallet_statement_known): the 51
    rows' decoding and ts() were most of what wallet-api's process spent on a page beyond the
    bare endpoint's. A line whose counterparty was looked up and not found as a wallet (its
    transaction names another customer wallet's account that has no wallet row) is not kept
    (looked up again next time)."""


# How long after a UTC day's end its closing balance may still change. A line's posted_at is
# clock_timestamp() taken inside its posting (ledger.post / post_batch, after the accounts'
# locks), and the line is seen from its transaction's commit: a line dated in a day can appear
# after the day's end for as long as a posting transaction lives after its posting. Every
# service's session has statement_timeout 5 s and idle_in_transaction_session_timeout 60 s
# (core/db.server_settings; no role or database overrides them); a posting is one autocommit
# statement or one of the few statements of a caller's unit of work (staff money, promos,
# withdrawals), so it commits within a few minutes at worst. An hour is many times that, and
# covers any skew between wallet-api's clock and the database's (NTP: milliseconds).
CLOSED_DAY_GRACE = timedelta(hours=1)


class ClosedDays(_Bounded[str, tuple[date, tuple[int, ...]]]):
    """Cash accounts' balances at the end of UTC days that ended more than CLOSED_DAY_GRACE
    before a read that found them began: then no transaction that could still commit a line
    dated in the day is left, and lines are never updated or deleted, so the balance never
    changes (0 before the account's first line, as the ledger's daily_balances). By account,
    one run of consecutive days (its first day, their balances): a few comparisons and a slice
    a read, not a look-up a day. The overview's 30 daily probes were most of its database work
    (issue 26): read again, it probes only the days not kept (today, and yesterday in the
    grace's hour)."""

    @staticmethod
    def closed_before(now: datetime) -> date:
        """The first day whose balance may still change for a read begun at ``now``: every
        day before it ended at least CLOSED_DAY_GRACE before ``now``."""
        return (now - CLOSED_DAY_GRACE).date()

    def known(self, account: str, first: date, days: int) -> tuple[int, ...]:
        """The kept balances of the days from ``first`` on, as many as are kept in a row (at
        most ``days``)."""
        run = self.get(account)
        if run is None or run[0] > first:
            return ()
        offset = (first - run[0]).days
        return run[1][offset : offset + days]

    def keep(self, account: str, first: date, balances: list[int], closed_before: date) -> None:
        """Keep, of ``balances`` (the days from ``first`` on, just read or kept), those of the
        days before ``closed_before``, after the account's run if they continue it."""
        closed = min(len(balances), (closed_before - first).days)
        if closed <= 0 or self.size <= 0:
            return
        run = self.get(account)
        if run is not None and run[0] <= first and len(run[1]) >= (first - run[0]).days:
            if len(run[1]) >= (first - run[0]).days + closed:
                return  # nothing new
            start, before = run[0], run[1][: (first - run[0]).days]
        else:
            start, before = first, ()
        kept = before + tuple(balances[:closed])
        drop = len(kept) - MAX_BALANCE_DAYS  # no read asks further back
        if drop > 0:
            start, kept = start + timedelta(days=drop), kept[drop:]
        self.put(account, (start, kept))


class PartyCache:
    """The parties of recent transfers: source wallets by (wallet, caller), recipients by number.
    Only what the transfer's statement checks again may go stale here (membership, tiers);
    wallets, accounts, kinds, currencies and numbers never change."""

    def __init__(self, size: int) -> None:
        self.src: _Bounded[tuple[str, str, str], WalletAccess] = _Bounded(size)
        self.dst: _Bounded[tuple[int, str], WalletAccess] = _Bounded(size)

    def forget(self, src: tuple[str, str, str], dst: tuple[int, str]) -> None:
        self.src.pop(src)
        self.dst.pop(dst)

    async def read(
        self,
        pool: asyncpg.Pool,
        caller: Caller,
        key: str,
        fingerprint: bytes,
        bucket: int,
        from_wallet: str,
        to_bucket: int,
        number: str,
    ) -> Answer | tuple[WalletAccess, WalletAccess]:
        """Both parties, read (and cached for the next transfer); or the key's stored answer."""
        try:
            rows = await pool.fetch(
                Q["transfer_parties"],
                bucket,
                from_wallet,
                to_bucket,
                number,
                caller.issuer,
                caller.subject,
                caller.scope,
                key,
            )
        except Exception as exc:
            problem = problem_for(exc)
            if problem is None:
                raise
            raise problem from exc
        stored = stored_answer(rows[0], fingerprint)
        if stored is not None:
            return stored
        src = next((adapters.wallet_access(r) for r in rows if r["id"] is not None and r["is_source"]), None)
        dst = next((adapters.wallet_access(r, False) for r in rows if r["number"] == number), None)
        if src is None or not src.member:
            raise errors.NotFound("no such wallet")
        if dst is None:
            raise errors.RecipientNotFound("no wallet has this number")
        self.src.put((from_wallet, caller.issuer, caller.subject), src)
        self.dst.put((to_bucket, number), dst)
        return src, dst
