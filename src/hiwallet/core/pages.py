"""Server-rendered pages in Turkish and English: Jinja2 with gettext catalogues (Babel), the
locale a request is answered in, and amounts and times written for that locale.

- A package's pages live in its ``templates/`` and its messages in
  ``locale/<lang>/LC_MESSAGES/messages.po`` (``pybabel extract -F babel.cfg`` finds the
  ``{% trans %}`` and ``_()`` of the templates; the catalogues are read, and compiled in memory,
  at start: no binary file is committed).
- The locale: the person's choice (the ``hiwallet-locale`` cookie, set by the language switch),
  else the browser's ``Accept-Language``, else Turkish.
- Money: ``1.234,56 ₺`` in Turkish (the sign after the amount, as written in Turkey), ``₺1,234.56``
  in English, with the currency's own number of decimals; never a float (minor units in).
- Times: in Istanbul's time zone (the customers' and staff's), the locale's medium format.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
from babel import Locale, negotiate_locale
from babel.dates import format_date, format_datetime
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import NumberPattern, get_currency_precision, get_currency_symbol, parse_pattern
from babel.support import Translations
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

__all__ = ["DEFAULT_LOCALE", "LOCALES", "LOCALE_COOKIE", "Pages", "format_money"]

LOCALES = ("tr", "en")
DEFAULT_LOCALE = "tr"
LOCALE_COOKIE = "hiwallet-locale"
TIME_ZONE = ZoneInfo("Europe/Istanbul")
# Symbols the English locale does not know (CLDR writes "TRY"): the one people read.
_SYMBOLS = {"TRY": "₺"}


@functools.lru_cache(maxsize=256)
def _money_format(currency: str, locale: str) -> tuple[int, NumberPattern, Locale, str]:
    """What format_money needs of a currency in a locale, worked out once: babel parses the
    locale and the pattern again on every call, most of a page's formatting time."""
    digits = get_currency_precision(currency)
    pattern = parse_pattern("#,##0" + ("." + "0" * digits if digits else ""))
    symbol = _SYMBOLS.get(currency) or get_currency_symbol(currency, locale)
    return digits, pattern, Locale.parse(locale), symbol


def format_money(amount_minor: int, currency: str, locale: str) -> str:
    """``123456, "TRY", "tr"`` -> ``1.234,56 ₺``; ``"en"`` -> ``₺1,234.56``."""
    digits, pattern, parsed, symbol = _money_format(currency, locale)
    amount = Decimal(amount_minor).scaleb(-digits)
    number = pattern.apply(abs(amount), parsed)  # format_decimal(abs(amount), pattern, locale)
    sign = "−" if amount < 0 else ""  # U+2212, the minus sign
    return f"{sign}{number} {symbol}" if locale == "tr" else f"{sign}{symbol}{number}"


def _translations(directory: Path, locale: str) -> Translations:
    """The package's catalogue for ``locale``, compiled in memory; empty when there is none."""
    path = directory / locale / "LC_MESSAGES" / "messages.po"
    if not path.exists():
        return Translations()
    with path.open("rb") as po:
        catalog = read_po(po, locale=locale)
    buffer = io.BytesIO()
    write_mo(buffer, catalog)
    buffer.seek(0)
    return Translations(buffer)


@dataclass
class Pages:
    """One package's pages: a Jinja environment per locale (its messages installed)."""

    templates: Path
    catalogues: Path
    globals: Mapping[str, Any] = field(default_factory=dict)
    _envs: dict[str, jinja2.Environment] = field(default_factory=dict, init=False)
    _translations: dict[str, Translations] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for locale in LOCALES:
            env = jinja2.Environment(
                loader=jinja2.FileSystemLoader(self.templates),
                # Compiled once: a deployment's templates change with a new release only, and
                # checking each file's time on every render costs a page system calls.
                auto_reload=False,
                autoescape=True,
                undefined=jinja2.StrictUndefined,
                extensions=["jinja2.ext.i18n"],
            )
            translations = self._translations[locale] = _translations(self.catalogues, locale)
            env.install_gettext_translations(translations, newstyle=True)  # type: ignore[attr-defined]
            env.globals.update(self.globals)
            env.globals["locale"] = locale
            env.filters["money"] = lambda minor, currency, _l=locale: format_money(
                int(minor), str(currency), _l
            )
            env.filters["when"] = lambda value, _l=locale: _when(value, _l)
            env.filters["day"] = lambda value, _l=locale: format_date(value, format="medium", locale=_l)
            self._envs[locale] = env

    @staticmethod
    def locale_of(request: Request) -> str:
        chosen = request.cookies.get(LOCALE_COOKIE)
        if chosen in LOCALES:
            return chosen
        return _negotiate(request.headers.get("accept-language", ""))

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any] | None = None,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        locale = self.locale_of(request)
        html = self._envs[locale].get_template(template).render({"request": request, **(context or {})})
        return HTMLResponse(html, status_code=status, headers={"Content-Language": locale, **(headers or {})})

    def text(self, locale: str, message: str) -> Markup:
        """One message in ``locale`` (for a value made outside a template)."""
        return Markup(self._translations[locale].gettext(message))


def _when(value: datetime, locale: str) -> str:
    return format_datetime(value.astimezone(TIME_ZONE), format="medium", locale=locale)


def _negotiate(header: str) -> str:
    preferred: list[str] = []
    for part in header.split(",")[:10]:  # bounded: a header is the client's to make long
        tag = part.split(";")[0].strip().replace("-", "_")
        if tag and len(tag) <= 20:
            preferred.append(tag)
    found = negotiate_locale(preferred, list(LOCALES), sep="_") if preferred else None
    if found is None:
        # "en-GB" and "tr-TR" are asked for as such: their language is what we have.
        languages: Iterable[str] = (p.split("_")[0].lower() for p in preferred)
        found = next((lang for lang in languages if lang in LOCALES), None)
    return found or DEFAULT_LOCALE
