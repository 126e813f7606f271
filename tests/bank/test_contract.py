"""bank-webhook's served OpenAPI document is exact (tests/contract.py: Schemathesis, every
check, positive, negative and coverage cases), over HTTP. A callback without a valid signature is
refused 400 by design, so 400 is an accepted refusal here; half the positive cases are replaced
by a callback signed as the bank signs, so generation reaches the kept ones (202)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from hiwallet.bank.webhook import PATH, create_bank_webhook_app
from tests import contract
from tests.bank.conftest import bank_settings, callback_body, signed
from tests.servers import serve, stop


@pytest.fixture
def served(bank_db: str) -> Iterator[str]:
    url, server, thread = serve(create_bank_webhook_app(bank_settings(bank_db)), "bank-webhook")
    try:
        yield url
    finally:
        stop(server, thread)


def _signed(case: Any) -> None:
    if contract.digest(case)[0] % 2:
        return
    callback = orjson.loads(
        callback_body("transfer.succeeded", f"bank_{uuid.uuid4().hex[:16]}", str(uuid.uuid4()))
    )
    # Signed over the bytes the client sends (requests: json.dumps), the body left an object, so
    # that Schemathesis still knows the case for a positive one.
    case.body = callback
    case.headers = {**(case.headers or {}), **signed(json.dumps(callback, allow_nan=False).encode())}


def test_the_service_matches_its_document(served: str) -> None:
    seen = contract.check_document(served, steer=_signed, accepted=("400", "422"))
    assert seen[f"POST {PATH} 202"] and seen[f"POST {PATH} 400"], seen
