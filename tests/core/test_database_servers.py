"""A database on a server of its own (``database_servers``, ``migrate_database_servers``): every
URL of it follows (the services', the owner's, its creation's on that server's ``postgres``);
the others stay on ``database_url``; a malformed entry stops the start. The connections
themselves: tests/onboarding/test_own_server.py, on a second cluster."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hiwallet.core import db
from hiwallet.core.settings import Settings

OWN = "hiwallet_onboarding"


def settings(**values: object) -> Settings:
    return Settings(database_url="postgresql://shared:5432", **values)  # type: ignore[arg-type]


def test_a_database_named_connects_to_its_own_server_and_the_others_to_the_shared_one() -> None:
    s = settings(database_servers={OWN: "postgresql://pii-db:6432"})
    assert (
        db.service_dsn(OWN, "hiwallet_onboarding_app", s)
        == "postgresql://hiwallet_onboarding_app@pii-db:6432/hiwallet_onboarding"
    )
    assert (
        db.service_dsn("hiwallet_wallet", "hiwallet_wallet_app", s)
        == "postgresql://hiwallet_wallet_app@shared:5432/hiwallet_wallet"
    )
    # the owner: the server's URL without a user (as for database_url); creation on its postgres
    assert db.owner_dsn(OWN, s) == "postgresql://pii-db:6432/hiwallet_onboarding"
    assert db.owner_dsn("postgres", s, server_of=OWN) == "postgresql://pii-db:6432/postgres"
    assert db.owner_dsn("postgres", s) == "postgresql://shared:5432/postgres"


def test_a_server_url_with_a_user_and_the_owners_own_url() -> None:
    s = settings(
        database_servers={OWN: "postgresql://onboarding:pw1@pii-db:6432"},
        migrate_database_servers={OWN: "postgresql://owner:pw2@pii-db:6432"},
        migrate_database_url="postgresql://shared-owner:pw3@shared:5432",
    )
    assert (
        db.service_dsn(OWN, "hiwallet_onboarding_app", s)
        == "postgresql://onboarding:pw1@pii-db:6432/hiwallet_onboarding"
    )
    assert db.owner_dsn(OWN, s) == "postgresql://owner:pw2@pii-db:6432/hiwallet_onboarding"
    assert db.owner_dsn("hiwallet_wallet", s) == "postgresql://shared-owner:pw3@shared:5432/hiwallet_wallet"
    assert "pw1" not in repr(s) and "pw2" not in str(s.model_dump())


def test_the_servers_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIWALLET_DATABASE_SERVERS", '{"hiwallet_staff_admin": "postgresql://staff-db:5432"}')
    assert db.server_url("hiwallet_staff_admin", Settings()) == "postgresql://staff-db:5432"


@pytest.mark.parametrize(
    "values",
    [
        {"database_servers": {OWN: "pii-db:6432"}},  # no scheme
        {"database_servers": {OWN: "mysql://pii-db:6432"}},
        {"database_servers": {OWN: "postgresql://"}},  # no host
        {"database_servers": {"Hiwallet Onboarding": "postgresql://pii-db"}},
        # an owner's URL for a database whose services connect to the shared server
        {"migrate_database_servers": {OWN: "postgresql://owner@pii-db"}},
    ],
)
def test_a_malformed_entry_stops_the_start(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        settings(**values)
