"""The database is the only write path, also against a compromised service (issue 9, item 10).

Services connect as their database's application role, which may read and call the ledger's
posting functions but not write the ledger's tables, change the schema or switch its guards
off; `verify` and reports connect as the read-only role. Every refusal here is the database's
own (InsufficientPrivilegeError), and the full list of what each role may do is compared
exactly, so a grant wider than this file says fails.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import Settings, get_settings
from hiwallet.ledger.accounts import cash_account
from hiwallet.ledger.service import Ledger
from hiwallet.ledger.store import LedgerStore, init_connection
from tests import pgtemplate
from tests.ledger.conftest import FEES, TL, funded_wallet

APP = db.app_role("wallet")  # wallet-api's
CONSUMER = db.app_role("wallet", "wallet_consumer")
MERCHANT_WEBHOOKS = db.app_role("wallet", "merchant_webhooks")
READONLY = db.readonly_role("wallet")
# The search path of a function a service may call that writes: the ledger's, and a service's
# own (which leaves the ledger out: tests/test_ledger_boundary.py).
PINNED = {
    "ledger": "search_path=pg_catalog, ledger, wallet, pg_temp",
    "ledger_api": "search_path=pg_catalog, ledger, wallet, pg_temp",
    "wallet": "search_path=pg_catalog, wallet, pg_temp",
}
# The ledger's SQL interface (migrations/wallet/0015): views, read by every role.
LEDGER_API_VIEWS = {
    "ledger_api.accounts",
    "ledger_api.transactions",
    "ledger_api.wallet_purses",
    "ledger_api.lines",  # 0025
    "ledger_api.transaction_wallet_accounts",  # 0025
    "ledger_api.promo_batches",  # 0025
}

# wallet-api's tables: what its role reads (with the ledger's), and nothing of wallet-consumer's.
WALLET_API_TABLES = {
    "wallet.accounts",
    "wallet.members",
    "wallet.identity_accounts",
    "wallet.wallets",
    "wallet.idempotency_keys",
    "wallet.limit_usage",  # written by wallet.transfer_batch and the withdrawal limit's functions
    "wallet.campaigns",
    "wallet.campaign_grants",
    "wallet.promo_programmes",
    "wallet.promo_programme_receivers",
    "wallet.goodwill_credits",
    "wallet.staff_daily_usage",
    "wallet.account_contracts",  # the Contracted tier's records (0018)
    # the merchants' webhooks (migrations/wallet/0016): endpoints registered, events of its
    # movements written, deliveries listed and replayed
    "wallet.webhook_endpoints",
    "wallet.webhook_events",
    "wallet.webhook_deliveries",
    "wallet.webhook_attempts",
    # reconciliation (migrations/wallet/0019): findings listed, resolved and recorded (a round
    # on demand), the daily summary read
    "wallet.reconciliation_findings",
    "wallet.daily_summary",
    # the nostro check of a round on demand (migrations/wallet/0021): the bank's statements
    # wallet-consumer keeps, and which wire each bank's day settled; read, never written
    "wallet.bank_statements",
    "wallet.bank_statement_lines",
    "wallet.settled_topups",
}
# wallet-consumer's tables: what its role reads, and nothing of wallet-api's but the columns below.
WALLET_CONSUMER_TABLES = {
    "public.processed_events",
    "wallet.unattributed_topups",
    "wallet.processed_messages",
    "wallet.outbox",
    "wallet.withdrawal_counts",
    "wallet.limit_usage",
    # reconciliation's jobs (migrations/wallet/0019): findings recorded and resolved, the summary
    "wallet.reconciliation_findings",
    "wallet.daily_summary",
    "wallet.settled_topups",
    # the bank's statements (migrations/wallet/0021), kept once, in the settlement's transaction
    "wallet.bank_statements",
    "wallet.bank_statement_lines",
}

# What the application roles may do beyond SELECT on the tables they read: table-level
# privileges, and UPDATE column by column. Anything not listed is refused.
WALLET_APP_WRITES: dict[str, set[str]] = {
    "wallet.accounts": {"INSERT"},
    "wallet.members": {"INSERT"},
    "wallet.identity_accounts": {"INSERT"},
    "wallet.wallets": {"INSERT"},
    "wallet.idempotency_keys": {"INSERT", "DELETE"},
    # wallet-api's staff money (migrations/wallet/0013): campaigns, programmes, goodwill
    # credits, the employees' daily usage; nothing deleted
    "wallet.campaigns": {"INSERT"},
    "wallet.campaign_grants": {"INSERT"},
    "wallet.promo_programmes": {"INSERT"},
    "wallet.promo_programme_receivers": {"INSERT"},
    "wallet.goodwill_credits": {"INSERT"},
    "wallet.staff_daily_usage": {"INSERT"},
    "wallet.account_contracts": {"INSERT"},
    "wallet.webhook_endpoints": {"INSERT", "DELETE"},
    "wallet.webhook_events": {"INSERT"},
    "wallet.reconciliation_findings": {"INSERT"},
}
_FINDING_COLUMNS = ("details", "last_seen_at", "status", "resolved_by", "resolution_note", "resolved_at")
WALLET_APP_COLUMNS = {
    *(("wallet.reconciliation_findings", c, "UPDATE") for c in _FINDING_COLUMNS),
    *(
        ("wallet.webhook_endpoints", column, "UPDATE")
        for column in (
            "url",
            "event_types",
            "description",
            "enabled",
            "disabled_reason",
            "disabled_at",
            "secret_sealed",
            "previous_secret_sealed",
            "previous_secret_until",
            "failing_since",
            "updated_at",
        )
    ),
    *(
        ("wallet.webhook_deliveries", c, "UPDATE")
        for c in ("status", "attempts", "next_attempt_at", "updated_at")
    ),
    ("wallet.accounts", "tier", "UPDATE"),
    ("wallet.accounts", "updated_at", "UPDATE"),
    ("wallet.campaigns", "remaining_minor", "UPDATE"),
    *(
        ("wallet.promo_programmes", column, "UPDATE")
        for column in ("status", "remaining_minor", "decided_by", "decided_at", "decision_reason")
    ),
    ("wallet.promo_programme_receivers", "granted_minor", "UPDATE"),
    *(
        ("wallet.goodwill_credits", column, "UPDATE")
        for column in ("status", "approved_by", "approved_at", "transaction_id")
    ),
    ("wallet.staff_daily_usage", "used", "UPDATE"),
}
WALLET_APP_FUNCTIONS = {
    "ledger.post",
    "ledger.post_batch",
    "ledger.place_hold",
    "ledger.release_hold",
    "ledger.ensure_system_accounts",
    "ledger.open_account",
    "ledger.open_accounts",
    "ledger_api.post_batch",
    "wallet.transfer_batch",
    "ledger.line_hash",  # pure (STABLE): verify's queries call it
}
WALLET_CONSUMER_WRITES: dict[str, set[str]] = {
    # its inbox record (migrations/wallet/0010), in public where core's Consumer finds it, and
    # the top-ups it could not attribute
    "public.processed_events": {"INSERT"},
    "wallet.unattributed_topups": {"INSERT"},
    # its withdrawal commands (migrations/wallet/0011): each command's response, and the outbox
    # as its relay needs it (claim, mark sent, purge sent rows)
    "wallet.processed_messages": {"INSERT"},
    "wallet.outbox": {"INSERT", "DELETE"},
    # the withdrawals' merchant events (migrations/wallet/0016), written, never read
    "wallet.webhook_events": {"INSERT"},
    # reconciliation's jobs (migrations/wallet/0019)
    "wallet.reconciliation_findings": {"INSERT"},
    "wallet.daily_summary": {"INSERT"},
    # the providers' payouts (migrations/wallet/0020): each top-up settled
    "wallet.settled_topups": {"INSERT"},
    # the bank's statements (migrations/wallet/0021): kept, never rewritten
    "wallet.bank_statements": {"INSERT"},
    "wallet.bank_statement_lines": {"INSERT"},
}
WALLET_CONSUMER_COLUMNS = {
    *(("wallet.reconciliation_findings", c, "UPDATE") for c in _FINDING_COLUMNS),
    *(
        ("wallet.daily_summary", c, "UPDATE")
        for c in ("transactions", "volume_in_minor", "volume_out_minor", "fees_minor", "computed_at")
    ),
    ("public.processed_events", "outcome", "UPDATE"),
    ("wallet.unattributed_topups", "attributed_wallet", "UPDATE"),
    ("wallet.unattributed_topups", "attributed_by", "UPDATE"),
    ("wallet.unattributed_topups", "attributed_at", "UPDATE"),
    ("wallet.outbox", "sent_at", "UPDATE"),
    # of wallet-api's records, what a top-up and a debit are decided on (its sql/), read only
    *(("wallet.wallets", c, "SELECT") for c in ("bucket", "id", "account_id", "currency", "closed_at")),
    *(("wallet.accounts", c, "SELECT") for c in ("bucket", "id", "kind", "tier")),
    *(("wallet.members", c, "SELECT") for c in ("bucket", "account_id", "issuer", "subject")),
}
# merchant-webhooks: the events and endpoints read, deliveries and attempts written, an endpoint
# disabled (its state columns), nothing of the ledger or of wallet-api's other records.
MERCHANT_WEBHOOKS_TABLES = {
    "wallet.webhook_endpoints",
    "wallet.webhook_events",
    "wallet.webhook_deliveries",
    "wallet.webhook_attempts",
}
MERCHANT_WEBHOOKS_WRITES: dict[str, set[str]] = {
    # endpoint.disabled notices; DELETE: the retention (migration 0017)
    "wallet.webhook_events": {"INSERT", "DELETE"},
    "wallet.webhook_deliveries": {"INSERT", "DELETE"},
    "wallet.webhook_attempts": {"INSERT", "DELETE"},
}
MERCHANT_WEBHOOKS_COLUMNS = {
    *(
        ("wallet.webhook_endpoints", c, "UPDATE")
        for c in ("enabled", "disabled_reason", "disabled_at", "failing_since", "updated_at")
    ),
    ("wallet.webhook_events", "dispatched_at", "UPDATE"),
    *(
        ("wallet.webhook_deliveries", c, "UPDATE")
        for c in (
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "updated_at",
            "delivered_at",
        )
    ),
}
WALLET_CONSUMER_FUNCTIONS = {
    "ledger.post_batch",  # the ledger's code posting a top-up or a refund on its connection
    "ledger_api.post_batch",  # its own statements' batches
    "wallet.count_withdrawal",
    "wallet.return_withdrawal",
    "ledger.line_hash",  # pure (STABLE): verify runs as a job (hiwallet.reconciliation)
}
IDENTITY_TABLES = (
    "users",
    "signing_keys",
    "login_flows",
    "sessions",
    "authorization_codes",
    "refresh_tokens",
    "action_tokens",
    "outgoing_mail",
)
IDENTITY_APP_WRITES: dict[str, set[str]] = {
    "public.users": {"INSERT"},
    "public.signing_keys": {"INSERT"},
    "public.login_flows": {"INSERT", "DELETE"},
    "public.sessions": {"INSERT", "DELETE"},
    "public.authorization_codes": {"INSERT"},
    "public.refresh_tokens": {"INSERT"},
    "public.action_tokens": {"INSERT", "DELETE"},
    "public.outgoing_mail": {"INSERT"},
}
IDENTITY_APP_COLUMNS = {
    *(
        ("public.users", c, "UPDATE")
        for c in (
            "email",
            "first_name",
            "last_name",
            "enabled",
            "email_verified",
            "required_actions",
            "password_hash",
            "totp_secret",
            "totp_last_step",
            "failed_logins",
            "last_failure_at",
            "locked_until",
        )
    ),
    *(
        ("public.signing_keys", c, "UPDATE")
        for c in ("status", "activated_at", "retired_at", "publish_until")
    ),
    *(("public.login_flows", c, "UPDATE") for c in ("stage", "user_id", "pending_totp")),
    ("public.sessions", "ended_at", "UPDATE"),
    ("public.authorization_codes", "used_at", "UPDATE"),
    ("public.refresh_tokens", "used_at", "UPDATE"),
    ("public.refresh_tokens", "revoked_at", "UPDATE"),
    ("public.action_tokens", "actions", "UPDATE"),
    ("public.action_tokens", "used_at", "UPDATE"),
    ("public.outgoing_mail", "sent_at", "UPDATE"),
}

_USER_SCHEMAS = "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"


async def privileges(conn: asyncpg.Connection, role: str) -> dict[str, object]:
    """Everything ``role`` may do in the database of ``conn``, as sets to compare exactly."""
    tables = {
        (r["t"], r["p"])
        for r in await conn.fetch(
            f"""
            SELECT n.nspname || '.' || c.relname AS t, p
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
                   unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES',
                                'TRIGGER']) AS p
             WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND {_USER_SCHEMAS}
               AND has_table_privilege($1, c.oid, p)
            """,
            role,
        )
    }
    columns = {
        (r["t"], r["a"], r["p"])
        for r in await conn.fetch(
            f"""
            SELECT n.nspname || '.' || c.relname AS t, a.attname AS a, p
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped,
                   unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) AS p
             WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND {_USER_SCHEMAS}
               AND has_column_privilege($1, c.oid, a.attnum, p) AND NOT has_table_privilege($1, c.oid, p)
            """,
            role,
        )
    }
    functions = {
        r["f"]
        for r in await conn.fetch(
            f"""
            SELECT n.nspname || '.' || p.proname AS f FROM pg_proc p
              JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE {_USER_SCHEMAS} AND has_function_privilege($1, p.oid, 'EXECUTE')
            """,
            role,
        )
    }
    schemas = {
        (r["s"], r["p"])
        for r in await conn.fetch(
            f"""
            SELECT n.nspname AS s, p FROM pg_namespace n, unnest(ARRAY['USAGE', 'CREATE']) AS p
             WHERE {_USER_SCHEMAS} AND has_schema_privilege($1, n.oid, p)
            """,
            role,
        )
    }
    database = await conn.fetchval("SELECT has_database_privilege($1, current_database(), 'CREATE')", role)
    role_row = await conn.fetchrow(
        "SELECT rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls AS special,"
        " ARRAY(SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid"
        "        WHERE m.member = r.oid) AS member_of"
        " FROM pg_roles r WHERE rolname = $1",
        role,
    )
    return {
        "tables": tables,
        "columns": columns,
        "functions": functions,
        "schemas": schemas,
        "create_in_database": database,
        "special_attributes": role_row["special"],
        "member_of": list(role_row["member_of"]),
    }


def expected(
    table_names: set[str],
    writes: dict[str, set[str]],
    columns: set[tuple[str, str, str]],
    functions: set[str],
    schemas: set[str],
) -> dict[str, object]:
    return {
        "tables": {(t, "SELECT") for t in table_names} | {(t, p) for t, ps in writes.items() for p in ps},
        "columns": columns,
        "functions": functions,
        "schemas": {(s, "USAGE") for s in schemas},
        "create_in_database": False,
        "special_attributes": False,
        "member_of": [],
    }


async def table_names(conn: asyncpg.Connection, *schemas: str) -> set[str]:
    """The tables and views of ``schemas``."""
    rows = await conn.fetch(
        "SELECT n.nspname || '.' || c.relname AS t FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relkind IN ('r', 'p', 'v') AND n.nspname = ANY ($1::text[])",
        list(schemas),
    )
    return {r["t"] for r in rows}


@pytest.fixture
async def owner(wallet_db: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(db.owner_dsn(wallet_db))
    yield conn
    await conn.close()


@pytest.fixture
async def app_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(wallet_db, role=APP, min_size=1, max_size=2, init=init_connection)
    yield pool
    await pool.close()


# --------------------------------------------------------------------------------------------
# The wallet database: the ledger and wallet-api
# --------------------------------------------------------------------------------------------


async def test_the_application_role_may_do_exactly_what_the_service_needs(owner: asyncpg.Connection) -> None:
    ledger = await table_names(owner, "ledger")
    assert ledger >= {"ledger.accounts", "ledger.lines"}
    assert await table_names(owner, "ledger_api") == LEDGER_API_VIEWS
    # every table of the wallet database is wallet-api's or wallet-consumer's (or migrate's)
    everything = await table_names(owner, "ledger", "ledger_api", "wallet", "public")
    unowned = (
        everything
        - ledger
        - LEDGER_API_VIEWS
        - WALLET_API_TABLES
        - WALLET_CONSUMER_TABLES
        - MERCHANT_WEBHOOKS_TABLES
    )
    assert unowned == {"public.schema_migrations"}
    assert await privileges(owner, APP) == expected(
        ledger | LEDGER_API_VIEWS | WALLET_API_TABLES,
        WALLET_APP_WRITES,
        WALLET_APP_COLUMNS,
        WALLET_APP_FUNCTIONS,
        {"ledger", "ledger_api", "wallet", "public"},
    )


async def test_wallet_consumers_role_may_do_exactly_what_it_needs(owner: asyncpg.Connection) -> None:
    """Its own records, the ledger's posting path, and of wallet-api's tables only the columns
    its statements read: nothing of wallet-api's written, its idempotency records and staff
    money not even read (and wallet-api's role reads of wallet-consumer's only what a round on
    demand reconciles: above)."""
    ledger = await table_names(owner, "ledger")
    assert await privileges(owner, CONSUMER) == expected(
        ledger | LEDGER_API_VIEWS | WALLET_CONSUMER_TABLES,
        WALLET_CONSUMER_WRITES,
        WALLET_CONSUMER_COLUMNS,
        WALLET_CONSUMER_FUNCTIONS,
        {"ledger", "ledger_api", "wallet", "public"},
    )


async def test_merchant_webhooks_role_may_do_exactly_what_it_needs(owner: asyncpg.Connection) -> None:
    """The webhooks' tables only: not the ledger (not even read), nothing of wallet-api's or
    wallet-consumer's records, no function."""
    assert await privileges(owner, MERCHANT_WEBHOOKS) == expected(
        MERCHANT_WEBHOOKS_TABLES,
        MERCHANT_WEBHOOKS_WRITES,
        MERCHANT_WEBHOOKS_COLUMNS,
        set(),
        {"wallet", "public"},
    )


