"""The bank database's connections, as its application role whatever the database's name
(tests use clones): core.db.create_pool refuses the owner or a superuser."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from hiwallet.bank.settings import BankSettings
from hiwallet.contracts.databases import DATABASES
from hiwallet.core import db
from hiwallet.core.settings import Settings


def database_of(settings: BankSettings) -> str:
    return settings.database or DATABASES["bank"]


async def create_bank_pool(
    settings: BankSettings, core: Settings, *, max_size: int | None = None
) -> asyncpg.Pool:
    # As the bank database's application role whatever the database's name (tests use clones).
    return await db.create_pool(
        database_of(settings),
        role=db.app_role("bank"),
        settings=core,
        max_size=max_size or settings.db_pool_max_size,
    )


def dedicated_connection(
    settings: BankSettings, core: Settings
) -> Callable[[], Awaitable[asyncpg.Connection]]:
    """A connection of its own, as the application role (the relay's session lock and LISTEN,
    each job round's lock: never a pooled one)."""
    return db.dedicated_connection(database_of(settings), db.app_role("bank"), core)
