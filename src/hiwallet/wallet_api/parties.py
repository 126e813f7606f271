"""The parties of recent transfers, cached: a transfer usually needs no statement to find them."""

from __future__ import annotations

from typing import Generic, TypeVar

import asyncpg

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


class LineParties(_Bounded[tuple[str, int], LineParty]):
    """Statement lines' counterparties, by the line (its account, its version): what a page's
    statement looked up in four index probes a line (~80 % of the page's database CPU on
    bench/read_bench.py), read once. None of it ever changes: a line and its transaction's lines
    are never updated, nor an account's role, and a wallet's number and its account's kind and
    name are not updatable (migrations/wallet/grants.sql). A line without one is not kept (looked
    up again next time)."""


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
