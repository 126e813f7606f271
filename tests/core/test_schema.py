"""migrations/<db>/schema.sql is the live schema: a fresh migrate produces exactly it."""

from __future__ import annotations

import difflib
import os
import uuid

import pytest

from hiwallet.contracts import databases
from hiwallet.core import schema
from tests import pgtemplate

_SHOWN_LINES = 80


def _difference(key: str, committed: str, live: str) -> str:
    path = schema.schema_path(databases.migration_folder(key))
    diff = list(
        difflib.unified_diff(
            committed.splitlines(), live.splitlines(), f"{path} (committed)", "freshly migrated", lineterm=""
        )
    )
    shown = "\n".join(diff[:_SHOWN_LINES]) + (
        f"\n... {len(diff) - _SHOWN_LINES} more lines" if len(diff) > _SHOWN_LINES else ""
    )
    return (
        f"the migrations no longer produce {path}: if the change is meant, regenerate it with "
        f"`make schema` (or `hiwallet schema dump`) and commit it.\n{shown}"
    )


async def _check(key: str, database: str) -> None:
    folder = databases.migration_folder(key)
    path = schema.schema_path(folder)
    committed = path.read_text() if path.exists() else ""
    live = await schema.dump(key, database, folder=folder)
    assert live == committed, _difference(key, committed, live)


async def test_the_wallet_migrations_produce_the_committed_schema(wallet_template: str) -> None:
    await _check("wallet", wallet_template)


@pytest.mark.parametrize("key", ["identity", "staff_identity"])
async def test_the_identity_migrations_produce_the_committed_schema(key: str) -> None:
    database = f"hwt{os.getpid()}_schema_{key}_{uuid.uuid4().hex[:6]}"
    try:
        await databases.migrate(key, database=database)
        await _check(key, database)
    finally:
        await pgtemplate.drop_database(database)


def test_every_database_has_a_schema_file() -> None:
    for key in databases.DATABASES:
        assert schema.schema_path(databases.migration_folder(key)).exists(), key


def test_the_dump_is_normalized() -> None:
    raw = (
        "--\n-- PostgreSQL database dump\n--\n\n\\restrict aBcD123\n\n"
        "-- Dumped from database version 15.20\n-- Dumped by pg_dump version 17.6\n\n"
        "SET statement_timeout = 0;\nSET transaction_timeout = 0;\n"
        "SELECT pg_catalog.set_config('search_path', '', false);\n\n\n\n"
        "-- Name: t; Type: TABLE; Schema: public; Owner: -\n\n"
        "CREATE TABLE public.t (\n    id integer   \n);\n\n"
        "GRANT SELECT ON TABLE public.t TO hiwallet_staff_identity_app;\n\n"
        "\\unrestrict aBcD123\n"
    )
    assert schema.normalize(raw, "staff_identity", "identity") == schema.HEADER + (
        "\n-- Name: t; Type: TABLE; Schema: public; Owner: -\n\n"
        "CREATE TABLE public.t (\n    id integer\n);\n\n"
        "GRANT SELECT ON TABLE public.t TO hiwallet_identity_app;\n"
    )
