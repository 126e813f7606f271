"""The posting functions before and after migration 0008, side by side: the time of one call of
``ledger.post_batch`` and of ``wallet.transfer_batch`` per batch size, in two databases of the
same server, one migrated to 0007 (fifteen parallel arrays) and one to 0008 (one array of
``ledger.posting_in``).

    .venv/bin/python bench/posting_sql_bench.py [--seconds 20] [--sizes 1,2,8,100,1000]

Also the store's single posting (``ledger.post`` before, ``ledger.post_batch`` of one after).
Each call posts a batch of p2p transfers of 1 kuruş between distinct funded wallets, with fresh
ids, in autocommit. The two databases are called in turn (before, after, before, ...), so that
the load of a shared machine falls on both alike. Reported per size and database, as medians:
- ``server_us``: the call's time inside the server, from the statement's start to the end of
  the function (``clock_timestamp() - statement_timestamp()`` after it, in the same row);
- ``wall_us``: the client's time for the round trip, encoding the arguments included;
- ``cpu_us``: the server process's CPU time (user and system, from /proc) over all calls, per
  call: decoding the arguments, the function and the commit, and none of the waits for a CPU
  that make the times above noisy on a loaded machine. Only when the server runs on this host.

``wallet.transfer_batch`` runs with no monthly limit (kind null), and every transfer goes on to
its posting. Both databases are dropped at the end. A short targeted measurement: not a load.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.ledger import rules
from hiwallet.ledger.accounts import bucket_of, cash_account, new_wallet_id, promo_account
from hiwallet.ledger.model import Posting
from hiwallet.ledger.store import LedgerStore, Q, init_connection

FUNDING_MINOR = 10**12
ISSUER = "bench"
OLD_VERSION = 7  # the last migration before 0008

_OLD_BATCH = "SELECT ledger.post_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
_NEW_BATCH = Q["post_batch"]
_OLD_POST = "SELECT ledger.post($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
_NEW_POST = Q["post"]
_OLD_TRANSFER = "SELECT wallet.transfer_batch({})".format(", ".join(f"${i}" for i in range(1, 35)))
_NEW_TRANSFER = "SELECT wallet.transfer_batch({})".format(", ".join(f"${i}" for i in range(1, 21)))


def _timed(query: str) -> str:
    # the function runs first in the row, the clock is read after it
    elapsed_us = "(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1e6)::bigint"
    return f"SELECT r, {elapsed_us} FROM ({query} AS r) AS q"


def old_batch_arguments(store: LedgerStore, postings: Sequence[Posting]) -> tuple[Any, ...]:
    """``ledger.post_batch``'s fifteen arrays of 0002 (the store's code before 0008)."""
    calls = [store._arguments(p) for p in postings]
    return (
        [c.id for c in calls],
        [c.home for c in calls],
        [c.type for c in calls],
        [c.actor for c in calls],
        [c.ref for c in calls],
        [c.request_hash for c in calls],
        store.transit_legs,
        [c.refund_of for c in calls],
        [c.metadata for c in calls],
        [len(c.accounts) for c in calls],
        [b for c in calls for b in c.buckets],
        [a for c in calls for a in c.accounts],
        [m for c in calls for m in c.amounts],
        [cur for c in calls for cur in c.currencies],
        [c.options for c in calls],
    )


def _jsonb_text(value: Any) -> str:
    return orjson.dumps(value).decode()


async def _old_init(conn: asyncpg.Connection) -> None:
    """init_connection as it was before 0008: jsonb as text through orjson."""
    await conn.set_type_codec("jsonb", encoder=_jsonb_text, decoder=orjson.loads, schema="pg_catalog")


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(pid: int) -> float | None:
    """User and system CPU time of a process of this host, or None if it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14, 15)


