"""onboarding's database: its statements (sql/queries.sql) and the lookups other parts of the
service build on (the `wires` consumer finds a customer by the wallet a top-up credited)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeAlias

import asyncpg

from hiwallet.contracts.databases import DATABASES
from hiwallet.core import db
from hiwallet.core.queries import load_queries
from hiwallet.core.service import DatabaseSpec
from hiwallet.onboarding.settings import OnboardingSettings

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")

# The tiers in their order (wallet-api's): onboarding only ever moves a customer up this list.
TIERS = ["unknown", "unverified", "verified", "contracted"]

Executor: TypeAlias = asyncpg.Pool | asyncpg.Connection


def database_spec(settings: OnboardingSettings) -> DatabaseSpec:
    """The onboarding database (``settings.database``: a clone, in tests) as its application role,
    whatever the database's name (core.db.create_pool refuses the owner or a superuser)."""
    database = settings.database or DATABASES["onboarding"]
    return DatabaseSpec(database, db.app_role("onboarding"), settings.db_pool_max_size)


async def customer_by_wallet(conn: Executor, wallet_id: str) -> asyncpg.Record | None:
    """The customer whose personal account's TRY wallet is ``wallet_id`` (None: not one of
    onboarding's customers). Its ``account_id``, ``tier``, ``tckn_hash`` and
    ``identity_verified_at`` are what a tier decision needs; nothing here is decrypted."""
    row: asyncpg.Record | None = await conn.fetchrow(Q["customer_by_wallet"], wallet_id)
    return row


async def customer_by_sub(conn: Executor, sub: str) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(Q["customer_by_sub"], sub)
    return row


async def record_tier(conn: Executor, customer_id: str, tier: str) -> None:
    """wallet-api has ``tier`` for this customer's account now (only upward here too)."""
    await conn.execute(Q["tier_set"], customer_id, tier, TIERS)


def rank(tier: str) -> int:
    return TIERS.index(tier)
