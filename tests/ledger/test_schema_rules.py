"""The schema is ready for Citus: checked on plain PostgreSQL against the checked-in table map
(src/hiwallet/ledger/citus_tables.json), as scale-out.md's checklist asks (items 1-4, 15)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from hiwallet.core import db
from hiwallet.core.queries import load_queries
from hiwallet.ledger.accounts import cash_account
from hiwallet.ledger.service import Ledger
from tests.ledger.conftest import TL, funded_wallet

LEDGER = Path(__file__).parents[2] / "src" / "hiwallet" / "ledger"
MAP = json.loads((LEDGER / "citus_tables.json").read_text())
DISTRIBUTED = {t for t, kind in MAP["tables"].items() if kind == "distributed"}
KEY = MAP["distribution_column"]


async def test_every_table_is_in_the_map(pool: asyncpg.Pool) -> None:
    rows = await pool.fetch(
        "SELECT schemaname || '.' || tablename AS t FROM pg_tables"
        " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
    )
    assert {r["t"] for r in rows} == set(MAP["tables"])
    assert set(MAP["tables"].values()) <= {"distributed", "reference", "local"}


async def test_distributed_tables_lead_every_key_with_the_bucket(pool: asyncpg.Pool) -> None:
    problems: list[str] = []
    for table in sorted(DISTRIBUTED):
        col = await pool.fetchrow(
            "SELECT a.attnotnull, a.attgenerated <> '' AS attgenerated,"
            " format_type(a.atttypid, a.atttypmod) AS type"
            " FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attname = $2",
            table,
            KEY,
        )
        if col is None or not col["attnotnull"] or col["attgenerated"] or col["type"] != "smallint":
            problems.append(f"{table}: {KEY} must be a plain smallint NOT NULL column")
            continue
        # primary keys and unique indexes (constraints or not) begin with the bucket
        for idx in await pool.fetch(
            "SELECT i.indexrelid::regclass::text AS name,"
            " (SELECT attname FROM pg_attribute"
            "   WHERE attrelid = i.indrelid AND attnum = i.indkey[0]) AS first"
            " FROM pg_index i WHERE i.indrelid = $1::regclass AND (i.indisunique OR i.indisprimary)",
            table,
        ):
            if idx["first"] != KEY:
                problems.append(f"{table}: unique index {idx['name']} does not begin with {KEY}")
        # foreign keys: only to distributed or reference tables, with the bucket on both sides
        for fk in await pool.fetch(
            "SELECT conname, confrelid::regclass::text AS target,"
            " (SELECT attname FROM pg_attribute WHERE attrelid = conrelid AND attnum = conkey[1]) AS src,"
            " (SELECT attname FROM pg_attribute WHERE attrelid = confrelid AND attnum = confkey[1]) AS dst"
            " FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'f'",
            table,
        ):
            kind = MAP["tables"].get(fk["target"])
            if kind == "distributed" and (fk["src"], fk["dst"]) != (KEY, KEY):
                problems.append(f"{table}: foreign key {fk['conname']} does not join on {KEY}")
            elif kind not in ("distributed", "reference"):
                problems.append(f"{table}: foreign key {fk['conname']} points at {kind} {fk['target']}")
    assert not problems, problems


async def test_no_sequences_or_generated_keys(pool: asyncpg.Pool) -> None:
    """Ids and times come from the application or the posting function, never a sequence or a
    generated column (scale-out.md checklist item 11)."""
    seqs = await pool.fetch("SELECT sequencename FROM pg_sequences WHERE schemaname = 'ledger'")
    assert not seqs
    generated = await pool.fetch(
        "SELECT attrelid::regclass::text AS t, attname FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'ledger' AND (a.attgenerated <> '' OR a.attidentity <> '')"
    )
    assert not generated


async def test_balance_trigger_checks_every_statement(pool: asyncpg.Pool) -> None:
    """The balance check runs after every statement that inserts lines (migration 0006): a
    statement-level trigger over the statement's new lines, not deferrable, so no writer can
    postpone it (the behaviour: test_no_writer_can_postpone_the_balance_check)."""
    row = await pool.fetchrow(
        "SELECT tgtype, tgdeferrable, tgnewtable FROM pg_trigger WHERE tgname = 'lines_balanced'"
    )
    assert row is not None and not row["tgdeferrable"] and row["tgnewtable"] == "new_lines"
    row_level, after_insert = 1 << 0, 1 << 2  # pg_trigger.tgtype bits: ROW, INSERT
    assert not row["tgtype"] & row_level and row["tgtype"] & after_insert


# Lines written by hand in one statement, as a script or a compromised service could: (bucket,
# account, transaction, amount) each; nothing read from ledger.lines to build them.
_LINES = (
    "INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,"
    " balance_after, type, ref, posted_at, hash)"
    " SELECT b, account, 1000 + n, tx, amount, 'TRY', 0, 'p2p', 'by hand', clock_timestamp(), '\\x'::bytea"
    " FROM unnest($1::smallint[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY"
    "   AS u(b, account, tx, amount, n)"
)
_SCANS = (
    "SELECT relname, seq_scan, idx_scan FROM pg_stat_xact_user_tables"
    " WHERE schemaname = 'ledger' AND relname IN ('lines', 'accounts', 'transactions')"
)


@pytest.fixture
async def by_hand(wallet_db: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection as the owner (db.dsn_for is the owner's URL): a service's role may not write
    lines by hand at all."""
    conn = await asyncpg.connect(db.dsn_for(wallet_db))
    yield conn
    await conn.close()