class Side:
    """One database and what it takes to post into it."""

    def __init__(self, name: str, database: str, new: bool) -> None:
        self.name = name
        self.database = database
        self.new = new
        self.conn: asyncpg.Connection
        self.store: LedgerStore
        self.wallets: list[str] = []
        self.account_of: dict[str, str] = {}

    async def open(self, wallets: int) -> None:
        settings = get_settings()
        await db.ensure_database(self.database, settings)
        migrations = db.load_migrations(settings.migrations_dir / "wallet")
        if not self.new:
            migrations = [m for m in migrations if m.version <= OLD_VERSION]
        conn = await asyncpg.connect(db.dsn_for(self.database, settings))
        try:
            await db.apply_migrations(conn, migrations)
        finally:
            await conn.close()
        # synchronous_commit off: a commit's WAL flush is not what is compared, and it is the
        # noisiest part of a call on a shared disk
        self.conn = await asyncpg.connect(
            db.dsn_for(self.database, settings), server_settings={"synchronous_commit": "off"}
        )
        await (init_connection if self.new else _old_init)(self.conn)
        self.backend_pid = int(await self.conn.fetchval("SELECT pg_backend_pid()"))
        # the store only builds arguments here (no pool, no coalescing)
        self.store = LedgerStore(None, coalesce_writers=0)  # type: ignore[arg-type]
        await self._open_wallets(wallets)

    async def _open_wallets(self, count: int) -> None:
        now = "now()"
        buckets = [1 + i % 1023 for i in range(count)]
        self.wallets = [new_wallet_id(b) for b in buckets]
        for w in self.wallets:
            self.account_of[w] = f"{bucket_of(w):04d}:a:{uuid.uuid4().hex}"
        rows = [(bucket_of(w), w) for w in self.wallets]
        await self.conn.executemany(
            f"""INSERT INTO ledger.accounts (bucket, id, role, purse, currency, owner, created_at)
                VALUES ($1, $2, 'user_wallet', $3, 'TRY', 'bench', {now})""",
            [(b, cash_account(w), "cash") for b, w in rows]
            + [(b, promo_account(w), "promo") for b, w in rows],
        )
        await self.conn.executemany(
            f"""INSERT INTO wallet.accounts (bucket, id, kind, tier, name, opened_by, created_at, updated_at)
                VALUES ($1, $2, 'personal', 'verified', NULL, 'bench', {now}, {now})""",
            [(b, self.account_of[w]) for b, w in rows],
        )
        await self.conn.executemany(
            f"""INSERT INTO wallet.members (bucket, account_id, issuer, subject, added_by, created_at)
                VALUES ($1, $2, '{ISSUER}', $3, 'bench', {now})""",
            [(b, self.account_of[w], w) for b, w in rows],
        )
        topups = [
            rules.topup(f"fund-{i}", w, FUNDING_MINOR, "TRY", provider="stripe", actor="bench", ref="fund")
            for i, w in enumerate(self.wallets)
        ]
        for i in range(0, len(topups), 500):
            await self.post_batch(topups[i : i + 500])

    async def post_batch(self, postings: Sequence[Posting]) -> int:
        if self.new:
            row = await self.conn.fetchrow(_timed(_NEW_BATCH), self.store.batch_arguments(postings))
        else:
            row = await self.conn.fetchrow(_timed(_OLD_BATCH), *old_batch_arguments(self.store, postings))
        assert row is not None
        if any("error" in answer for answer in row[0]):
            raise RuntimeError(f"{self.name}: a posting was refused: {row[0]}")
        return int(row[1])

    async def post(self, posting: Posting) -> int:
        """The store's single posting (``LedgerStore.post`` alone, or in a caller's transaction):
        ``ledger.post`` before, ``ledger.post_batch`` of one with its claim after."""
        row = await self.conn.fetchrow(
            _timed(_NEW_POST if self.new else _OLD_POST), *self.store._arguments(posting)
        )
        assert row is not None
        if "error" in row[0]:
            raise RuntimeError(f"{self.name}: the posting was refused: {row[0]}")
        return int(row[1])

    async def transfer_batch(self, postings: Sequence[Posting], pairs: Sequence[tuple[str, str]]) -> int:
        n = len(postings)
        keys = [uuid.uuid4().hex for _ in range(n)]
        src_accounts = [self.account_of[s] for s, _ in pairs]
        dst_accounts = [self.account_of[d] for _, d in pairs]
        wallet_args = (
            [bucket_of(s) for s, _ in pairs],
            ["bench"] * n,
            keys,
            [int.from_bytes(os.urandom(8), "big", signed=True) for _ in range(n)],
            [k.encode() for k in keys],
            [ISSUER] * n,
            [s for s, _ in pairs],
            src_accounts,
            ["verified"] * n,
            [bucket_of(d) for _, d in pairs],
            dst_accounts,
            ["verified"] * n,
            [date.today()] * n,
            [None] * n,
            [0] * n,
            ["TRY"] * n,
            [1] * n,
            [None] * n,
            [{"type": "p2p", "ref": "bench", "metadata": {}, "currency": "TRY"}] * n,
        )
        if self.new:
            row = await self.conn.fetchrow(
                _timed(_NEW_TRANSFER), *wallet_args, self.store.batch_arguments(postings)
            )
        else:
            row = await self.conn.fetchrow(
                _timed(_OLD_TRANSFER), *wallet_args, *old_batch_arguments(self.store, postings)
            )
        assert row is not None
        if any("result" not in answer for answer in row[0]):
            raise RuntimeError(f"{self.name}: a transfer did not post: {row[0][:3]}")
        return int(row[1])