async def test_the_readonly_role_may_only_read(owner: asyncpg.Connection) -> None:
    everything = await table_names(owner, "ledger", "ledger_api", "wallet", "public")
    assert await privileges(owner, READONLY) == expected(
        everything, {}, set(), {"ledger.line_hash"}, {"ledger", "ledger_api", "wallet", "public"}
    )


@pytest.mark.parametrize("role", [APP, CONSUMER])
async def test_every_function_a_services_role_may_call_that_writes_is_security_definer(
    owner: asyncpg.Connection, role: str
) -> None:
    """A VOLATILE function may write; one the service may call runs as the owner with a search
    path nothing the caller creates can change. (STABLE and IMMUTABLE ones cannot write.)"""
    rows = await owner.fetch(
        f"""
        SELECT p.oid::regprocedure::text AS f, n.nspname AS schema, p.provolatile, p.prosecdef,
               p.proconfig
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE {_USER_SCHEMAS} AND has_function_privilege($1, p.oid, 'EXECUTE')
        """,
        role,
    )
    writers = [r for r in rows if r["provolatile"] == b"v"]
    assert len(writers) >= 4, rows  # every posting entry point (a vacuous pass is a failure)
    unguarded = [
        r["f"] for r in writers if not r["prosecdef"] or PINNED[r["schema"]] not in (r["proconfig"] or [])
    ]
    assert unguarded == []


