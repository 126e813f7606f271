"""`hiwallet migrate`: creates the database, applies numbered files once, is safe to run from
several processes at once, and refuses a file changed after it ran."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest

from hiwallet.contracts import databases
from hiwallet.core import db
from hiwallet.core.settings import Settings
from tests import pgtemplate


@pytest.fixture
def database() -> str:
    return f"hwt{os.getpid()}_mig_{uuid.uuid4().hex[:8]}"


async def test_concurrent_migrate_processes_apply_each_file_once(database: str) -> None:
    env = {**os.environ}
    code = (
        "import asyncio, sys; from hiwallet.contracts import databases; "
        f"print(asyncio.run(databases.migrate('wallet', database='{database}')))"
    )
    try:
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", code, env=env, stdout=asyncio.subprocess.PIPE
            )
            for _ in range(4)
        ]
        outputs = [(await asyncio.wait_for(p.communicate(), 120))[0].decode() for p in procs]
        assert all(p.returncode == 0 for p in procs), outputs
        applied = [eval(out.strip().splitlines()[-1]) for out in outputs]  # lists of versions
        files = [m.version for m in db.load_migrations(Path(db.get_settings().migrations_dir) / "wallet")]
        # exactly one process applied everything; the others found nothing to do
        assert sorted(applied, key=len) == [[], [], [], files]
        conn = await asyncpg.connect(db.owner_dsn(database))
        try:
            rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        finally:
            await conn.close()
        assert [r["version"] for r in rows] == files
        assert await databases.migrate("wallet", database=database) == []  # idempotent
    finally:
        await pgtemplate.drop_database(database)


async def test_a_changed_migration_is_refused(database: str, tmp_path: Path) -> None:
    folder = tmp_path / "wallet"
    folder.mkdir()
    (folder / "0001_first.sql").write_text("CREATE TABLE t (id int PRIMARY KEY);")
    settings = Settings(migrations_dir=tmp_path)
    try:
        assert await databases.migrate("wallet", database=database, settings=settings) == [1]
        (folder / "0001_first.sql").write_text("CREATE TABLE t (id bigint PRIMARY KEY);")
        with pytest.raises(db.MigrationChanged):
            await databases.migrate("wallet", database=database, settings=settings)
        (folder / "0001_first.sql").write_text("CREATE TABLE t (id int PRIMARY KEY);")
        (folder / "0002_broken.sql").write_text("CREATE TABLE u (id int PRIMARY KEY); SELECT 1/0;")
        with pytest.raises(asyncpg.DivisionByZeroError):
            await databases.migrate("wallet", database=database, settings=settings)
        # the failed file left nothing: its table is not there and it is not recorded
        conn = await asyncpg.connect(db.owner_dsn(database))
        try:
            assert await conn.fetchval("SELECT to_regclass('u')") is None
            assert await conn.fetchval("SELECT max(version) FROM schema_migrations") == 1
        finally:
            await conn.close()
    finally:
        await pgtemplate.drop_database(database)


def test_migration_files_are_named_and_numbered(tmp_path: Path) -> None:
    (tmp_path / "1_first.sql").write_text("SELECT 1;")
    with pytest.raises(ValueError, match="NNNN_name"):
        db.load_migrations(tmp_path)
    for key in databases.DATABASES:
        folder = db.get_settings().migrations_dir / databases.migration_folder(key)
        if folder.is_dir():
            versions = [m.version for m in db.load_migrations(folder)]
            assert versions == list(range(1, len(versions) + 1)), key
