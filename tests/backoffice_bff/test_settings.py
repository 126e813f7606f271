"""backoffice-bff's start-up rules and catalogue, without a browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from pydantic import SecretStr

from hiwallet.backoffice_bff.app import refuse_plain_http
from hiwallet.backoffice_bff.routes import MENU
from hiwallet.backoffice_bff.settings import BackofficeBffSettings
from hiwallet.core.settings import InsecureSettings, insecure_settings

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "hiwallet" / "backoffice_bff"
_MESSAGE = re.compile(r"""_\(\s*(["'])(.+?)\1""")


def test_production_refuses_plain_http_and_the_shipped_secrets() -> None:
    with pytest.raises(InsecureSettings):
        refuse_plain_http(BackofficeBffSettings(), production=True)
    refuse_plain_http(BackofficeBffSettings(), production=False)  # the development exception
    refuse_plain_http(BackofficeBffSettings(public_url="https://panel.example"), production=True)
    shipped = " ".join(insecure_settings(BackofficeBffSettings()))
    assert "CLIENT_SECRET" in shipped and "SESSION_KEYS" in shipped
    own = BackofficeBffSettings(client_secret=SecretStr("s" * 40), session_keys=SecretStr("k1:" + "B" * 43))
    assert insecure_settings(own) == []


def test_every_message_has_its_turkish() -> None:
    """Each message of the templates and the menu is in the Turkish catalogue, translated."""
    wanted = {m[1] for t in (PACKAGE / "templates").glob("*.html") for m in _MESSAGE.findall(t.read_text())}
    wanted |= {label for _, _, label in MENU}
    with (PACKAGE / "locale" / "tr" / "LC_MESSAGES" / "messages.po").open("rb") as po:
        catalog = read_po(po, locale="tr")
    translated = {m.id for m in catalog if m.id and m.string}
    assert wanted - translated == set()