WALLET_REFUSED = [
    "UPDATE ledger.accounts SET balance = balance + 100000",
    "UPDATE ledger.accounts SET held = 0",
    "INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,"
    " balance_after, type, ref, posted_at, hash)"
    " VALUES (0, '0000:sys:nostro:TRY', 99, 'x', 1, 'TRY', 1, 'p2p', 'x', now(), '\\x')",
    "INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref, request_hash,"
    " parts_balanced, posted_at) VALUES (0, 'x', 0, '{0}', 'p2p', 'x', 'x', '\\x', false, now())",
    "INSERT INTO ledger.accounts (bucket, id, role, currency, balance, created_at)"
    " VALUES (0, '0000:mine', 'nostro', 'TRY', 100, now())",
    "DELETE FROM ledger.transactions",
    "UPDATE ledger.lines SET amount = amount + 1",
    "UPDATE ledger.holds SET status = 'released'",
    "UPDATE ledger.promo_batches SET remaining = amount",
    "ALTER TABLE ledger.lines DISABLE TRIGGER lines_append_only",
    "ALTER TABLE ledger.lines DISABLE TRIGGER ALL",
    "DROP TRIGGER lines_balanced ON ledger.lines",
    "TRUNCATE ledger.lines",
    "TRUNCATE ledger.accounts",
    "TRUNCATE wallet.idempotency_keys",
    "CREATE TABLE ledger.shadow (id int)",
    "CREATE TABLE wallet.shadow (id int)",
    "CREATE TABLE public.shadow (id int)",
    "CREATE TABLE shadow (id int)",
    "CREATE SCHEMA shadow",
    "CREATE FUNCTION ledger.shadow() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE OR REPLACE FUNCTION ledger.open_account(p_bucket smallint, p_id text, p_purse text,"
    " p_currency text, p_owner text) RETURNS void LANGUAGE sql AS 'SELECT'",
    "ALTER FUNCTION ledger.open_account SECURITY INVOKER",
    "ALTER FUNCTION ledger.open_account RESET search_path",
    "SELECT ledger.replay(1::smallint, 'x', '\\x'::bytea)",
    "SELECT ledger.refusal('HW001', 'x', '{}')",
    "UPDATE wallet.limit_usage SET used = 0",
    "INSERT INTO wallet.limit_usage VALUES (1, '0001:x', '2026-01-01', 'transfer', 'TRY', 0)",
    "UPDATE wallet.idempotency_keys SET status = 200",
    "UPDATE wallet.accounts SET kind = 'business'",
    "DELETE FROM wallet.accounts",
    "DELETE FROM wallet.members",
    "DELETE FROM wallet.wallets",
    "UPDATE wallet.wallets SET number = number",
    "UPDATE wallet.wallets SET closed_at = now()",
    "DELETE FROM public.processed_events",
    "UPDATE public.processed_events SET message_id = 'x'",
    "TRUNCATE public.processed_events",
    "DELETE FROM wallet.unattributed_topups",
    "UPDATE wallet.unattributed_topups SET amount_minor = amount_minor + 1",
    "UPDATE wallet.unattributed_topups SET reason = 'no-reference'",
    "TRUNCATE wallet.unattributed_topups",
    # a stored command response is never changed or deleted; the withdrawal limit changes only
    # through wallet.count_withdrawal and wallet.return_withdrawal; an unsent outbox row stays
    "UPDATE wallet.processed_messages SET response = '{}'",
    "DELETE FROM wallet.processed_messages",
    "TRUNCATE wallet.processed_messages",
    "INSERT INTO wallet.limit_usage VALUES (1, '0001:x', '2026-01-01', 'withdrawal', 'TRY', 0)",
    "UPDATE wallet.withdrawal_counts SET returned_at = now()",
    "INSERT INTO wallet.withdrawal_counts VALUES (1, 'c', '0001:x', '2026-01-01', 'TRY', 1, now(), NULL)",
    "DELETE FROM wallet.withdrawal_counts",
    "UPDATE wallet.outbox SET body = '{}'",
    "TRUNCATE wallet.outbox",
    "SELECT * FROM public.schema_migrations",
    "DELETE FROM public.schema_migrations",
    f"ALTER ROLE {APP} SUPERUSER",
]


