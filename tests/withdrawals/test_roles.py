"""The withdrawal database's roles (as tests/core/test_roles.py for the others): the
application role writes the sagas (new ones, and only the columns that move with the state),
the idempotency records, the outbox and processed_events; never the history (the database
writes it), never what a customer asked for, never a command its saga does not call for."""

from __future__ import annotations

import uuid

import asyncpg

from hiwallet.contracts import databases
from hiwallet.contracts.withdrawals import Requester
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from hiwallet.withdrawals.app import database_spec
from hiwallet.withdrawals.metrics import WithdrawalMetrics
from hiwallet.withdrawals.service import WithdrawalService
from tests.core.test_roles import expected, privileges, refusals, table_names
from tests.withdrawals.conftest import IBAN, settings_for

APP = db.app_role("withdrawal")
READONLY = db.readonly_role("withdrawal")

SAGA_COLUMNS = (
    "state",
    "state_actor",
    "fee_minor",
    "debit_transaction_id",
    "bank_reference",
    "reason",
    "reason_detail",
    "reviewed_by",
    "state_changed_at",
    "last_command",
    "last_published_at",
    "republished",
)
APP_WRITES: dict[str, set[str]] = {
    "withdrawal.sagas": {"INSERT"},
    "withdrawal.idempotency_keys": {"INSERT", "DELETE"},
    "withdrawal.outbox": {"INSERT", "DELETE"},
    "withdrawal.processed_events": {"INSERT"},
}
# 0002's functions: SECURITY INVOKER (they write as the application role, with its grants and
# through the same triggers), their search path pinned.
APP_FUNCTIONS = {"withdrawal.move_sagas", "withdrawal.request", "withdrawal.iso_utc"}
APP_COLUMNS = {
    *(("withdrawal.sagas", c, "UPDATE") for c in SAGA_COLUMNS),
    ("withdrawal.outbox", "sent_at", "UPDATE"),
    ("withdrawal.processed_events", "outcome", "UPDATE"),
}


async def test_the_withdrawal_roles_may_do_exactly_what_their_service_needs(
    owner: asyncpg.Connection,
) -> None:
    tables = await table_names(owner, "withdrawal")
    assert tables == {
        "withdrawal.allowed_transitions",
        "withdrawal.sagas",
        "withdrawal.transitions",
        "withdrawal.idempotency_keys",
        "withdrawal.outbox",
        "withdrawal.processed_events",
    }
    assert await privileges(owner, APP) == expected(
        tables, APP_WRITES, APP_COLUMNS, APP_FUNCTIONS, {"withdrawal", "public"}
    )
    assert await privileges(owner, READONLY) == expected(
        tables | {"public.schema_migrations"}, {}, set(), set(), {"withdrawal", "public"}
    )
    # the history's writer runs as the owner, its search path pinned
    row = await owner.fetchrow(
        "SELECT prosecdef, proconfig FROM pg_proc WHERE oid = 'withdrawal.sagas_history'::regproc"
    )
    assert row["prosecdef"]
    assert "search_path=pg_catalog, withdrawal, pg_temp" in row["proconfig"]
    # the service's own writers run as the service: nothing it could not do statement by statement
    for name in sorted(APP_FUNCTIONS):
        row = await owner.fetchrow("SELECT prosecdef, proconfig FROM pg_proc WHERE oid = $1::regproc", name)
        assert not row["prosecdef"], name
        assert "search_path=pg_catalog, withdrawal, pg_temp" in row["proconfig"], name


async def test_the_application_role_cannot_rewrite_history_or_what_was_asked(withdrawal_db: str) -> None:
    settings = settings_for(withdrawal_db)
    pool = await database_spec(settings).create_pool(get_settings(), max_size=2)
    try:
        service = WithdrawalService(pool, settings, WithdrawalMetrics())
        answer = await service.request(
            Requester(issuer="http://i", subject="s"),
            "customer:s",
            str(uuid.uuid4()),
            wallet="0421:w:x",
            amount_minor=100,
            currency="TRY",
            destination_iban=IBAN,
        )
        s = answer.saga_id
        async with pool.acquire() as conn:
            wrong = await refusals(
                conn,
                [
                    f"UPDATE withdrawal.sagas SET amount_minor = 1 WHERE id = '{s}'",
                    f"UPDATE withdrawal.sagas SET destination_iban = 'DE89370400440532013000'"
                    f" WHERE id = '{s}'",
                    f"UPDATE withdrawal.sagas SET wallet = 'mallory' WHERE id = '{s}'",
                    f"UPDATE withdrawal.sagas SET requested_by_subject = 'mallory' WHERE id = '{s}'",
                    "DELETE FROM withdrawal.sagas",
                    "TRUNCATE withdrawal.sagas",
                    f"INSERT INTO withdrawal.transitions (saga_id, from_state, to_state, actor)"
                    f" VALUES ('{s}', 'initiated', 'rejected', 'x')",
                    "UPDATE withdrawal.transitions SET actor = 'someone else'",
                    "DELETE FROM withdrawal.transitions",
                    "INSERT INTO withdrawal.allowed_transitions VALUES ('initiated', 'completed')",
                    "DELETE FROM withdrawal.allowed_transitions",
                    "UPDATE withdrawal.outbox SET body = '{}'",
                    "DELETE FROM withdrawal.outbox WHERE sent_at IS NULL",  # the trigger
                    "TRUNCATE withdrawal.outbox",
                    "UPDATE withdrawal.idempotency_keys SET body = '{}'",
                    "DELETE FROM withdrawal.processed_events",
                    "ALTER TABLE withdrawal.sagas DISABLE TRIGGER sagas_guard",
                    "DROP TRIGGER outbox_guard ON withdrawal.outbox",
                    "CREATE TABLE withdrawal.shadow (id int)",
                    "ALTER FUNCTION withdrawal.sagas_history() SECURITY INVOKER",
                    "SELECT * FROM public.schema_migrations",
                ],
            )
            assert wrong == []
            # what the relay does is allowed: mark sent, then delete what was sent
            assert await conn.execute("UPDATE withdrawal.outbox SET sent_at = now()") == "UPDATE 1"
            assert await conn.execute("DELETE FROM withdrawal.outbox WHERE sent_at IS NOT NULL") == "DELETE 1"
    finally:
        await pool.close()


async def test_migrate_puts_the_withdrawal_grants_back(withdrawal_db: str, owner: asyncpg.Connection) -> None:
    before = await privileges(owner, APP)
    await owner.execute(f"GRANT INSERT ON withdrawal.transitions TO {APP}")
    await owner.execute("ALTER FUNCTION withdrawal.sagas_history() SECURITY INVOKER RESET search_path")
    assert await privileges(owner, APP) != before
    assert await databases.migrate("withdrawal", database=withdrawal_db) == []
    assert await privileges(owner, APP) == before
    assert await owner.fetchval(
        "SELECT prosecdef FROM pg_proc WHERE oid = 'withdrawal.sagas_history'::regproc"
    )
