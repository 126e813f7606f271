"""topup-webhook's served OpenAPI document is exact (tests/contract.py: Schemathesis, every
check, positive, negative and coverage cases), over HTTP. A notification without a valid
signature is refused 400 by design (as a request without a token is 401 elsewhere), so 400 is
an accepted refusal here; half the positive cases are replaced by a real notification of the
provider, signed as it signs, so generation reaches the kept ones (202)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from hiwallet.topup_webhook.app import create_topup_webhook_app
from tests import contract
from tests.servers import serve, stop
from tests.topup_webhook.conftest import (
    bank_notification,
    bank_signed,
    stripe_events,
    stripe_signed,
    topup_settings,
    wallet_id,
    wire,
)


@pytest.fixture
def served(topup_db: str) -> Iterator[str]:
    url, server, thread = serve(create_topup_webhook_app(topup_settings(topup_db), background=False), "topup")
    try:
        yield url
    finally:
        stop(server, thread)


def _signed(case: Any) -> None:
    if contract.digest(case)[0] % 2:
        return
    event: dict[str, Any]
    if case.path.endswith("/stripe"):
        event, _ = stripe_events(wallet=wallet_id(), amount=1 + contract.digest(case)[1])
        sign = stripe_signed
    else:
        event = orjson.loads(bank_notification(wire(reference=wallet_id())))
        sign = bank_signed
    # Signed over the bytes the client sends (requests: json.dumps), the body left an object, so
    # that Schemathesis still knows the case for a positive one.
    case.body = event
    case.headers = {**(case.headers or {}), **sign(json.dumps(event, allow_nan=False).encode())}


def test_the_service_matches_its_document(served: str) -> None:
    seen = contract.check_document(served, steer=_signed, accepted=("400", "422"))
    for reached in (
        "POST /v1/webhooks/topup/stripe 202",
        "POST /v1/webhooks/topup/bank 202",
        "POST /v1/webhooks/topup/stripe 400",
    ):
        assert seen[reached], (reached, seen)
