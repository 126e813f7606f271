"""The deployment's databases: one per service, each with its own roles and migrations folder.

The platform (``hiwallet.core.db``) knows how to name, create, migrate and connect to a
database of a key; which keys exist, and which share a schema, is the deployment's to say,
here. The composition roots (``hiwallet migrate``, ``hiwallet up``, ``hiwallet schema dump``)
iterate over :data:`DATABASES`; a service names only its own key."""

from __future__ import annotations

from hiwallet.core import db
from hiwallet.core.db import database_name
from hiwallet.core.settings import Settings

__all__ = [
    "DATABASES",
    "MIGRATION_FOLDERS",
    "SERVICE_ROLES",
    "folder_keys",
    "migrate",
    "migration_folder",
    "service_role",
]

# The key is the migrations folder's name (and the roles': hiwallet_<key>_app, ..._readonly).
# A mapping, not a function, so a test can point one key at its own database.
DATABASES: dict[str, str] = {
    key: database_name(key)
    for key in (
        "wallet",  # the ledger, wallet-api, wallet-consumer
        "identity",  # the customer realm
        "staff_identity",  # the staff realm
        "topup",  # topup-webhook
        "withdrawal",  # withdrawal-orchestrator
        "bank",  # bank-adapter, bank-webhook
        "onboarding",
        "staff_admin",
    )
}

# Services that share a database with its first service, each with a role of its own: the
# key's application role is the first service's (wallet-api's on "wallet"), these connect as
# service_role(key, service) and grants.sql names them :"<service>_role".
SERVICE_ROLES: dict[str, tuple[str, ...]] = {"wallet": ("wallet_consumer", "merchant_webhooks")}

# Databases that share one schema share one migrations folder: the staff realm's identity
# database is the customer realm's schema on its own server.
MIGRATION_FOLDERS: dict[str, str] = {"staff_identity": "identity"}


def migration_folder(key: str) -> str:
    return MIGRATION_FOLDERS.get(key, key)


def folder_keys() -> list[str]:
    """The database keys that have a migrations folder of their own (one schema.sql each)."""
    return [k for k in DATABASES if k not in MIGRATION_FOLDERS]


async def migrate(key: str, database: str | None = None, settings: Settings | None = None) -> list[int]:
    """``core.db.migrate`` of ``key`` from its own migrations folder; ``database`` defaults to the
    registry's (tests and the bench pass their own)."""
    return await db.migrate(
        key,
        database or DATABASES[key],
        settings,
        folder=migration_folder(key),
        services=SERVICE_ROLES.get(key, ()),
    )


def service_role(key: str, service: str) -> str:
    """The role of ``service``, which shares database ``key`` with its first service."""
    if service not in SERVICE_ROLES.get(key, ()):
        raise db.DatabaseMisconfigured(f"{service!r} has no role of its own on {key!r} (SERVICE_ROLES)")
    return db.app_role(key, service)