# wallet-consumer's own records and functions: wallet-api's role may not read or write them.
CONSUMERS_OWN = [
    "SELECT * FROM public.processed_events",
    "INSERT INTO public.processed_events (consumer, message_id) VALUES ('wallet-consumer', 'x')",
    "UPDATE public.processed_events SET outcome = '{}'",
    "SELECT * FROM wallet.unattributed_topups",
    "INSERT INTO wallet.unattributed_topups (payment_id, provider, provider_payment_id, amount_minor,"
    " currency, reason, created_at) VALUES ('p', 'stripe', 'pi', 1, 'TRY', 'no-reference', now())",
    "UPDATE wallet.unattributed_topups SET attributed_wallet = '0001:w:x'",
    "SELECT * FROM wallet.processed_messages",
    "INSERT INTO wallet.processed_messages (command_id, command_type, saga_id, response_type, response,"
    " processed_at) VALUES ('c', 'DebitForWithdrawal', 's', 'WalletDebited', '{}', now())",
    "SELECT * FROM wallet.outbox",
    "INSERT INTO wallet.outbox (message_id, exchange, routing_key, message_type, body)"
    " VALUES ('m', 'x', 'k', 'WalletDebited', '{}')",
    "DELETE FROM wallet.outbox",
    "SELECT * FROM wallet.withdrawal_counts",
    "SELECT wallet.count_withdrawal(1::smallint, 'c', '0001:x', '2026-01-01', 'TRY', 1, 10)",
    "SELECT wallet.return_withdrawal(1::smallint, 'c')",
]
# wallet-api's records and the ledger's use cases wallet-consumer does not run: its role may
# neither write nor (but for the columns it decides on) read them.
WALLET_APIS_OWN = [
    "SELECT * FROM wallet.wallets",
    "SELECT number FROM wallet.wallets",
    "SELECT name FROM wallet.accounts",
    "SELECT added_by FROM wallet.members",
    "SELECT * FROM wallet.idempotency_keys",
    "SELECT * FROM wallet.identity_accounts",
    "SELECT * FROM wallet.campaigns",
    "SELECT * FROM wallet.goodwill_credits",
    "SELECT * FROM wallet.staff_daily_usage",
    "INSERT INTO wallet.accounts (bucket, id, kind, tier, opened_by, created_at, updated_at)"
    " VALUES (1, '0001:a:x', 'personal', 'verified', 'x', now(), now())",
    "UPDATE wallet.accounts SET tier = 'contracted'",
    "INSERT INTO wallet.members (bucket, account_id, issuer, subject, added_by, created_at)"
    " VALUES (1, '0001:a:x', 'i', 's', 'x', now())",
    "INSERT INTO wallet.wallets (bucket, id, account_id, currency, number, created_at)"
    " VALUES (1, '0001:w:x', '0001:a:x', 'TRY', '0001000000000001', now())",
    "INSERT INTO wallet.idempotency_keys SELECT * FROM wallet.idempotency_keys",
    "DELETE FROM wallet.idempotency_keys",
    "UPDATE wallet.campaigns SET remaining_minor = budget_minor",
    "SELECT ledger.open_account(7::smallint, '0007:w:x:cash', 'cash', 'TRY', 'x')",
    "SELECT ledger.ensure_system_accounts(7::smallint, 'TRY', ARRAY['stripe'])",
    "SELECT ledger.place_hold(7::smallint, '0007:w:x:cash', 'h', 1)",
    "SELECT ledger.release_hold(7::smallint, '0007:w:x:cash', 'h')",
    "SELECT wallet.transfer_batch(" + ", ".join(["NULL"] * 20) + ")",
]


