"""The bank database's roles (as tests/core/test_roles.py for the others): the application role
writes transfers, inbox and outbox only through bank.record_transfer(s), bank.receive_callback(s),
bank.reconcile_transfer and bank.republish_outcome; the outbox only as its relay must; and
processed_events as core's Consumer does."""

from __future__ import annotations

import asyncpg

from hiwallet.contracts import databases
from hiwallet.core import db
from tests.core.test_roles import expected, privileges, refusals, table_names

APP = db.app_role("bank")
READONLY = db.readonly_role("bank")
PINNED = "search_path=pg_catalog, bank, pg_temp"

BANK_APP_WRITES: dict[str, set[str]] = {"bank.outbox": {"DELETE"}, "bank.processed_events": {"INSERT"}}
BANK_APP_COLUMNS = {("bank.outbox", "sent_at", "UPDATE"), ("bank.processed_events", "outcome", "UPDATE")}
BANK_APP_FUNCTIONS = {
    "bank.record_transfer",
    "bank.record_transfers",
    "bank.receive_callback",
    "bank.receive_callbacks",
    "bank.reconcile_transfer",
    "bank.republish_outcome",
    "bank.purge_inbox",
    "bank.record_statement",
}

RECORD = (
    "SELECT bank.record_transfer('cmd1', 'saga1', 100, 'TRY', 'TR330006100519786457841326', $1, NULL, $2,"
    " 'x')"
)
CALLBACK = "SELECT bank.receive_callback($1, 'transfer.succeeded', $2, '{}', NULL, $3, 'x')"


async def test_the_bank_roles_may_do_exactly_what_their_services_need(owner: asyncpg.Connection) -> None:
    tables = await table_names(owner, "bank")
    assert tables == {
        "bank.transfers",
        "bank.inbox",
        "bank.outbox",
        "bank.processed_events",
        "bank.statements",
    }
    assert await privileges(owner, APP) == expected(
        tables, BANK_APP_WRITES, BANK_APP_COLUMNS, BANK_APP_FUNCTIONS, {"bank", "public"}
    )
    assert await privileges(owner, READONLY) == expected(
        tables | {"public.schema_migrations"}, {}, set(), set(), {"bank", "public"}
    )
    rows = await owner.fetch(
        "SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'bank'"
        " AND has_function_privilege($1, p.oid, 'EXECUTE')",
        APP,
    )
    assert {f"bank.{r['proname']}" for r in rows} == BANK_APP_FUNCTIONS
    assert all(r["prosecdef"] and PINNED in (r["proconfig"] or []) for r in rows)


BANK_REFUSED = [
    # no announcement without a transfer's outcome behind it
    "INSERT INTO bank.outbox (message_id, exchange, routing_key, message_type, body)"
    " VALUES ('m', 'hiwallet.withdrawals', 'BankTransferSucceeded', 'BankTransferSucceeded', '{}')",
    "UPDATE bank.outbox SET body = '{}'",
    "UPDATE bank.outbox SET message_type = 'BankTransferSucceeded'",
    "DELETE FROM bank.outbox WHERE sent_at IS NULL",
    # a day's statement is recorded only with its announcement (bank.record_statement)
    "INSERT INTO bank.statements (day, message_id, currency, amount_minor, lines)"
    " VALUES ('2026-01-01', 'm', 'TRY', 0, 0)",
    "TRUNCATE bank.outbox",
    # a transfer is written by the functions only; its outcome never changed, never erased
    "INSERT INTO bank.transfers (command_id, saga_id, amount_minor, currency, destination_iban, state,"
    " bank_reference) VALUES ('c', 's', 1, 'TRY', 'TR330006100519786457841326', 'pending', 'trf_x')",
    "UPDATE bank.transfers SET state = 'succeeded', outcome_at = now(), outcome_source = 'callback'",
    "UPDATE bank.transfers SET amount_minor = amount_minor * 100",
    "UPDATE bank.transfers SET destination_iban = 'TR000000000000000000000000'",
    "DELETE FROM bank.transfers",
    "TRUNCATE bank.transfers",
    # the inbox: through receive_callback only
    "INSERT INTO bank.inbox (webhook_id, type, body) VALUES ('w', 'transfer.succeeded', '{}')",
    "UPDATE bank.inbox SET applied_at = NULL",
    "DELETE FROM bank.inbox",
    # what the consumer recorded is not forgotten (a command would be handled twice)
    "DELETE FROM bank.processed_events",
    "UPDATE bank.processed_events SET message_id = 'other'",
    # the internal functions are the writers' own
    "SELECT bank.apply_outcome('trf_1', true, NULL, 'callback', 'm9', 'x')",
    "SELECT bank.lock_reference('trf_1')",
    "ALTER TABLE bank.outbox DISABLE TRIGGER outbox_keeps_unsent",
    "CREATE TABLE bank.shadow (id int)",
    "CREATE FUNCTION bank.shadow() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "ALTER FUNCTION bank.record_transfer SECURITY INVOKER",
    "SELECT * FROM public.schema_migrations",
]


async def test_the_application_role_cannot_mint_rewrite_or_erase(bank_db: str) -> None:
    conn = await asyncpg.connect(db.service_dsn(bank_db, APP))
    try:
        assert await conn.fetchval(RECORD, "trf_1", "m1") == "pending"
        assert await conn.fetchval(CALLBACK, "w1", "trf_1", "m2") == "recorded"
        await conn.execute("INSERT INTO bank.processed_events (consumer, message_id) VALUES ('c', 'm')")
        assert await refusals(conn, BANK_REFUSED) == []
        # an outcome is recorded once: another callback changes nothing, announces nothing
        assert await conn.fetchval(CALLBACK, "w2", "trf_1", "m3") == "already"
        assert await conn.fetchval("SELECT count(*) FROM bank.outbox") == 1
        # what the relay does is allowed: mark sent, then delete what was sent
        assert await conn.execute("UPDATE bank.outbox SET sent_at = now()") == "UPDATE 1"
        assert await conn.execute("DELETE FROM bank.outbox WHERE sent_at IS NOT NULL") == "DELETE 1"
    finally:
        await conn.close()


async def test_migrate_puts_the_bank_grants_back(bank_db: str, owner: asyncpg.Connection) -> None:
    before = await privileges(owner, APP)
    await owner.execute(f"GRANT INSERT ON bank.outbox TO {APP}")
    await owner.execute("ALTER FUNCTION bank.record_transfer SECURITY INVOKER RESET search_path")
    assert await privileges(owner, APP) != before
    assert await databases.migrate("bank", database=bank_db) == []
    assert await privileges(owner, APP) == before
    assert await owner.fetchval("SELECT prosecdef FROM pg_proc WHERE oid = 'bank.record_transfer'::regproc")
