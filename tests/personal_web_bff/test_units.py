"""personal-web-bff's pure parts: amounts as people type them, IBANs checked before sending,
a production start refused on a plain-http public URL."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hiwallet.core.settings import InsecureSettings, Settings
from hiwallet.personal_web_bff.app import checked_iban, minor_units, refuse_plain_http
from hiwallet.personal_web_bff.settings import PersonalWebBffSettings


@pytest.mark.parametrize(
    ("typed", "minor"),
    [("12", 1200), ("12,5", 1250), ("12.50", 1250), (" 0,01 ", 1), ("0", None), ("1.234,56", None),
     ("12,345", None), ("-5", None), ("abc", None), ("", None), ("1" * 13, None)],
)  # fmt: skip
def test_amounts_as_typed(typed: str, minor: int | None) -> None:
    assert minor_units(typed) == minor


def test_an_iban_is_checked_and_compacted() -> None:
    assert checked_iban("TR33 0006 1005 1978 6457 8413 26") == "TR330006100519786457841326"
    assert checked_iban("TR33 0006 1005 1978 6457 8413 27") is None  # a check-digit typo
    assert checked_iban("not an iban") is None


def test_production_refuses_a_plain_http_public_url() -> None:
    plain = PersonalWebBffSettings(public_url="http://127.0.0.1:8002")
    with pytest.raises(InsecureSettings):
        refuse_plain_http(plain, Settings(production=True))
    refuse_plain_http(plain, Settings(production=False))
    refuse_plain_http(
        PersonalWebBffSettings(public_url="https://web.hiwallet.example"), Settings(production=True)
    )


def test_our_bank_account_must_be_an_iban() -> None:
    """Shown to every person as where to wire money: a typo refuses to start."""
    good = PersonalWebBffSettings(bank_iban="TR42 0006 1000 0000 0012 3456 78")
    assert good.bank_iban == "TR420006100000000012345678"
    with pytest.raises(ValidationError):
        PersonalWebBffSettings(bank_iban="TR42 0006 1000 0000 0012 3456 79")
