"""Fill a wallet database with years of books, through the ledger's own batched path (issue 26).

    .venv/bin/python bench/growth_loader.py --lines 10_000_000 --wallets 1_000_000 --database NAME

The database (the ledger's schema, migrated as every bench does) is kept: a second run finds it
at its size and does nothing, or tops it up to the size asked. What it holds:

- ``--wallets`` wallets (owner ``growth``), spread over the 1,023 customer buckets, each funded
  by one top-up (``rules.topup``: 2 lines);
- one "heavy" wallet (owner ``growth-heavy``) that takes part in transfers until it has
  ``--heavy-lines`` lines (100,000 by default: a statement page of a long-lived wallet);
- p2p transfers (``rules.transfer``: 2 lines, 4 with transit legs across buckets) among random
  wallets until ``ledger.lines`` holds ``--lines`` lines.

Every posting goes through ``LedgerStore.post_batch``, ``--batch`` (1,000) a batch, by
``--writers`` concurrent writers. Writer k owns the buckets b with b % writers == k and moves
money only among its own wallets: their clearing and transit sub-accounts are its own too, so two
writers' locks never cross (no waits, no deadlocks), as in bench/ledger_bench.py's batched run.

Opening the wallets uses ``LedgerStore.open_wallets``: ``--batch`` wallets in two statements
and one commit (the same accounts as ``open_wallet`` opens one at a time, three statements each).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import uvloop
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import benchlog
from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.ledger import rules
from hiwallet.ledger.accounts import BUCKETS, bucket_of, new_wallet_id, wallet_of
from hiwallet.ledger.model import Posting
from hiwallet.ledger.store import LedgerStore, init_connection

OWNER = "growth"
HEAVY_OWNER = "growth-heavy"
CURRENCY = "TRY"
FUNDING_MINOR = 10**12  # no transfer of the loader or the bench is ever refused for funds
HEAVY_LINES = 100_000
CUSTOMER_BUCKETS = range(1, BUCKETS)
# On 2 cores, 3 writers left each backend waiting for the loader's one thread a third of the time
# (pg_stat_activity: ClientRead); 8 load 1.20x the lines/s of 3 (4 interleaved rounds, 1.16-1.27;
# docs/performance.md, "How cost grows"), 10 little more than 6.
WRITERS = 8


@dataclass
class State:
    """What the database holds now, as far as the loader is concerned."""

    wallets: list[str] = field(default_factory=list)
    heavy: str | None = None
    heavy_lines: int = 0
    lines: int = 0


async def ensure_database(name: str) -> bool:
    """Create and migrate the database if it is not there; True if it was created. Migrating
    an existing one is a no-op (the migrations are numbered and recorded)."""
    settings = get_settings()
    admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
    finally:
        await admin.close()
    await databases.migrate("wallet", database=name, settings=settings)
    return not exists


async def read_state(owner: asyncpg.Connection) -> State:
    state = State()
    rows = await owner.fetch(
        "SELECT id, owner, version FROM ledger.accounts"
        " WHERE owner = ANY ($1::text[]) AND purse = 'cash' ORDER BY id",
        [OWNER, HEAVY_OWNER],
    )
    for r in rows:
        if r["owner"] == HEAVY_OWNER:
            state.heavy, state.heavy_lines = wallet_of(r["id"]), r["version"]
        else:
            state.wallets.append(wallet_of(r["id"]))
    state.lines = await owner.fetchval("SELECT count(*) FROM ledger.lines")
    return state


class Loader:
    def __init__(self, store: LedgerStore, writers: int, batch: int, seed: int = 26) -> None:
        self.store = store
        self.writers = writers
        self.batch = batch
        self.run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        self.rng = random.Random(seed)
        self.lines_posted = 0
        self.refused = 0
        self.calls = 0

    def group_of(self, wallet: str) -> int:
        return bucket_of(wallet) % self.writers

    def groups(self, wallets: list[str]) -> list[list[str]]:
        """Each writer's wallets, in one pass (a million wallets: one parse each, not one per
        writer)."""
        groups: list[list[str]] = [[] for _ in range(self.writers)]
        for w in wallets:
            groups[self.group_of(w)].append(w)
        return groups

    def lines_of(self, sender: str, receiver: str) -> int:
        if not self.store.transit_legs:
            return 2
        # (the wallet id starts with its bucket: compared as text, not parsed twice again)
        return 4 if sender[:4] != receiver[:4] else 2

    async def _post(self, postings: list[Posting]) -> None:
        for i in range(0, len(postings), self.batch):
            results = await self.store.post_batch(postings[i : i + self.batch])
            refusals = [r for r in results if isinstance(r, Exception)]
            self.refused += len(refusals)
            if refusals:
                print(repr(refusals[:3]), file=sys.stderr)

    async def open_wallets(self, count: int, owner: str, progress: Progress) -> list[str]:
        """``count`` new wallets, round-robin over the customer buckets, each funded by a top-up
        (its 2 lines counted). One writer per bucket group, as for the transfers."""
        task = progress.add_task(f"open + fund {count:,} wallets ({owner})", total=count)
        start = self.rng.randrange(len(CUSTOMER_BUCKETS))
        wallets = [new_wallet_id(CUSTOMER_BUCKETS[(start + i) % len(CUSTOMER_BUCKETS)]) for i in range(count)]
        groups = self.groups(wallets)

        async def writer(mine: list[str]) -> None:
            for i in range(0, len(mine), self.batch):
                chunk = mine[i : i + self.batch]
                await self.store.open_wallets(chunk, CURRENCY, owner=owner)
                await self._post(
                    [
                        rules.topup(
                            f"growth-fund-{self.run_id}-{w}",
                            w,
                            FUNDING_MINOR,
                            CURRENCY,
                            provider="bank",
                            actor="growth-loader",
                            ref="fund",
                        )
                        for w in chunk
                    ]
                )
                self.lines_posted += 2 * len(chunk)
                progress.advance(task, len(chunk))

        await asyncio.gather(*(writer(g) for g in groups))
        return wallets

    async def transfers(
        self,
        wallets: list[str],
        lines: int,
        progress: Progress,
        *,
        heavy: str | None = None,
        label: str = "p2p transfers",
    ) -> int:
        """Transfers among ``wallets`` until about ``lines`` lines are posted (each writer among
        its own group). With ``heavy``, every transfer has the heavy wallet on one side (in
        turn sender and receiver) and ``lines`` counts the heavy wallet's lines."""
        task = progress.add_task(label, total=lines)
        groups = self.groups(wallets)
        if heavy is not None:
            k = self.group_of(heavy)
            groups = [groups[k] if i == k else [] for i in range(self.writers)]
        groups_ok = [g for g in groups if len(g) >= 2 or (heavy is not None and g)]
        if not groups_ok:
            raise SystemExit("too few wallets per writer: raise --wallets or lower --writers")
        share = -(-lines // len(groups_ok))
        posted = 0
        self.calls += 1
        call = self.calls  # each call's keys its own

        async def writer(k: int, mine: list[str]) -> None:
            nonlocal posted
            rng = random.Random(f"{self.run_id}-{k}")
            mine_lines = 0
            n = 0
            while mine_lines < share:
                postings = []
                batch_lines = 0
                while len(postings) < self.batch and mine_lines + batch_lines < share:
                    if heavy is not None:
                        other = rng.choice(mine)
                        a, b = (heavy, other) if n % 2 else (other, heavy)
                        step = 1
                    else:
                        # (two indexes, not rng.sample: a tenth of the loader's CPU went there)
                        i, j = rng.randrange(len(mine)), rng.randrange(len(mine) - 1)
                        a, b = mine[i], mine[j + (j >= i)]
                        step = self.lines_of(a, b)
                    postings.append(
                        rules.transfer(
                            f"growth-{self.run_id}-{call}-{k}-{n}",
                            a,
                            b,
                            rng.randint(1, 10_000),
                            CURRENCY,
                            actor="growth-loader",
                            ref="p2p",
                        )
                    )
                    self.lines_posted += self.lines_of(a, b)
                    batch_lines += step
                    n += 1
                await self._post(postings)
                mine_lines += batch_lines
                posted += batch_lines
                progress.advance(task, batch_lines)

        await asyncio.gather(*(writer(k, g) for k, g in enumerate(groups) if g in groups_ok))
        return posted


def make_progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=benchlog.console,
        refresh_per_second=2,
    )


