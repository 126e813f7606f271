"""A fresh database per test, cloned from a migrated template (as procrastinate's conftest).

Migrating once per session and cloning per test keeps tests independent and fast: CREATE
DATABASE ... TEMPLATE copies files, it does not replay SQL.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

import asyncpg

from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import get_settings

# The pid keeps two test runs on one machine (a developer's and a CI check) apart.
_PREFIX = f"hwt{os.getpid()}"


async def _admin() -> asyncpg.Connection:
    return await asyncpg.connect(db.owner_dsn("postgres", get_settings()))


async def drop_database(name: str) -> None:
    conn = await _admin()
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def make_template(key: str) -> str:
    """Create and migrate a template database of ``key``.

    Each call makes its own (the uuid): a module that wants its own template (tests/e2e) must not
    drop, when it ends, the session's template of the same key that later tests clone."""
    name = f"{_PREFIX}_tpl_{key}_{uuid.uuid4().hex[:8]}"
    await databases.migrate(key, database=name)
    return name


async def clone(template: str) -> str:
    name = f"{_PREFIX}_{uuid.uuid4().hex[:12]}"
    conn = await _admin()
    try:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await conn.close()
    return name


@asynccontextmanager
async def temporary(created: Awaitable[str]) -> AsyncIterator[str]:
    """The database ``created`` names (``make_template(key)`` for a session, ``clone(template)``
    for a test) while the block runs; dropped after."""
    name = await created
    try:
        yield name
    finally:
        await drop_database(name)


@asynccontextmanager
async def owner_connection(database: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to ``database`` as its owner: what no service may do (tests check with it)."""
    conn = await asyncpg.connect(db.owner_dsn(database))
    try:
        yield conn
    finally:
        await conn.close()
