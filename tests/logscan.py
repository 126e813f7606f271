"""The secrets no log line may hold, and the scan of a test run's log for them.

Every process the test suite starts (in-process servers, `hiwallet run` subprocesses and their
workers) writes its JSON lines to one file as well (``HIWALLET_LOG_FILE``, set for the session
in tests/conftest.py); at the end of the run :func:`find_secrets` reads it and the run fails if
a password, a token, a client secret, an e-mail address, a phone number, a TCKN, an IBAN or a
name of the tests' people appears in it.

The personal numbers are found by their shape and then checked (a TCKN's check digits, an
IBAN's mod-97), so ids, hashes, counts and timestamps do not pass for them
(tests/test_logscan.py holds lines of both kinds).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable

from schwifty import IBAN
from schwifty.exceptions import SchwiftyException
from stdnum.tr import tckimlik

from hiwallet.up import DEMO_PASSWORD

# The passwords the tests use (the demo's, the identity tests', the bench's).
PASSWORDS = (DEMO_PASSWORD, "correct horse battery", "bench password 1")
PATTERNS = {
    "password": re.compile("|".join(re.escape(p) for p in PASSWORDS)),
    # A JWT: base64url of a JSON header and payload (both start with '{"', i.e. "eyJ").
    "token": re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    "bearer": re.compile(r"Bearer\s+[A-Za-z0-9._~+/-]{8,}", re.IGNORECASE),
    "client secret": re.compile(r"dev-[a-z-]+-secret"),
    "e-mail": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
}

# A number standing alone: not part of a word, an id (hex, base62, "0421:w:…"), a decimal or a
# timestamp ("2026-12-03T12:11:18.123456Z": digits joined by - : . T).
_ALONE_BEFORE = r"(?<![\w.:+-])"
_ALONE_AFTER = r"(?![\w.:-])"
# Turkish mobile numbers as people write them and as E.164: +90 5xx xxx xx xx, 0 5xx…,
# 5xxxxxxxxx (a JSON string, a word: never a JSON number, which follows a colon).
_PHONE = re.compile(r"(?:\+90[ -]?|(?<![\w.:+-])0?)5\d{2}[ -]?\d{3}[ -]?\d{2}[ -]?\d{2}" + _ALONE_AFTER)
_TCKN = re.compile(_ALONE_BEFORE + r"[1-9]\d{10}" + _ALONE_AFTER)
# Two letters, two check digits, then 11 to 30 letters and digits, in groups of four or not.
_IBAN = re.compile(r"(?<![\w])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![\w])")

# The people of the tests' fixtures (tests/onboarding/conftest.py, tests/e2e/onboarding.py,
# nvi-fake's population, the bank's senders, staff invitations): each full name, and each part
# long or Turkish enough not to be an ordinary word of a log line ("Ali", "Nur", "Kaya" only
# in a full name).
FULL_NAMES = (
    "Ayşe Yılmaz",
    "Mehmet Öztürk",
    "İsmail Çelik",
    "Hasan Demir",
    "Ali Veli",
    "Zeynep Nur Kaya",
    "Mehmet Demir",
    "Deniz Kaya",
)
NAME_PARTS = ("Ayşe", "Yılmaz", "Mehmet", "Öztürk", "İsmail", "Çelik", "Hasan", "Demir", "Zeynep", "Deniz")


def _spellings(name: str) -> set[str]:
    """As written, in Turkish upper and lower case (İ/i and I/ı), and as Python cases it."""
    upper = name.replace("i", "İ").replace("ı", "I").upper()
    lower = name.replace("İ", "i").replace("I", "ı").lower()
    return {name, upper, lower, name.upper(), name.lower(), lower.title()}


_NAMES = re.compile(
    r"(?<!\w)(?:"
    + "|".join(
        re.escape(s) for n in sorted({*FULL_NAMES, *NAME_PARTS}, key=len, reverse=True) for s in _spellings(n)
    )
    + r")(?!\w)"
)


def _tckn(candidate: str) -> bool:
    return bool(tckimlik.is_valid(candidate))


def _iban(candidate: str) -> bool:
    try:
        IBAN(candidate.replace(" ", ""))
    except SchwiftyException:
        return False
    return True


# Found by shape, kept only if the check says so.
CHECKED: dict[str, tuple[re.Pattern[str], Callable[[str], bool]]] = {
    "phone number": (_PHONE, lambda _: True),
    "TCKN": (_TCKN, _tckn),
    "IBAN": (_IBAN, _iban),
    "name": (_NAMES, lambda _: True),
}


def find_secrets(text: str) -> list[tuple[str, str]]:
    """(kind, the line) for each line of ``text`` that holds a secret."""
    found = []
    for line in text.splitlines():
        for kind, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append((kind, line))
        for kind, (pattern, valid) in CHECKED.items():
            if any(valid(m.group(0)) for m in pattern.finditer(line)):
                found.append((kind, line))
    return found


def access_services(text: str) -> set[str]:
    """The services that wrote at least one access line."""
    services = set()
    for line in text.splitlines():
        if '"event":"request"' in line:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == "request":
                    services.add(str(entry.get("service")))
    return services
