"""The saga's hot lookups stay index probes in the plan a session keeps.

A prepared statement's generic plan is made once and kept for the session. Made while a table is
young (a few pages, no statistics yet: a new deployment, the bench's databases), "id = ANY ($1)"
or a join with the list was planned as a scan of the whole table, done again on every call as
the table grew: the withdrawal bench slowed minute by minute until autovacuum's first analyze.
Each query here is written (or, for the relay's session, configured) so that the probe is the
plan; this checks the generic plan on a young table: a few hundred rows, never analyzed."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from hiwallet.core import db
from hiwallet.core.queries import load_queries

SRC = Path(__file__).resolve().parents[1] / "src" / "hiwallet"
ROWS = 300  # about ten pages: the planner's guess for a table it knows nothing of, and past it

FILL = {
    "ledger.lines": "INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount,"
    " currency, balance_after, type, ref, posted_at, hash) SELECT 1, '0001:w:' || i, 1, '0001:t:' || i,"
    " 100, 'TRY', 100, 'topup', 'r', now(), '\\x00'::bytea FROM generate_series(1, $1) i",
    "wallet.processed_messages": "INSERT INTO wallet.processed_messages SELECT 'c' || i,"
    " 'DebitForWithdrawal', 's' || i, 'WithdrawalDebited', '{\"a\": 1}'::jsonb, now()"
    " FROM generate_series(1, $1) i",
    "withdrawal.sagas": "INSERT INTO withdrawal.sagas (id, wallet, amount_minor, currency,"
    " destination_iban, requested_by_issuer, requested_by_subject, state, state_actor)"
    " SELECT 's' || i, '0001:w:x', 100, 'TRY', 'TR330006100519786457841326', 'i', 's', 'initiated', 'a'"
    " FROM generate_series(1, $1) i",
    "withdrawal.processed_events": "INSERT INTO withdrawal.processed_events (consumer, message_id)"
    " SELECT 'withdrawal-orchestrator', 'm' || i FROM generate_series(1, $1) i",
    "withdrawal.outbox": "INSERT INTO withdrawal.outbox (message_id, exchange, routing_key, message_type,"
    " body) SELECT gen_random_uuid()::text, 'x', 'DebitForWithdrawal', 'DebitForWithdrawal', '{}'::jsonb"
    " FROM generate_series(1, $1) i",
}


async def young_generic_plan(database: str, table: str, sql: str, args: str, *, session: str = "") -> str:
    """``sql``'s generic plan once ``table`` holds ROWS rows it has no statistics of."""
    conn = await asyncpg.connect(db.owner_dsn(database))
    try:
        await conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        await conn.execute(FILL[table], ROWS)
        await conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
        assert await conn.fetchval("SELECT reltuples FROM pg_class WHERE oid = $1::regclass", table) < 0
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        if session:
            await conn.execute(session)
        await conn.execute(f"PREPARE probe AS {sql}")
        return "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE probe({args})"))
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("file", "name", "args", "table"),
    [
        (
            "ledger/sql/queries.sql",
            "lines_exist",
            "NULL::smallint[], NULL::text[], NULL::text[]",
            "ledger.lines",
        ),
        (
            "wallet_consumer/sql/withdrawals.sql",
            "stored_responses",
            "NULL::text[]",
            "wallet.processed_messages",
        ),
    ],
)
async def test_the_wallet_databases_batch_lookups_probe_an_index(
    wallet_db: str, file: str, name: str, args: str, table: str
) -> None:
    plan = await young_generic_plan(wallet_db, table, load_queries(SRC / file)[name], args)
    assert "Seq Scan" not in plan and "Index Scan" in plan, plan


async def test_the_orchestrators_saga_locks_probe_the_primary_key(withdrawal_db: str) -> None:
    sql = load_queries(SRC / "withdrawals/sql/queries.sql")["sagas_for_update"]
    plan = await young_generic_plan(withdrawal_db, "withdrawal.sagas", sql, "NULL::text[]")
    assert "Seq Scan" not in plan and "Index Scan using sagas_pkey" in plan, plan


async def test_the_relays_session_marks_by_the_primary_key(withdrawal_db: str) -> None:
    """core.outbox.Relay's session turns sequential scans off (every statement of it is a
    lookup by key); without that, the plan of mark_sent on a young outbox is a scan."""
    sql = load_queries(SRC / "core/sql/outbox.sql")["mark_sent"].format(table="withdrawal.outbox")
    plan = await young_generic_plan(
        withdrawal_db, "withdrawal.outbox", sql, "NULL::bigint[]", session="SET enable_seqscan = off"
    )
    assert "Seq Scan" not in plan and "outbox_pkey" in plan, plan
    without = await young_generic_plan(withdrawal_db, "withdrawal.outbox", sql, "NULL::bigint[]")
    assert "Seq Scan" in without, without  # what the setting is for
    assert 'await conn.execute("SET enable_seqscan = off")' in (SRC / "core/outbox.py").read_text()


async def test_a_batchs_outcomes_are_stored_by_primary_key_probes(withdrawal_db: str) -> None:
    """core.consumer's store_outcomes: a probe a message, not every row of the consumer."""
    sql = load_queries(SRC / "core/sql/consumer.sql")["store_outcomes"].format(
        table="withdrawal.processed_events"
    )
    plan = await young_generic_plan(
        withdrawal_db, "withdrawal.processed_events", sql, "NULL::text, NULL::text[], NULL::text[]"
    )
    assert "Index Scan using processed_events_pkey" in plan and "Tid Scan" in plan, plan
    assert "Seq Scan" not in plan and "Bitmap" not in plan, plan
