"""The bank database's connections, as its application role whatever the database's name
(tests use clones): core.db.create_pool refuses the owner or a superuser."""

from __future__ import annotations

from hiwallet.bank.settings import BankSettings
from hiwallet.contracts.databases import DATABASES
from hiwallet.core import db
from hiwallet.core.service import DatabaseSpec


def database_spec(settings: BankSettings) -> DatabaseSpec:
    """The bank database (``settings.database``: a clone, in tests) as its application role,
    whatever the database's name (core.db.create_pool refuses the owner or a superuser)."""
    database = settings.database or DATABASES["bank"]
    return DatabaseSpec(database, db.app_role("bank"), settings.db_pool_max_size)