async def refusals(conn: asyncpg.Connection, statements: list[str]) -> list[tuple[str, str]]:
    """Each statement alone (its own transaction); those the database did not refuse for want
    of a privilege, with what happened instead."""
    wrong = []
    for statement in statements:
        try:
            async with conn.transaction():
                await conn.execute(statement)
            wrong.append((statement, "done"))
        except asyncpg.InsufficientPrivilegeError:
            pass
        except asyncpg.PostgresError as exc:
            wrong.append((statement, f"{exc.sqlstate}: {exc}"))
    return wrong


async def test_the_application_role_cannot_write_behind_the_ledgers_back(
    ledger_with_history: str, app_pool: asyncpg.Pool
) -> None:
    async with app_pool.acquire() as conn:
        assert await refusals(conn, WALLET_REFUSED) == []


async def test_wallet_api_and_wallet_consumer_cannot_touch_each_others_records(
    ledger_with_history: str, app_pool: asyncpg.Pool, consumer_pool: asyncpg.Pool
) -> None:
    async with consumer_pool.acquire() as conn:
        assert await refusals(conn, WALLET_REFUSED + WALLET_APIS_OWN) == []
    async with app_pool.acquire() as conn:
        assert await refusals(conn, CONSUMERS_OWN) == []


async def test_wallet_consumer_posts_and_reads_through_what_the_ledger_offers(
    ledger_with_history: str, consumer_pool: asyncpg.Pool
) -> None:
    """As its role: the ledger's use cases (a top-up, on its connection), its own batches
    through ledger_api.post_batch, and the ledger's accounts and transactions through ledger_api;
    not the ledger's tables in a statement of its own that writes them."""
    ledger = Ledger(LedgerStore(consumer_pool), FEES)
    alice = ledger_with_history
    before = (await ledger.store.account(cash_account(alice))).balance
    await ledger.topup("roles-topup-1", alice, 5 * TL, provider="stripe", actor="test", ref="t1")
    posting = ledger.topup_posting(
        "roles-topup-2", alice, 7 * TL, "TRY", provider="stripe", actor="test", ref="t2"
    )
    async with consumer_pool.acquire() as conn, conn.transaction():
        (raw,) = await conn.fetchval("SELECT ledger_api.post_batch($1)", ledger.batch_arguments([posting]))
        posted = ledger.answer(raw)
        assert (
            await conn.fetchval(
                "SELECT currency FROM ledger_api.accounts WHERE bucket = 7 AND id = $1", cash_account(alice)
            )
            == "TRY"
        )
        seen = await conn.fetchrow(
            "SELECT type, ref FROM ledger_api.transactions WHERE bucket = 7 AND id = $1", posted.id
        )
        assert (seen["type"], seen["ref"]) == ("topup", "t2")
    assert (await ledger.store.account(cash_account(alice))).balance == before + 5 * TL + 7 * TL


