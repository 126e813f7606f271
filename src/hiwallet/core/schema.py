"""The live schema in one place: migrations/<folder>/schema.sql, generated from a freshly
migrated database by ``hiwallet schema dump`` (``make schema``).

The numbered migrations say how the schema came to be; this file says what it is now (which
``check_balanced`` is live, what ``transfer_batch`` looks like after 0007, who may do what).
tests/core/test_schema.py migrates a fresh database and fails, with the difference, unless the
migrations produce exactly the committed file: a migration added without regenerating it, or
the file edited by hand, is caught.

The dump is ``pg_dump --schema-only --no-owner`` (grants included: they are part of what the
schema allows), normalized to be the same across runs, machines and pg_dump versions 15 and
later: no version header, no ``SET`` lines, no ``\\restrict`` keys, no blank-line runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import asyncpg

from hiwallet.core import db
from hiwallet.core.settings import Settings, get_settings
from hiwallet.core.timeouts import within

HEADER = (
    "-- The live schema of this folder's databases, generated from a freshly migrated one by\n"
    "-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.\n"
    "-- tests/core/test_schema.py checks that the migrations produce exactly this.\n"
)

# pg_dump's own lines that change with its version, the server's, or the run.
_NOISE = re.compile(
    r"^(--$|-- (PostgreSQL database dump|Dumped from|Dumped by|TOC entry|Dependencies:|Started on"
    r"|Completed on)|SET |SELECT pg_catalog\.set_config\('search_path'|\\(un)?restrict )"
)
_DUMP_TIMEOUT_S = 120.0


class SchemaDumpFailed(Exception):
    """pg_dump is missing or failed; the message says which and why."""


def schema_path(folder: str, settings: Settings | None = None) -> Path:
    """migrations/<folder>/schema.sql."""
    settings = settings or get_settings()
    return settings.migrations_dir / folder / db.SCHEMA_FILE


def normalize(dump: str, key: str, folder: str) -> str:
    """pg_dump's output without what varies between runs and versions, with the role names of
    the folder's own key (a database migrated from another key's folder, as the staff realm's
    from identity's, has its own roles and the same schema)."""
    folder_key = folder
    for own, shared in (
        (db.app_role(key), db.app_role(folder_key)),
        (db.readonly_role(key), db.readonly_role(folder_key)),
    ):
        dump = re.sub(rf"\b{re.escape(own)}\b", shared, dump)
    lines = [line.rstrip() for line in dump.splitlines() if not _NOISE.match(line)]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    return HEADER + "\n" + text + "\n"


async def dump(
    key: str, database: str, settings: Settings | None = None, *, folder: str | None = None
) -> str:
    """The normalized schema of ``database`` (of key ``key``, migrated from ``folder``: default
    the key's own), as the owner sees it."""
    settings = settings or get_settings()
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        raise SchemaDumpFailed("pg_dump is not on PATH (PostgreSQL's client tools, 15 or later)")
    proc = await asyncio.create_subprocess_exec(
        pg_dump,
        "--schema-only",
        "--no-owner",
        "--no-tablespaces",
        "--dbname",
        db.owner_dsn(database, settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(proc.communicate(), _DUMP_TIMEOUT_S)
    if proc.returncode != 0:
        raise SchemaDumpFailed(f"pg_dump of {database} failed ({proc.returncode}): {err.decode()}")
    return normalize(out.decode(), key, folder or key)


async def generate(key: str, settings: Settings | None = None, *, services: Sequence[str] = ()) -> str:
    """Migrate a fresh database of ``key`` from its own folder (with the roles of its other
    ``services``), dump it, drop it."""
    settings = settings or get_settings()
    database = f"hiwallet_schema_{key}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        await db.migrate(key, database=database, settings=settings, services=services)
        return await dump(key, database, settings)
    finally:
        admin = await asyncpg.connect(db.owner_dsn("postgres", settings))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await admin.close()


async def write_all(
    keys: Sequence[str],
    settings: Settings | None = None,
    *,
    services: Mapping[str, Sequence[str]] | None = None,
) -> list[Path]:
    """Regenerate the schema.sql of each key's own folder (``services``: each key's other
    services, whose roles its grants name); returns the files written."""
    written: list[Path] = []
    for key in keys:
        path = schema_path(key, settings)
        path.write_text(await generate(key, settings, services=(services or {}).get(key, ())))
        written.append(path)
    return written