def _batch(side: Side, size: int, turn: int) -> tuple[list[Posting], list[tuple[str, str]]]:
    """``size`` transfers between distinct wallets: source i, receiver i + size (rotating)."""
    w = side.wallets
    start = (turn * 2 * size) % len(w)
    pairs = [(w[(start + i) % len(w)], w[(start + size + i) % len(w)]) for i in range(size)]
    postings = [
        rules.transfer(f"t-{uuid.uuid4().hex}", s, d, 1, "TRY", actor="bench", ref="bench") for s, d in pairs
    ]
    return postings, pairs


async def measure(
    sides: Sequence[Side],
    size: int,
    seconds: float,
    call: Callable[[Side, int, int], Awaitable[tuple[int, int]]],
) -> dict[str, dict[str, float]]:
    """Calls in turn on each side until ``seconds`` have passed (at least 5 calls a side)."""
    server: dict[str, list[int]] = {s.name: [] for s in sides}
    wall: dict[str, list[float]] = {s.name: [] for s in sides}
    cpu_s: dict[str, float | None] = {s.name: 0.0 for s in sides}
    deadline = time.monotonic() + seconds
    turn = 0
    while time.monotonic() < deadline or turn < 5:
        for side in sides:
            cpu0 = _process_cpu_s(side.backend_pid)
            s_us, w_us = await call(side, size, turn)
            cpu1 = _process_cpu_s(side.backend_pid)
            server[side.name].append(s_us)
            wall[side.name].append(w_us)
            spent = cpu_s[side.name]
            cpu_s[side.name] = None if cpu0 is None or cpu1 is None or spent is None else spent + cpu1 - cpu0
        turn += 1
    return {
        s.name: {
            "calls": len(server[s.name]),
            "server_us": statistics.median(server[s.name]),
            "wall_us": statistics.median(wall[s.name]),
            "cpu_us": (cpu_s[s.name] or math.nan) * 1e6 / len(server[s.name]),
        }
        for s in sides
    }


async def _post_call(side: Side, size: int, turn: int) -> tuple[int, int]:
    postings, _ = _batch(side, size, turn)
    t0 = time.perf_counter()
    server_us = await side.post_batch(postings)
    return server_us, int((time.perf_counter() - t0) * 1e6)


async def _single_call(side: Side, size: int, turn: int) -> tuple[int, int]:
    postings, _ = _batch(side, 1, turn)
    t0 = time.perf_counter()
    server_us = await side.post(postings[0])
    return server_us, int((time.perf_counter() - t0) * 1e6)


async def _transfer_call(side: Side, size: int, turn: int) -> tuple[int, int]:
    postings, pairs = _batch(side, size, turn)
    t0 = time.perf_counter()
    server_us = await side.transfer_batch(postings, pairs)
    return server_us, int((time.perf_counter() - t0) * 1e6)


def _pair(before: float, after: float) -> str:
    return f"  {before:>9.0f} → {after:<9.0f} ({after / before:.2f})"


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="in all, spread over the sizes")
    parser.add_argument("--sizes", default="1,2,8,100,1000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    prefix = f"hwbench{os.getpid()}"
    sides = [Side("0007", f"{prefix}_before", new=False), Side("0008", f"{prefix}_after", new=True)]
    wallets = 2 * max(sizes)
    try:
        for side in sides:
            await side.open(wallets)
        # both functions' plans cached, and the first pages read, before anything is timed
        for side in sides:
            await _single_call(side, 1, 0)
            for size in sizes:
                await _post_call(side, size, 0)
                await _transfer_call(side, size, 0)
        # each (function, size) gets an equal share of the time; a call of 1,000 takes longer
        share = args.seconds / (2 * len(sizes) + 1)
        print(
            f"{'function':<22}{'size':>6}{'calls':>7}"
            "   server µs 0007 → 0008          wall µs 0007 → 0008           cpu µs 0007 → 0008"
        )
        got = await measure(sides, 1, share, _single_call)
        pairs = (_pair(got["0007"][key], got["0008"][key]) for key in ("server_us", "wall_us", "cpu_us"))
        print(f"{'one posting (post)':<22}{1:>6}{got['0007']['calls']:>7}", *pairs, flush=True)
        for label, call in (("ledger.post_batch", _post_call), ("wallet.transfer_batch", _transfer_call)):
            for size in sizes:
                got = await measure(sides, size, share, call)
                before, after = got["0007"], got["0008"]
                pairs = (_pair(before[key], after[key]) for key in ("server_us", "wall_us", "cpu_us"))
                print(f"{label:<22}{size:>6}{before['calls']:>7}", *pairs, flush=True)
    finally:
        for side in sides:
            if hasattr(side, "conn"):
                await side.conn.close()
        admin = await asyncpg.connect(db.dsn_for("postgres", get_settings()))
        try:
            for side in sides:
                await admin.execute(f'DROP DATABASE IF EXISTS "{side.database}" WITH (FORCE)')
        finally:
            await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