@pytest.fixture
async def consumer_pool(wallet_db: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(wallet_db, role=CONSUMER, min_size=1, max_size=2, init=init_connection)
    yield pool
    await pool.close()


@pytest.fixture
async def ledger_with_history(app_pool: asyncpg.Pool) -> str:
    """Money moved as the application role, through the functions (a wallet-to-wallet transfer
    in one bucket, a top-up, a hold): posting works without any table privilege."""
    ledger = Ledger(LedgerStore(app_pool), FEES)
    alice = await funded_wallet(ledger, "alice", 100 * TL, bucket=7)
    bob = await funded_wallet(ledger, "bob", 0, bucket=7)
    await ledger.transfer("0007:t1", alice, bob, 10 * TL, actor="alice", ref="r1")
    await ledger.store.place_hold(alice, "h1", TL)
    assert (await ledger.store.account(cash_account(bob))).balance == 10 * TL
    return alice


async def test_posting_reading_and_verify_work_as_their_roles(
    wallet_db: str, ledger_with_history: str
) -> None:
    readonly = await db.create_pool(wallet_db, role=READONLY, min_size=1, max_size=1, init=init_connection)
    try:
        store = LedgerStore(readonly)
        report = await store.verify()
        assert report.ok and report.transactions >= 2, report.problems
        assert (await store.wallet_balance(ledger_with_history)).cash == 90 * TL
        # the read-only role may not post, even through the functions
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await readonly.execute(
                "SELECT ledger.open_account(7::smallint, '0007:w:x:cash', 'cash', 'TRY', 'x')"
            )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await readonly.execute("DELETE FROM wallet.idempotency_keys")
    finally:
        await readonly.close()


async def test_migrate_puts_the_grants_back_whatever_a_migration_did(
    wallet_db: str, owner: asyncpg.Connection
) -> None:
    """grants.sql runs after every migrate: a later CREATE OR REPLACE FUNCTION (which resets
    SECURITY DEFINER and SET clauses) or a grant made by hand does not last."""
    before = await privileges(owner, APP)
    replace = (Path(get_settings().migrations_dir) / "wallet" / "0009_open_account_function.sql").read_text()
    await owner.execute(replace.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    await owner.execute("ALTER FUNCTION ledger.post SECURITY INVOKER RESET search_path")
    await owner.execute(f"GRANT UPDATE (balance) ON ledger.accounts TO {APP}")
    await owner.execute(f"GRANT EXECUTE ON FUNCTION ledger.replay TO {APP}")
    await owner.execute(f"GRANT DELETE ON wallet.limit_usage TO {APP}")
    drifted = await privileges(owner, APP)
    assert drifted != before  # the comparison sees a grant too broad
    definer = "SELECT prosecdef FROM pg_proc WHERE oid = $1::regproc"
    assert not await owner.fetchval(definer, "ledger.open_account")
    assert await databases.migrate("wallet", database=wallet_db) == []
    assert await privileges(owner, APP) == before
    assert await owner.fetchval(definer, "ledger.open_account")
    assert await owner.fetchval(definer, "ledger.post")


# --------------------------------------------------------------------------------------------
# Who may connect as what
# --------------------------------------------------------------------------------------------


async def test_a_service_refuses_to_start_as_the_owner(wallet_db: str, owner: asyncpg.Connection) -> None:
    me = await owner.fetchval("SELECT current_user")
    with pytest.raises(db.DatabaseMisconfigured, match="could change or bypass the schema"):
        await db.create_pool(wallet_db, role=me, min_size=1, max_size=1)
    # nor when the service URL names the owner
    url = get_settings().database_url.get_secret_value().replace("://", f"://{me}@", 1)
    with pytest.raises(db.DatabaseMisconfigured, match="HIWALLET_DATABASE_URL"):
        await db.create_pool(wallet_db, role=APP, settings=Settings(database_url=url), min_size=1, max_size=1)
    # nor as a role that owns one table
    sneaky = f"hwt{os.getpid()}_owns_{uuid.uuid4().hex[:6]}"
    await owner.execute(f"CREATE ROLE {sneaky} LOGIN")
    try:
        await owner.execute(f"CREATE TABLE public.{sneaky} (id int)")
        await owner.execute(f"ALTER TABLE public.{sneaky} OWNER TO {sneaky}")
        with pytest.raises(db.DatabaseMisconfigured, match=f"the owner of public.{sneaky}"):
            await db.create_pool(wallet_db, role=sneaky, min_size=1, max_size=1)
    finally:
        await owner.execute(f"DROP TABLE IF EXISTS public.{sneaky}")
        await owner.execute(f"DROP ROLE {sneaky}")


async def test_a_database_without_its_role_says_to_migrate(wallet_db: str) -> None:
    with pytest.raises(db.DatabaseMisconfigured, match="hiwallet migrate"):
        await db.create_pool(wallet_db, role=f"hwt{os.getpid()}_nobody", min_size=1, max_size=1)


def test_services_and_migrations_have_their_own_urls() -> None:
    local = Settings(database_url="postgresql://localhost:5432")
    assert (
        db.service_dsn("hiwallet_wallet", APP, local) == f"postgresql://{APP}@localhost:5432/hiwallet_wallet"
    )
    assert db.owner_dsn("hiwallet_wallet", local) == "postgresql://localhost:5432/hiwallet_wallet"
    deployed = Settings(
        database_url="postgresql://wallet_api:secret@db:5432",
        migrate_database_url="postgresql://hiwallet_owner:other@db:5432",
    )
    assert (
        db.service_dsn("hiwallet_wallet", APP, deployed)
        == "postgresql://wallet_api:secret@db:5432/hiwallet_wallet"
    )
    assert (
        db.owner_dsn("hiwallet_wallet", deployed)
        == "postgresql://hiwallet_owner:other@db:5432/hiwallet_wallet"
    )
    # unset: the service URL without its user (the client's default user, the local superuser)
    assert db.owner_dsn("x", Settings(database_url="postgresql://u:p@db:5432")) == "postgresql://db:5432/x"


def test_a_second_service_of_a_database_has_a_role_of_its_own() -> None:
    assert (APP, CONSUMER) == ("hiwallet_wallet_app", "hiwallet_wallet_consumer_app")
    rendered = db.render_grants(
        'TO :"app_role", :"wallet_consumer_role"; :\'wallet_consumer_role\'', "wallet", ["wallet_consumer"]
    )
    assert rendered == f'TO "{APP}", "{CONSUMER}"; \'{CONSUMER}\''
    assert databases.service_role("wallet", "wallet_consumer") == CONSUMER
    with pytest.raises(db.DatabaseMisconfigured, match="SERVICE_ROLES"):
        databases.service_role("bank", "wallet_consumer")  # a service named for a database it does not use


async def test_roles_are_made_once_however_many_migrate_at_once() -> None:
    name = f"hwt{os.getpid()}_race_{uuid.uuid4().hex[:6]}"
    conns = [await asyncpg.connect(db.owner_dsn("postgres")) for _ in range(6)]
    try:
        # every call finishes (the connections are free to clean up with) before any is judged
        first = await asyncio.gather(*(db.ensure_role(c, name) for c in conns), return_exceptions=True)
        again = await asyncio.gather(*(db.ensure_role(c, name) for c in conns), return_exceptions=True)
        assert [r for r in first + again if r is not None] == []  # and again: idempotent
        assert await conns[0].fetchval("SELECT count(*) FROM pg_roles WHERE rolname = $1", name) == 1
    finally:
        await conns[0].execute(f"DROP ROLE IF EXISTS {name}")
        for c in conns:
            await c.close()


@pytest.mark.parametrize("extra", ["CREATEDB", "SUPERUSER", "member"])
async def test_a_role_with_more_than_its_grants_is_refused(extra: str) -> None:
    name = f"hwt{os.getpid()}_wide_{uuid.uuid4().hex[:6]}"
    conn = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        await conn.execute(f"CREATE ROLE {name} LOGIN {'' if extra == 'member' else extra}")
        if extra == "member":
            await conn.execute(f"GRANT pg_write_all_data TO {name}")
        with pytest.raises(db.DatabaseMisconfigured, match="more than its grants"):
            await db.ensure_role(conn, name)
    finally:
        await conn.execute(f"DROP ROLE IF EXISTS {name}")
        await conn.close()


# --------------------------------------------------------------------------------------------
# The identity databases
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def identity_dbs() -> AsyncIterator[dict[str, str]]:
    names = {
        key: f"hwt{os.getpid()}_roles_{key}_{uuid.uuid4().hex[:6]}" for key in ("identity", "staff_identity")
    }
    try:
        for key, name in names.items():
            await databases.migrate(key, database=name)
        yield names
    finally:
        for name in names.values():
            await pgtemplate.drop_database(name)


@pytest.mark.parametrize("key", ["identity", "staff_identity"])
async def test_each_identity_role_may_do_exactly_what_its_service_needs(
    identity_dbs: dict[str, str], key: str
) -> None:
    conn = await asyncpg.connect(db.owner_dsn(identity_dbs[key]))
    try:
        names = {f"public.{t}" for t in IDENTITY_TABLES}
        assert await table_names(conn, "public") == names | {"public.schema_migrations"}
        assert await privileges(conn, db.app_role(key)) == expected(
            names, IDENTITY_APP_WRITES, IDENTITY_APP_COLUMNS, set(), {"public"}
        )
        assert await privileges(conn, db.readonly_role(key)) == expected(
            names | {"public.schema_migrations"}, {}, set(), set(), {"public"}
        )
        # the other realm's role may do nothing here
        other = db.app_role("staff_identity" if key == "identity" else "identity")
        assert (await privileges(conn, other))["tables"] == set()
    finally:
        await conn.close()


IDENTITY_REFUSED = [
    "DELETE FROM users",
    "TRUNCATE users",
    "UPDATE users SET id = 'x'",
    "UPDATE users SET username = 'mallory'",
    "DELETE FROM signing_keys",
    "UPDATE signing_keys SET private_pem = 'x'",
    "UPDATE signing_keys SET public_jwk = '{}'",
    "DELETE FROM refresh_tokens",
    "UPDATE refresh_tokens SET user_id = 'x'",
    "UPDATE authorization_codes SET user_id = 'x'",
    "DELETE FROM outgoing_mail",
    "SELECT * FROM schema_migrations",
    "ALTER TABLE users DISABLE TRIGGER ALL",
    "ALTER TABLE users DROP CONSTRAINT users_username_key",
    "CREATE TABLE shadow (id int)",
    "DROP TABLE users",
]


async def test_the_identity_role_cannot_change_what_it_must_not(identity_dbs: dict[str, str]) -> None:
    conn = await asyncpg.connect(db.service_dsn(identity_dbs["identity"], db.app_role("identity")))
    try:
        assert await refusals(conn, IDENTITY_REFUSED) == []
    finally:
        await conn.close()


async def test_the_customer_realms_role_cannot_touch_the_staff_realms_users(
    identity_dbs: dict[str, str],
) -> None:
    conn = await asyncpg.connect(db.service_dsn(identity_dbs["staff_identity"], db.app_role("identity")))
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("INSERT INTO users (id, username) VALUES ('x', 'mallory')")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT password_hash FROM users")
    finally:
        await conn.close()


async def test_migrate_refuses_to_run_as_a_services_role(wallet_db: str) -> None:
    url = get_settings().database_url.get_secret_value().replace("://", f"://{APP}@", 1)
    with pytest.raises(db.DatabaseMisconfigured, match="HIWALLET_MIGRATE_DATABASE_URL"):
        await databases.migrate("wallet", database=wallet_db, settings=Settings(migrate_database_url=url))