async def _write_lines(conn: asyncpg.Connection, *lines: tuple[int, str, str, int]) -> None:
    await conn.execute(_LINES, *(list(column) for column in zip(*lines, strict=True)))


async def _scans(conn: asyncpg.Connection) -> dict[str, tuple[int, int]]:
    return {r["relname"]: (r["seq_scan"], r["idx_scan"]) for r in await conn.fetch(_SCANS)}


@pytest.fixture
async def two_buckets(ledger: Ledger) -> dict[str, str]:
    """Cash accounts in buckets 5 and 6, a transaction with parts in both, and one with a part
    in bucket 5 only."""
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=5)
    c = await funded_wallet(ledger, "carol", 0, bucket=5)
    b = await funded_wallet(ledger, "bob", 0, bucket=6)
    d = await funded_wallet(ledger, "dave", 0, bucket=6)
    cross = await ledger.transfer("cross", a, b, TL, actor="x", ref="x")
    local = await ledger.transfer("local", a, c, TL, actor="x", ref="x")
    return {
        "alice": cash_account(a),
        "carol": cash_account(c),
        "bob": cash_account(b),
        "dave": cash_account(d),
        "cross": cross.id,
        "local": local.id,
    }


async def test_balance_check_reads_the_lines_own_bucket_and_only_the_statements_lines(
    by_hand: asyncpg.Connection, two_buckets: dict[str, str]
) -> None:
    """What makes the check shard-local on Citus, observed on one node: a line's account and
    transaction part are looked up in the line's own bucket, by (bucket, id), one index probe
    each; and no line but the statement's own is read (the cost does not grow with a
    transaction's or an account's history)."""
    t, conn = two_buckets, by_hand
    # the control: a balanced statement whose accounts and part are in its bucket passes,
    # reading accounts and parts only by index, and not one line (pg_stat_xact_* counts this
    # backend's open transaction only: all of it on one connection)
    control = conn.transaction()
    await control.start()
    try:
        before = await _scans(conn)
        await _write_lines(conn, (5, t["alice"], t["local"], TL), (5, t["carol"], t["local"], -TL))
        after = await _scans(conn)
    finally:
        await control.rollback()  # the ledger stays as it was
    delta = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after}
    assert delta["lines"] == (0, 0), delta
    assert delta["accounts"] == (0, 2) and delta["transactions"] == (0, 2), delta
    # the account exists, but in bucket 5, not the line's bucket 6
    with pytest.raises(asyncpg.PostgresError, match="names no account") as refused:
        await _write_lines(conn, (6, t["alice"], t["cross"], TL), (6, t["bob"], t["cross"], -TL))
    assert refused.value.sqlstate == "HW012"
    # the transaction exists, but has no part in bucket 6
    with pytest.raises(asyncpg.PostgresError, match="names no transaction part") as refused:
        await _write_lines(conn, (6, t["bob"], t["local"], TL), (6, t["dave"], t["local"], -TL))
    assert refused.value.sqlstate == "HW012"


