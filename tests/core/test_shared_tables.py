"""The platform's tables in every database: each database's migrated outbox, processed_events
and idempotency table has exactly the shape of the one definition in core (columns, types,
defaults, constraints, indexes, the outbox's guard trigger) and the application role exactly
the privileges the platform's code needs of it.

The definition is made beside the migrated table, in a scratch schema of the same (cloned)
database, and the two are read back from the catalog: whatever a migration did differently (a
column's default, a constraint's name, an index left out, a grant too many) shows."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from hiwallet.core import db
from hiwallet.core.consumer import CONSUMER_PRIVILEGES, processed_events_sql
from hiwallet.core.idempotency import STORE_PRIVILEGES
from hiwallet.core.outbox import RELAY_PRIVILEGES, outbox_keeps_unsent_sql, outbox_table_sql
from hiwallet.wallet_api.idempotency import TABLE_SQL as WALLET_IDEMPOTENCY_SQL
from hiwallet.withdrawals.service import IDEMPOTENCY_TABLE_SQL as WITHDRAWAL_IDEMPOTENCY_SQL
from tests import pgtemplate

SCRATCH = "hwt_definition"
MIGRATIONS = Path(__file__).parents[2] / "migrations"
_SHARED_TABLE = re.compile(r"^CREATE TABLE (\w+\.(?:outbox|processed_events|idempotency_keys)) \(", re.M)
_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


def _outbox(table: str) -> str:
    # Every outbox wakes its relay with core.outbox.RelayHint (no NOTIFY trigger), and keeps
    # its unsent rows.
    return outbox_table_sql(table, table.replace(".", "_"), notify_trigger=False) + outbox_keeps_unsent_sql(
        table
    )


@dataclass(frozen=True)
class Shared:
    key: str  # the database key (its fixture is <key>_db)
    table: str  # as migrated
    definition: Any  # table name -> the one definition's DDL for it
    privileges: frozenset[str]  # the application role's, exactly
    own_triggers: frozenset[str] = field(default_factory=frozenset)  # a service's own, beside
    # the service whose role holds it when it is not the database's first service's
    # (contracts.databases.SERVICE_ROLES)
    service: str | None = None


TABLES = [
    Shared("wallet", "wallet.outbox", _outbox, RELAY_PRIVILEGES | {"INSERT"}, service="wallet_consumer"),
    Shared("topup", "topup.outbox", _outbox, RELAY_PRIVILEGES),  # written through its functions
    Shared("bank", "bank.outbox", _outbox, RELAY_PRIVILEGES),  # written through its functions
    Shared(
        "withdrawal",
        "withdrawal.outbox",
        _outbox,
        RELAY_PRIVILEGES | {"INSERT"},
        frozenset({"outbox_guard"}),  # a command only as its saga's state calls for it
    ),
    Shared(
        "wallet",
        "public.processed_events",
        processed_events_sql,
        CONSUMER_PRIVILEGES,
        service="wallet_consumer",
    ),
    Shared("withdrawal", "withdrawal.processed_events", processed_events_sql, CONSUMER_PRIVILEGES),
    Shared("bank", "bank.processed_events", processed_events_sql, CONSUMER_PRIVILEGES),
    Shared("onboarding", "onboarding.processed_events", processed_events_sql, CONSUMER_PRIVILEGES),
    Shared(
        "wallet",
        "wallet.idempotency_keys",
        lambda t: WALLET_IDEMPOTENCY_SQL.replace("wallet.idempotency_keys", t),
        STORE_PRIVILEGES,
    ),
    Shared(
        "withdrawal",
        "withdrawal.idempotency_keys",
        lambda t: WITHDRAWAL_IDEMPOTENCY_SQL.replace("withdrawal.idempotency_keys", t),
        STORE_PRIVILEGES,
    ),
]


async def _shape(conn: asyncpg.Connection, table: str, own_triggers: frozenset[str]) -> dict[str, Any]:
    """What the catalog says of ``table``, its schema's name taken out of the definitions."""
    schema = table.partition(".")[0]

    def bare(text: str) -> str:
        return text.replace(f" ON {schema}.", " ON ~.").replace(f"FUNCTION {schema}.", "FUNCTION ~.")

    columns = {
        r["attname"]: (r["type"], r["attnotnull"], r["default"], r["attidentity"])
        for r in await conn.fetch(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,"
            "       pg_get_expr(d.adbin, d.adrelid) AS default, a.attidentity"
            "  FROM pg_attribute a"
            "  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
            " WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            table,
        )
    }
    constraints = {
        r["conname"]: (r["contype"], r["def"])
        for r in await conn.fetch(
            "SELECT conname, contype::text, pg_get_constraintdef(oid) AS def FROM pg_constraint"
            " WHERE conrelid = $1::regclass",
            table,
        )
    }
    indexes = {
        r["relname"]: bare(r["def"])
        for r in await conn.fetch(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i"
            "  JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass",
            table,
        )
    }
    triggers = {
        r["tgname"]: (bare(r["def"]), r["prosrc"])
        for r in await conn.fetch(
            "SELECT t.tgname, pg_get_triggerdef(t.oid) AS def, p.prosrc FROM pg_trigger t"
            "  JOIN pg_proc p ON p.oid = t.tgfoid"
            " WHERE t.tgrelid = $1::regclass AND NOT t.tgisinternal",
            table,
        )
        if r["tgname"] not in own_triggers
    }
    return {"columns": columns, "constraints": constraints, "indexes": indexes, "triggers": triggers}


