"""onboarding's database on a server of its own (HIWALLET_DATABASE_SERVERS): a second
PostgreSQL cluster on this machine (tests/pgcluster.py). Migrate creates and migrates it there;
the service writes its registrations and customers there, and nothing of it is on the shared
server, where the rest (wallet-api's database, the identity realms') stays."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings
from tests.onboarding.conftest import Onboarding
from tests.pgcluster import second_cluster_port

SERVERS = "HIWALLET_DATABASE_SERVERS"
OWNERS = "HIWALLET_MIGRATE_DATABASE_SERVERS"


@pytest.fixture
def own_port() -> int:
    return second_cluster_port()


@pytest.fixture
async def onboarding_db(own_port: int) -> AsyncIterator[str]:
    """This module's onboarding database: on the second cluster, made by migrate from nothing
    (the environment names its server; every process of the test reads it)."""
    name = f"hwt{os.getpid()}_own_{uuid.uuid4().hex[:10]}"
    saved = {variable: os.environ.get(variable) for variable in (SERVERS, OWNERS)}
    os.environ[SERVERS] = json.dumps({name: f"postgresql://127.0.0.1:{own_port}"})
    # the new cluster's superuser (the services connect as hiwallet_onboarding_app, made there)
    os.environ[OWNERS] = json.dumps({name: f"postgresql://postgres@127.0.0.1:{own_port}"})
    get_settings.cache_clear()
    try:
        await databases.migrate("onboarding", database=name)
        yield name
    finally:
        admin = await asyncpg.connect(db.owner_dsn("postgres", server_of=name))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
        for variable, value in saved.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
        get_settings.cache_clear()


async def test_onboarding_keeps_its_data_on_its_own_server_and_the_rest_stays_shared(
    onb: Onboarding, own_port: int
) -> None:
    email, body = await onb.registered()

    async with onb.owner() as own:  # the owner's URL follows the database to its server
        assert int(await own.fetchval("SHOW port")) == own_port
        customers = await own.fetch("SELECT account_id FROM onboarding.customers")
        assert [r["account_id"] for r in customers] == [body["account_id"]]
        registrations = await own.fetch("SELECT status FROM onboarding.registrations")
        assert [r["status"] for r in registrations] == ["completed"]
        # the service's own connections are there, as its application role
        roles = await own.fetch(
            "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database()"
            " AND usename <> current_user"
        )
        assert [r["usename"] for r in roles] == [db.app_role("onboarding")]

    shared = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        assert int(await shared.fetchval("SHOW port")) != own_port
        assert await shared.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", onb.database) is None
        # wallet-api's database is on the shared server, and the customer's account with it
        assert await shared.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", onb.wallet_database)
    finally:
        await shared.close()
    accounts = await onb.wallet_sql("SELECT account_id FROM wallet.identity_accounts")
    assert [r["account_id"] for r in accounts] == [body["account_id"]]
    assert onb.users_with(email)  # the customer realm (on the shared server) has the user
