"""core.pages: money and times written for the locale, the locale a request is answered in, and
a template's messages from its gettext catalogue in Turkish and English."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.requests import Request

from hiwallet.core.pages import LOCALE_COOKIE, Pages, format_money


@pytest.mark.parametrize(
    ("minor", "currency", "locale", "written"),
    [
        (123456, "TRY", "tr", "1.234,56 ₺"),
        (123456, "TRY", "en", "₺1,234.56"),
        (5, "TRY", "tr", "0,05 ₺"),
        (-250, "EUR", "tr", "−2,50 €"),
        (100000000, "USD", "en", "$1,000,000.00"),
        (1234, "JPY", "en", "¥1,234"),  # no minor unit: no decimals
    ],
)
def test_money_is_written_for_the_locale(minor: int, currency: str, locale: str, written: str) -> None:
    assert format_money(minor, currency, locale) == written


def _request(accept_language: str = "", cookie: str | None = None) -> Request:
    headers = [(b"accept-language", accept_language.encode())]
    if cookie is not None:
        headers.append((b"cookie", f"{LOCALE_COOKIE}={cookie}".encode()))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers, "query_string": b""})


@pytest.mark.parametrize(
    ("accept", "cookie", "locale"),
    [
        ("", None, "tr"),
        ("en-GB,en;q=0.9", None, "en"),
        ("de-DE,de;q=0.9,en;q=0.5", None, "en"),
        ("tr-TR", None, "tr"),
        ("fr", None, "tr"),
        ("en", "tr", "tr"),  # the person's choice wins over the browser's
        ("tr", "en", "en"),
        ("en", "xx", "en"),  # an unknown choice is ignored
        ("x" * 5000, None, "tr"),
    ],
)
def test_the_locale_of_a_request(accept: str, cookie: str | None, locale: str) -> None:
    assert Pages.locale_of(_request(accept, cookie)) == locale


def test_a_page_in_both_languages(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "home.html").write_text(
        '<p>{{ _("Balance") }}: {{ amount | money("TRY") }}</p>'
        '<p>{{ at | when }}</p><p lang="{{ locale }}"></p>'
    )
    po = tmp_path / "locale" / "tr" / "LC_MESSAGES"
    po.mkdir(parents=True)
    header = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
    (po / "messages.po").write_text(header + 'msgid "Balance"\nmsgstr "Bakiye"\n')
    pages = Pages(templates, tmp_path / "locale")
    at = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)

    turkish = pages.render(_request("tr"), "home.html", {"amount": 123456, "at": at})
    english = pages.render(_request("en"), "home.html", {"amount": 123456, "at": at})

    assert "<p>Bakiye: 1.234,56 ₺</p>" in turkish.body.decode()
    assert "15:00" in turkish.body.decode()  # Istanbul's time
    assert turkish.headers["content-language"] == "tr"
    assert "<p>Balance: ₺1,234.56</p>" in english.body.decode()
    assert 'lang="en"' in english.body.decode()
    assert (pages.text("tr", "Balance"), pages.text("en", "Balance")) == ("Bakiye", "Balance")
