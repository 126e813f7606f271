"""The onboarding database's roles (as tests/core/test_roles.py for the others): the
application role reads everything and writes only the columns its steps move (never the
address a customer claimed, never a consent once given); the read-only role sees no personal
data, not even sealed or hashed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from hiwallet.core import db
from tests import pgtemplate
from tests.core.test_roles import expected, privileges, refusals, table_names

APP = db.app_role("onboarding")
READONLY = db.readonly_role("onboarding")

TABLES = {
    "onboarding.registrations",
    "onboarding.customers",
    "onboarding.phone_codes",
    "onboarding.consents",
    "onboarding.rate_hits",
    "onboarding.processed_events",
    "onboarding.wire_checks",
}
APP_WRITES: dict[str, set[str]] = {
    "onboarding.registrations": {"INSERT", "DELETE"},
    "onboarding.customers": {"INSERT", "DELETE"},
    "onboarding.phone_codes": {"INSERT", "DELETE"},
    "onboarding.consents": {"INSERT"},
    "onboarding.rate_hits": {"INSERT", "DELETE"},
    "onboarding.processed_events": {"INSERT"},
    "onboarding.wire_checks": {"INSERT"},
}
REGISTRATION_UPDATES = (
    "email_enc",
    "known",
    "status",
    "code_hash",
    "code_expires_at",
    "attempts_left",
    "customer_id",
    "updated_at",
)
CUSTOMER_UPDATES = (
    "sub",
    "account_id",
    "wallet_id",
    "tier",
    "tier_wanted",
    "tier_changed_at",
    "phone_hash",
    "phone_enc",
    "phone_verified_at",
    "tckn_hash",
    "tckn_enc",
    "given_name_enc",
    "family_name_enc",
    "birth_date_enc",
    "identity_verified_at",
    "updated_at",
)
PHONE_CODE_UPDATES = ("phone_hash", "phone_enc", "code_hash", "expires_at", "attempts_left", "created_at")
APP_COLUMNS = {
    *(("onboarding.registrations", c, "UPDATE") for c in REGISTRATION_UPDATES),
    *(("onboarding.customers", c, "UPDATE") for c in CUSTOMER_UPDATES),
    *(("onboarding.phone_codes", c, "UPDATE") for c in PHONE_CODE_UPDATES),
    ("onboarding.rate_hits", "hits", "UPDATE"),
    ("onboarding.processed_events", "outcome", "UPDATE"),
}
READONLY_REGISTRATION = (
    "id",
    "known",
    "status",
    "attempts_left",
    "customer_id",
    "created_at",
    "updated_at",
    "expires_at",
)
READONLY_CUSTOMER = (
    "id",
    "sub",
    "account_id",
    "wallet_id",
    "tier",
    "tier_wanted",
    "tier_changed_at",
    "phone_verified_at",
    "identity_verified_at",
    "created_at",
    "updated_at",
)
READONLY_COLUMNS = {
    *(("onboarding.registrations", c, "SELECT") for c in READONLY_REGISTRATION),
    *(("onboarding.customers", c, "SELECT") for c in READONLY_CUSTOMER),
}


@pytest.fixture
async def owner(onboarding_db: str) -> AsyncIterator[asyncpg.Connection]:
    async with pgtemplate.owner_connection(onboarding_db) as conn:
        yield conn


SCHEMAS = {"onboarding", "public"}


async def test_the_onboarding_roles_may_do_exactly_what_their_service_needs(
    owner: asyncpg.Connection,
) -> None:
    assert await table_names(owner, "onboarding") == TABLES
    assert await privileges(owner, APP) == expected(TABLES, APP_WRITES, APP_COLUMNS, set(), SCHEMAS)
    readonly = await privileges(owner, READONLY)
    reports = {"onboarding.consents", "onboarding.wire_checks", "public.schema_migrations"}
    assert readonly == expected(reports, {}, READONLY_COLUMNS, set(), SCHEMAS)
    # no column holding personal data, sealed or hashed, is readable by reports
    assert not [c for t, c, _ in readonly["columns"] if c.endswith(("_enc", "_hash"))]  # type: ignore[attr-defined]


async def test_the_application_role_cannot_rewrite_a_claim_or_a_consent(onboarding_db: str) -> None:
    conn = await asyncpg.connect(db.service_dsn(onboarding_db, APP))
    try:
        assert (
            await refusals(
                conn,
                [
                    "UPDATE onboarding.customers SET email_hash = '\\x00'",
                    "UPDATE onboarding.customers SET id = 'x'",
                    "UPDATE onboarding.consents SET version = 'x'",
                    "DELETE FROM onboarding.consents",
                    "UPDATE onboarding.wire_checks SET result = 'verified'",
                    "DELETE FROM onboarding.wire_checks",
                    "UPDATE onboarding.registrations SET email_hash = '\\x00'",
                    "TRUNCATE onboarding.registrations",
                    "CREATE TABLE onboarding.x (id int)",
                ],
            )
            == []
        )
    finally:
        await conn.close()


async def test_a_customer_with_a_user_is_never_deleted(onboarding_db: str, owner: asyncpg.Connection) -> None:
    await owner.execute(
        "INSERT INTO onboarding.customers (id, email_hash, sub) VALUES ('c1', '\\x01', 'user-1'),"
        " ('c2', '\\x02', NULL)"
    )
    conn = await asyncpg.connect(db.service_dsn(onboarding_db, APP))
    try:
        assert await refusals(conn, ["DELETE FROM onboarding.customers WHERE id = 'c1'"]) == []
        # a claim without a user may go (an abandoned one, released for another registration)
        assert await conn.execute("DELETE FROM onboarding.customers WHERE id = 'c2'") == "DELETE 1"
    finally:
        await conn.close()
    # not even the owner deletes a customer with a user
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await owner.execute("DELETE FROM onboarding.customers WHERE id = 'c1'")