async def load(
    database: str,
    *,
    lines: int,
    wallets: int,
    heavy_lines: int = HEAVY_LINES,
    writers: int = WRITERS,
    batch: int = 1_000,
    quiet: bool = False,
) -> dict[str, Any]:
    """Bring ``database`` up to ``wallets`` wallets (plus the heavy one), the heavy wallet up to
    ``heavy_lines`` lines and the ledger up to ``lines`` lines; what it found and did."""
    if wallets < 2 * writers:
        raise SystemExit(f"--wallets must be at least {2 * writers} (two per writer)")
    settings = get_settings()
    created = await ensure_database(database)
    pool = await db.create_pool(
        database,
        role=db.app_role("wallet"),
        settings=settings,
        min_size=writers,
        max_size=writers + 2,
        init=init_connection,
    )
    owner = await asyncpg.connect(db.owner_dsn(database, settings))
    try:
        store = LedgerStore.from_settings(pool)
        loader = Loader(store, writers, batch)
        before = await read_state(owner)
        state = State(list(before.wallets), before.heavy, before.heavy_lines, before.lines)
        started = time.perf_counter()
        progress = make_progress()
        with progress if not quiet else _Silent():
            _rate_fields(progress)
            opened = wallets - len(state.wallets)
            if opened > 0:
                state.wallets += await loader.open_wallets(opened, OWNER, progress)
            opening = time.perf_counter() - started
            if state.heavy is None:
                state.heavy = (await loader.open_wallets(1, HEAVY_OWNER, progress))[0]
                state.heavy_lines = 1
            if state.heavy_lines < heavy_lines:
                await loader.transfers(
                    state.wallets,
                    heavy_lines - state.heavy_lines,
                    progress,
                    heavy=state.heavy,
                    label="heavy wallet's transfers",
                )
            # until the count is reached: a cross-bucket transfer's lines (transit legs) or a
            # refusal make the estimate short
            while (now := await owner.fetchval("SELECT count(*) FROM ledger.lines")) < lines:
                await loader.transfers(state.wallets, lines - now, progress)
        elapsed = time.perf_counter() - started
        did_work = loader.lines_posted > 0
        if did_work:
            # as a bench's own runs expect: statistics up to date, nothing left to vacuum
            await owner.execute(
                "VACUUM (ANALYZE) ledger.accounts, ledger.transactions, ledger.lines", timeout=3600
            )
        after = await read_state(owner)
    finally:
        await pool.close()
        await owner.close()
    return {
        "database": database,
        "created": created,
        "asked": {"lines": lines, "wallets": wallets, "heavy_lines": heavy_lines},
        "found": {"lines": before.lines, "wallets": len(before.wallets), "heavy_lines": before.heavy_lines},
        "now": {"lines": after.lines, "wallets": len(after.wallets), "heavy_lines": after.heavy_lines},
        "heavy_wallet": after.heavy,
        "lines_posted": after.lines - before.lines,
        "refused": loader.refused,
        "seconds": round(elapsed, 1),
        "lines_per_s": round((after.lines - before.lines) / elapsed, 1) if did_work else None,
        # the two phases apart: opening and funding the wallets, then the transfers
        "wallets_per_s": round(opened / opening, 1) if opened > 0 else None,
        "transfer_lines_per_s": (
            round((after.lines - before.lines - 2 * max(opened, 0)) / (elapsed - opening), 1)
            if elapsed > opening and did_work
            else None
        ),
        "writers": writers,
        "batch": batch,
    }


