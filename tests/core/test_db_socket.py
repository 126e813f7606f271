"""A server named by its Unix socket (issue 26, docs/performance.md): a URL with no host and the
socket's directory in the query string keeps its "//" and its query through every DSN helper,
as libpq (pgbench, pg_dump) needs; the TCP default is unchanged."""

from __future__ import annotations

import pytest

from hiwallet.core import db
from hiwallet.core.settings import Settings

pytestmark = pytest.mark.in_process

SOCKET = "postgresql:///?host=/var/run/postgresql&port=5432"


def test_a_socket_url_keeps_its_host_in_every_dsn() -> None:
    s = Settings(database_url=SOCKET)  # type: ignore[arg-type]
    query = "?host=/var/run/postgresql&port=5432"
    assert db.service_dsn("hiwallet_wallet", "hiwallet_wallet_app", s) == (
        f"postgresql://hiwallet_wallet_app@/hiwallet_wallet{query}"
    )
    assert db.owner_dsn("hiwallet_wallet", s) == f"postgresql:///hiwallet_wallet{query}"
    assert db.owner_dsn("postgres", s, server_of="hiwallet_wallet") == f"postgresql:///postgres{query}"


def test_an_owner_on_the_socket() -> None:
    s = Settings(
        database_url="postgresql://localhost:5432",
        migrate_database_url="postgresql://owner@/?host=/var/run/postgresql",
    )  # type: ignore[arg-type]
    assert (
        db.owner_dsn("hiwallet_wallet", s) == "postgresql://owner@/hiwallet_wallet?host=/var/run/postgresql"
    )
    # the services stay on the default, TCP
    assert db.service_dsn("hiwallet_wallet", "hiwallet_wallet_app", s) == (
        "postgresql://hiwallet_wallet_app@localhost:5432/hiwallet_wallet"
    )


def test_the_tcp_default_is_unchanged() -> None:
    s = Settings(database_url="postgresql://localhost:5432")  # type: ignore[arg-type]
    assert db.owner_dsn("hiwallet_wallet", s) == "postgresql://localhost:5432/hiwallet_wallet"
    assert db.owner_dsn("postgres", s) == "postgresql://localhost:5432/postgres"
