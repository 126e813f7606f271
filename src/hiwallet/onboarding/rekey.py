"""Key rotation: every sealed field re-sealed under the ring's active key, in batches.

Rotation: put the new key first in HIWALLET_ONBOARDING_DATA_KEYS (the old one after it), restart
the service (it seals new values with the new key and still opens old ones), run ``hiwallet
onboarding rekey``, then drop the old key. Each row's update is conditional on its sealed value
being the one read, so a value the service changed meanwhile is left to it (sealed with the
active key already). Safe to run again; a run after a complete one changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from hiwallet.onboarding.crypto import KeyRing, place

# Every sealed column, by table and the column naming its row (the AAD's row id).
SEALED: dict[str, tuple[str, tuple[str, ...]]] = {
    "registrations": ("id", ("email_enc",)),
    "customers": ("id", ("phone_enc", "tckn_enc", "given_name_enc", "family_name_enc", "birth_date_enc")),
    "phone_codes": ("customer_id", ("phone_enc",)),
}


@dataclass
class RekeyReport:
    rows: int = 0
    resealed: int = 0


async def count_rows(pool: asyncpg.Pool) -> int:
    total = 0
    for table in SEALED:
        total += await pool.fetchval(f"SELECT count(*) FROM onboarding.{table}")  # names from SEALED
    return int(total)


async def rekey(
    pool: asyncpg.Pool, ring: KeyRing, *, batch: int = 500, progress: Callable[[int], None] | None = None
) -> RekeyReport:
    report = RekeyReport()
    for table, (key, columns) in SEALED.items():
        cursor = ""
        listed = ", ".join(columns)
        while True:
            rows = await pool.fetch(
                f"SELECT {key} AS row_id, {listed} FROM onboarding.{table}"
                f" WHERE {key} > $1 ORDER BY {key} LIMIT $2",
                cursor,
                batch,
            )
            if not rows:
                break
            async with pool.acquire() as conn, conn.transaction():
                for row in rows:
                    for column in columns:
                        old = row[column]
                        if old is None or not ring.needs_rekey(old):
                            continue
                        where = place(table, column, row["row_id"])
                        new = ring.seal(ring.open(old, where), where)
                        status = await conn.execute(
                            f"UPDATE onboarding.{table} SET {column} = $1 WHERE {key} = $2 AND {column} = $3",
                            new,
                            row["row_id"],
                            old,
                        )
                        report.resealed += int(status.split()[-1])
            report.rows += len(rows)
            cursor = rows[-1]["row_id"]
            if progress is not None:
                progress(len(rows))
    return report
