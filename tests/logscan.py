"""The secrets no log line may hold, and the scan of a test run's log for them.

Every process the test suite starts (in-process servers, `hiwallet run` subprocesses and their
workers) writes its JSON lines to one file as well (``HIWALLET_LOG_FILE``, set for the session
in tests/conftest.py); at the end of the run :func:`find_secrets` reads it and the run fails if
a password, a token, a client secret or an e-mail address appears in it.
"""

from __future__ import annotations

import contextlib
import json
import re

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


def find_secrets(text: str) -> list[tuple[str, str]]:
    """(kind, the line) for each line of ``text`` that holds a secret."""
    found = []
    for line in text.splitlines():
        for kind, pattern in PATTERNS.items():
            if pattern.search(line):
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
