"""The top-up database's roles (as tests/core/test_roles.py for the others; here to keep that
file's sections apart): the application role writes inbox, payments and outbox only through
topup.ingest (topup.ingest_batch: many at once) and topup.purge_inbox, and the outbox only as its
relay must."""

from __future__ import annotations

import asyncpg

from hiwallet.contracts import databases
from hiwallet.core import db
from tests.core.test_roles import expected, privileges, refusals, table_names
from tests.topup_webhook.conftest import wallet_id

APP = db.app_role("topup")
READONLY = db.readonly_role("topup")
PINNED = "search_path=pg_catalog, topup, pg_temp"

TOPUP_APP_WRITES: dict[str, set[str]] = {"topup.outbox": {"DELETE"}}
TOPUP_APP_COLUMNS = {("topup.outbox", "sent_at", "UPDATE")}
TOPUP_APP_FUNCTIONS = {"topup.ingest", "topup.ingest_batch", "topup.purge_inbox", "topup.record_settlement"}

INGEST = (
    "SELECT topup.ingest('stripe', $1, 'payment_intent.succeeded', 'webhook', '{}', $2, $3, $4, NULL,"
    " 100, 'TRY', $5, 'hwt.topups', NULL)"
)


async def test_the_topup_roles_may_do_exactly_what_their_services_need(owner: asyncpg.Connection) -> None:
    tables = await table_names(owner, "topup")
    assert tables == {"topup.inbox", "topup.payments", "topup.outbox", "topup.settlements"}
    assert await privileges(owner, APP) == expected(
        tables, TOPUP_APP_WRITES, TOPUP_APP_COLUMNS, TOPUP_APP_FUNCTIONS, {"topup", "public"}
    )
    assert await privileges(owner, READONLY) == expected(
        tables | {"public.schema_migrations"}, {}, set(), set(), {"topup", "public"}
    )
    rows = await owner.fetch(
        "SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'topup'"
        " AND has_function_privilege($1, p.oid, 'EXECUTE')",
        APP,
    )
    assert {r["proname"] for r in rows} == {"ingest", "ingest_batch", "purge_inbox", "record_settlement"}
    assert all(r["prosecdef"] and PINNED in (r["proconfig"] or []) for r in rows)


TOPUP_REFUSED = [
    # no announcement without a payment record behind it
    "INSERT INTO topup.outbox (message_id, exchange, routing_key, message_type, body)"
    " VALUES ('m', 'hiwallet.topups', 'k', 'TopupRecorded', '{}')",
    "UPDATE topup.outbox SET body = '{}'",
    "UPDATE topup.outbox SET routing_key = 'x'",
    # an unsent announcement is not dropped (the trigger) and not rewritten
    "DELETE FROM topup.outbox WHERE sent_at IS NULL",
    "TRUNCATE topup.outbox",
    # a payment's record is never written but by topup.ingest, never changed, never erased
    "INSERT INTO topup.payments (id, provider, provider_payment_id, amount_minor, currency, reported_by,"
    " routes) VALUES ('x', 'stripe', 'pi_x', 1, 'TRY', '{e}', '{webhook}')",
    "UPDATE topup.payments SET amount_minor = amount_minor * 100",
    # a payout's record is written only with its announcement (topup.record_settlement)
    "INSERT INTO topup.settlements (provider, payout_id, message_id, currency, amount_minor, lines)"
    " VALUES ('stripe', 'po_x', 'm', 'TRY', 1, 1)",
    "DELETE FROM topup.settlements",
    "UPDATE topup.payments SET wallet = 'mallory'",
    "UPDATE topup.payments SET reported_by = '{}'",
    "DELETE FROM topup.payments",
    "TRUNCATE topup.payments",
    # the inbox: through ingest only, deleted only by the retention's function
    "INSERT INTO topup.inbox (provider, event_id, event_type, route, payload)"
    " VALUES ('stripe', 'e', 't', 'webhook', '{}')",
    "UPDATE topup.inbox SET payload = '{}'",
    "DELETE FROM topup.inbox",
    "ALTER TABLE topup.outbox DISABLE TRIGGER outbox_keeps_unsent",
    "DROP TRIGGER outbox_keeps_unsent ON topup.outbox",
    "CREATE TABLE topup.shadow (id int)",
    "CREATE FUNCTION topup.shadow() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "ALTER FUNCTION topup.ingest SECURITY INVOKER",
    "ALTER FUNCTION topup.ingest_batch SECURITY INVOKER",
    "SELECT * FROM public.schema_migrations",
]


async def test_the_application_role_cannot_mint_rewrite_or_erase(topup_db: str) -> None:
    conn = await asyncpg.connect(db.service_dsn(topup_db, APP))
    try:
        # something to refuse: a payment recorded through the function, its message unsent
        assert await conn.fetchval(INGEST, "evt_1", "pid", "pi_1", wallet_id(), "m1") == "recorded"
        assert await refusals(conn, TOPUP_REFUSED) == []
        # and the purge keeps anything younger than a day, whatever it is asked
        assert await conn.fetchval("SELECT topup.purge_inbox(interval '0 days', 1000)") == 0
        # what the relay does is allowed: mark sent, then delete what was sent
        assert await conn.execute("UPDATE topup.outbox SET sent_at = now()") == "UPDATE 1"
        assert await conn.execute("DELETE FROM topup.outbox WHERE sent_at IS NOT NULL") == "DELETE 1"
    finally:
        await conn.close()


async def test_migrate_puts_the_topup_grants_back(topup_db: str, owner: asyncpg.Connection) -> None:
    before = await privileges(owner, APP)
    await owner.execute(f"GRANT INSERT ON topup.outbox TO {APP}")
    await owner.execute("ALTER FUNCTION topup.ingest SECURITY INVOKER RESET search_path")
    assert await privileges(owner, APP) != before
    assert await databases.migrate("topup", database=topup_db) == []
    assert await privileges(owner, APP) == before
    assert await owner.fetchval("SELECT prosecdef FROM pg_proc WHERE oid = 'topup.ingest'::regproc")
