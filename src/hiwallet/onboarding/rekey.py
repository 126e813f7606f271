"""Key rotation: every sealed field re-sealed under the ring's active key, in batches.

Rotation: put the new key first in HIWALLET_ONBOARDING_DATA_KEYS (the old one after it), restart
the service (it seals new values with the new key and still opens old ones), run ``hiwallet
onboarding rekey``, then drop the old key. Each row's update is conditional on its sealed value
being the one read, so a value the service changed meanwhile is left to it (sealed with the
active key already). Safe to run again; a run after a complete one changes nothing."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from hiwallet.core.queries import load_queries
from hiwallet.core.uow import in_transaction
from hiwallet.onboarding.crypto import KeyRing, place

R = load_queries(Path(__file__).parent / "sql" / "rekey.sql")
# Every sealed column, by table (sql/rekey.sql has each one's statements).
SEALED: dict[str, tuple[str, ...]] = {
    "registrations": ("email_enc",),
    "customers": ("phone_enc", "tckn_enc", "given_name_enc", "family_name_enc", "birth_date_enc"),
    "phone_codes": ("phone_enc",),
}


@dataclass
class RekeyReport:
    rows: int = 0
    resealed: int = 0


async def count_rows(pool: asyncpg.Pool) -> int:
    total = 0
    for table in SEALED:
        total += await pool.fetchval(R[f"count_{table}"])
    return int(total)


async def rekey(
    pool: asyncpg.Pool, ring: KeyRing, *, batch: int = 500, progress: Callable[[int], None] | None = None
) -> RekeyReport:
    report = RekeyReport()
    for table, columns in SEALED.items():
        cursor = ""
        while True:
            rows = await pool.fetch(R[f"sealed_{table}"], cursor, batch)
            if not rows:
                break
            report.resealed += await in_transaction(
                pool, functools.partial(_reseal, ring=ring, table=table, columns=columns, rows=rows)
            )
            report.rows += len(rows)
            cursor = rows[-1]["row_id"]
            if progress is not None:
                progress(len(rows))
    return report


async def _reseal(
    conn: asyncpg.Connection,
    *,
    ring: KeyRing,
    table: str,
    columns: Sequence[str],
    rows: Sequence[asyncpg.Record],
) -> int:
    """One page of ``table``, sealed again under the current key: how many values changed (a
    value changed meanwhile by its service is left alone: the UPDATE names the old one)."""
    resealed = 0
    for row in rows:
        for column in columns:
            old = row[column]
            if old is None or not ring.needs_rekey(old):
                continue
            where = place(table, column, row["row_id"])
            new = ring.seal(ring.open(old, where), where)
            status = await conn.execute(R[f"reseal_{table}_{column}"], new, row["row_id"], old)
            resealed += int(status.split()[-1])
    return resealed
