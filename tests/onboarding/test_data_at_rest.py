"""Personal data at rest and in logs: sealed field by field (AES-GCM, the key's id in each value,
the place bound as associated data), looked up by keyed hashes, re-sealed by ``rekey``; the
password nowhere; no e-mail, phone or TCKN in any log line of the run."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hiwallet.cli import app as cli
from hiwallet.core.settings import InsecureSettings, Settings, get_settings
from hiwallet.onboarding.crypto import Hasher, KeyRing, Undecryptable, kid_of, place
from hiwallet.onboarding.rekey import rekey
from hiwallet.onboarding.settings import (
    DEV_DATA_KEYS,
    OnboardingSettings,
    check_production,
    get_onboarding_settings,
)
from hiwallet.onboarding.store import database_spec
from tests.onboarding.conftest import AYSE, PASSWORD, Onboarding

PHONE = "+905321110009"
NEW_KEY = "k2:" + base64.b64encode(b"a-new-key-for-the-rotation-12345").decode()
SEALED = ("phone_enc", "tckn_enc", "given_name_enc", "family_name_enc", "birth_date_enc")


async def verified_customer(onb: Onboarding) -> tuple[str, str]:
    email, auth = await onb.customer()
    assert (await onb.verify_phone(auth, PHONE)).status_code == 200
    assert (await onb.http.post("/v1/me/identity", json=AYSE, headers=auth)).status_code == 200
    assert (await onb.accept_all(auth)).json()["tier"] == "unverified"
    (customer_id,) = [r["id"] for r in await onb.sql("SELECT id FROM onboarding.customers")]
    return email, customer_id


async def everything_stored(onb: Onboarding) -> bytes:
    """Every value of every row of every table, as bytes."""
    out = b""
    async with onb.owner() as conn:
        for table in ("registrations", "customers", "phone_codes", "consents", "rate_hits"):
            for row in await conn.fetch(f"SELECT * FROM onboarding.{table}"):
                for value in row.values():
                    out += value if isinstance(value, bytes) else str(value).encode()
                    out += b"\x00"
    return out


async def test_the_columns_hold_no_personal_data_and_do_not_open_without_the_key(onb: Onboarding) -> None:
    email, customer_id = await verified_customer(onb)
    stored = await everything_stored(onb)
    for plain in (
        email,
        PHONE,
        PHONE[3:],
        AYSE["tckn"],
        "AYŞE",
        "Ayşe",
        "Yılmaz",
        AYSE["birth_date"],
        PASSWORD,
    ):
        assert plain.encode() not in stored, plain
    row = (await onb.sql("SELECT * FROM onboarding.customers"))[0]
    ring = KeyRing.parse(onb.settings.data_keys.get_secret_value())
    # with the key, each opens in its own place only
    assert ring.open(row["tckn_enc"], place("customers", "tckn_enc", customer_id)) == AYSE["tckn"]
    assert ring.open(row["phone_enc"], place("customers", "phone_enc", customer_id)) == PHONE
    with pytest.raises(Undecryptable):  # moved to another column
        ring.open(row["tckn_enc"], place("customers", "phone_enc", customer_id))
    with pytest.raises(Undecryptable):  # moved to another row
        ring.open(row["tckn_enc"], place("customers", "tckn_enc", "another"))
    # without the key (another key of the same id, or none of its id), nothing opens
    impostor = KeyRing.parse("dev1:" + base64.b64encode(os.urandom(32)).decode())
    other = KeyRing.parse(NEW_KEY)
    for column in SEALED:
        assert kid_of(row[column]) == "dev1"
        for wrong in (impostor, other):
            with pytest.raises(Undecryptable):
                wrong.open(row[column], place("customers", column, customer_id))
    # the lookups are keyed hashes: the plain SHA-256 of the TCKN is not there
    import hashlib

    assert hashlib.sha256(AYSE["tckn"].encode()).digest() not in stored
    assert row["tckn_hash"] == Hasher.parse(onb.settings.hash_key.get_secret_value()).tckn(AYSE["tckn"])


async def test_rekey_reseals_everything_under_the_new_key(
    onb: Onboarding, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, customer_id = await verified_customer(onb)
    both = KeyRing.parse(f"{NEW_KEY},{DEV_DATA_KEYS}")
    pool = await database_spec(onb.settings).create_pool(get_settings(), max_size=2)
    try:
        report = await rekey(pool, both, batch=1)
    finally:
        await pool.close()
    assert report.resealed == len(SEALED) + 1  # the customer's five, the registration's e-mail
    row = (await onb.sql("SELECT * FROM onboarding.customers"))[0]
    only_new = KeyRing.parse(NEW_KEY)
    assert only_new.open(row["tckn_enc"], place("customers", "tckn_enc", customer_id)) == AYSE["tckn"]
    assert {kid_of(row[c]) for c in SEALED} == {"k2"}
    # the command, again: nothing left to re-seal
    monkeypatch.setenv("HIWALLET_ONBOARDING_DATA_KEYS", f"{NEW_KEY},{DEV_DATA_KEYS}")
    monkeypatch.setenv("HIWALLET_ONBOARDING_DATABASE", onb.database)
    get_onboarding_settings.cache_clear()
    try:
        # the command runs its own event loop: in a thread of its own
        result = await asyncio.to_thread(CliRunner().invoke, cli, ["onboarding", "rekey"])
    finally:
        get_onboarding_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "0 field(s) re-sealed under key k2" in result.output


def test_production_refuses_the_development_keys() -> None:
    check_production(OnboardingSettings(), core=Settings())  # on a laptop: fine
    production = Settings(production=True, amqp_url="amqp://onboarding:a-real-password@rabbitmq:5672/")
    with pytest.raises(InsecureSettings, match=r"DATA_KEYS.*HASH_KEY.*CLIENT_SECRET"):
        check_production(OnboardingSettings(), core=production)
    real = {
        "data_keys": NEW_KEY,
        "hash_key": base64.b64encode(os.urandom(32)).decode(),
        "client_secret": "a-real-secret",
        "sms_api_key": "a-real-sms-key",
    }
    check_production(OnboardingSettings(**real), core=production)
    # a key ring that still holds the development key (a rotation's overlap) is refused too
    overlap = OnboardingSettings(**{**real, "data_keys": f"{NEW_KEY},{DEV_DATA_KEYS}"})
    with pytest.raises(InsecureSettings, match=r"DATA_KEYS"):
        check_production(overlap, core=production)


async def test_no_log_line_of_the_run_holds_the_email_phone_or_tckn(onb: Onboarding) -> None:
    email, _ = await verified_customer(onb)
    log = await asyncio.to_thread(Path(os.environ["HIWALLET_LOG_FILE"]).read_text, errors="replace")
    assert "onboarding" in log  # the scan sees the service's lines
    for plain in (email, PHONE, PHONE[1:], AYSE["tckn"], "Yılmaz", "YILMAZ", PASSWORD):
        assert plain not in log, plain