async def test_no_writer_can_postpone_the_balance_check(
    by_hand: asyncpg.Connection, two_buckets: dict[str, str]
) -> None:
    t, conn = two_buckets, by_hand
    async with conn.transaction():
        await conn.execute("SET CONSTRAINTS ALL DEFERRED")
        # half a transaction is refused at its statement, not at a commit that never comes
        with pytest.raises(asyncpg.PostgresError, match="unbalanced") as refused:
            await _write_lines(conn, (5, t["alice"], t["local"], TL))
        assert refused.value.sqlstate == "HW011"


async def test_lines_of_one_transaction_written_by_two_statements_are_refused(
    ledger: Ledger, owner_pool: asyncpg.Pool
) -> None:
    """Each statement's lines of a transaction must sum to zero by themselves, so a line added
    later to a balanced transaction is refused at once (and so is half a transaction)."""
    a = await funded_wallet(ledger, "alice", 100 * TL, bucket=5)
    b = await funded_wallet(ledger, "bob", 0, bucket=5)
    posted = await ledger.transfer("0005:two-statements", a, b, TL, actor="x", ref="x")
    line = (
        "INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,"
        " balance_after, type, ref, posted_at, hash)"
        " SELECT bucket, account_id, version + 100, transaction_id, $1, currency, balance_after,"
        " type, ref, posted_at, hash FROM ledger.lines WHERE transaction_id = $2 AND amount > 0"
    )
    async with owner_pool.acquire() as conn:  # the application role may not insert lines at all
        with pytest.raises(asyncpg.PostgresError, match="unbalanced") as refused:
            await conn.execute(line, TL, posted.id)
        assert refused.value.sqlstate == "HW011"


_TABLE_REF = re.compile(r"\bledger\.(accounts|transactions|lines|holds|promo_batches|promo_spends)\b")
_ONE_BUCKET = re.compile(r"\bbucket\s*=\s*\$\d+")
_BUCKET_FILTER = re.compile(r"\bbucket\s*=\s*(\$\d+|ANY\s*\(\s*\$\d+)")


@pytest.mark.parametrize("file", ["queries.sql", "verify.sql", "reconcile.sql"])
def test_named_queries_name_their_bucket(file: str) -> None:
    """Every named query on a distributed table filters on one bucket (or a list for a
    transaction's parts), or says it is a multi-shard read; every locking query names one."""
    problems = []
    text = (LEDGER / "sql" / file).read_text()
    for name, sql in load_queries(LEDGER / "sql" / file).items():
        block = text[text.index(f"-- name: {name}") :].split("-- name:", 2)[1]
        if not _TABLE_REF.search(sql) or "citus: multi-shard read" in block:
            continue
        if re.match(r"INSERT INTO ledger\.\w+ \(bucket,", sql):
            continue  # an insert routes by the bucket it carries
        if not _BUCKET_FILTER.search(sql):
            problems.append(f"{name}: no bucket filter")
        if "FOR UPDATE" in sql.upper() and not _ONE_BUCKET.search(sql):
            problems.append(f"{name}: locks rows without naming one bucket")
    assert not problems, problems