class _Silent:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _rate_fields(progress: Progress) -> None:
    """Each task shows its own rate (lines or wallets per second) next to its bar."""
    original = progress.add_task

    def add_task(description: str, **kwargs: Any) -> Any:
        kwargs.setdefault("rate", "")
        return original(description, **kwargs)

    progress.add_task = add_task  # type: ignore[method-assign]
    original_advance = progress.advance

    def advance(task_id: Any, amount: float = 1) -> None:
        original_advance(task_id, amount)
        task = progress.tasks[task_id]
        if task.elapsed:
            progress.update(task_id, rate=f"{task.completed / task.elapsed:,.0f}/s")

    progress.advance = advance  # type: ignore[method-assign]


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=lambda s: int(s.replace("_", "")), default=10_000_000)
    parser.add_argument("--wallets", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--heavy-lines", type=lambda s: int(s.replace("_", "")), default=HEAVY_LINES)
    parser.add_argument("--database", default="hiwallet_growth")
    parser.add_argument(
        "--writers", type=int, default=WRITERS, help="concurrent writers (disjoint bucket groups)"
    )
    parser.add_argument("--batch", type=int, default=1_000, help="postings per post_batch")
    args = parser.parse_args()
    benchlog.to_file()
    report = uvloop.run(
        load(
            args.database,
            lines=args.lines,
            wallets=args.wallets,
            heavy_lines=args.heavy_lines,
            writers=args.writers,
            batch=args.batch,
        )
    )
    benchlog.console.print(report)
    sys.exit(0)


if __name__ == "__main__":
    cli()