async def _privileges(conn: asyncpg.Connection, table: str, role: str) -> set[str]:
    """``role``'s privileges on ``table``: the table's, and UPDATE of single columns."""
    held = {
        p
        for p in _PRIVILEGES
        if await conn.fetchval("SELECT has_table_privilege($1, $2::regclass, $3)", role, table, p)
    }
    if "UPDATE" not in held:
        held |= {
            f"UPDATE ({r['attname']})"
            for r in await conn.fetch(
                "SELECT attname FROM pg_attribute WHERE attrelid = $2::regclass AND attnum > 0"
                "   AND NOT attisdropped AND has_column_privilege($1, $2::regclass, attnum, 'UPDATE')",
                role,
                table,
            )
        }
    return held


async def _check(key: str, database: str) -> None:
    tables = [s for s in TABLES if s.key == key]
    async with pgtemplate.owner_connection(database) as conn:
        await conn.execute(f"CREATE SCHEMA {SCRATCH}")
        for shared in tables:
            scratch = f"{SCRATCH}.{shared.table.partition('.')[2]}"
            await conn.execute(shared.definition(scratch))
            migrated = await _shape(conn, shared.table, shared.own_triggers)
            defined = await _shape(conn, scratch, frozenset())
            assert migrated["columns"], f"{shared.table} not found"
            assert migrated == defined, shared.table
            held = await _privileges(conn, shared.table, db.app_role(key, shared.service))
            assert held == set(shared.privileges), shared.table


# One test per database (its migrated template, cloned): every shared table it holds.
async def test_wallet(wallet_db: str) -> None:
    await _check("wallet", wallet_db)


async def test_withdrawal(withdrawal_db: str) -> None:
    await _check("withdrawal", withdrawal_db)


async def test_topup(topup_db: str) -> None:
    await _check("topup", topup_db)


async def test_bank(bank_db: str) -> None:
    await _check("bank", bank_db)


async def test_onboarding(onboarding_db: str) -> None:
    await _check("onboarding", onboarding_db)


def test_every_shared_table_of_every_database_is_checked() -> None:
    """A database that gains an outbox, a processed_events or an idempotency table (its
    generated schema.sql says so) is checked above, or this fails."""
    found = set()
    for folder in sorted(MIGRATIONS.iterdir()):
        schema = folder / "schema.sql"
        if schema.exists():
            for table in _SHARED_TABLE.findall(schema.read_text()):
                found.add((folder.name, table))
    assert found, "no schema.sql read"
    assert found == {(s.key, s.table) for s in TABLES}
