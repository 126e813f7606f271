"""withdrawal-orchestrator's served OpenAPI document is exact (tests/contract.py: Schemathesis,
every check, positive, negative and coverage cases), served over HTTP with a customer's token
on every case; wallet-api's membership answer stood in (conftest.WalletApiStub). Half the
positive cases are pointed at the customer's own wallet, a real IBAN, TRY and a fresh key, so
generation reaches a kept withdrawal (202) and its reading. The staff paths are checked with
employees' tokens in test_staff.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from hiwallet.withdrawals.app import create_withdrawal_app
from tests import contract
from tests.servers import serve, stop
from tests.withdrawals.conftest import IBAN, WalletApiStub, customer, settings_for, verifier


@pytest.fixture
async def served(withdrawal_db: str) -> AsyncIterator[tuple[str, str, str]]:
    """The orchestrator's URL, a customer's token and wallet."""
    who = customer()
    stub = WalletApiStub(members={(who.subject, who.wallet)})
    wallet_api = stub.client()
    app = create_withdrawal_app(
        settings_for(withdrawal_db), background=False, verifier=verifier(), wallet_api=wallet_api
    )
    url, server, thread = serve(app, "withdrawal-orchestrator")
    try:
        yield url, who.auth["Authorization"].removeprefix("Bearer "), who.wallet
    finally:
        stop(server, thread)
        await wallet_api.aclose()


def test_the_service_matches_its_document(served: tuple[str, str, str]) -> None:
    url, token, wallet = served
    saga: list[str] = []

    def steer(case: Any) -> None:
        if contract.digest(case)[0] % 2:
            return
        if isinstance(case.body, dict):
            case.body.update(wallet=wallet, currency="TRY", destination_iban=IBAN)
            if isinstance(case.body.get("amount_minor"), int):
                case.body["amount_minor"] = 1 + case.body["amount_minor"] % 100_000
        if isinstance(case.query, dict) and "wallet" in case.query:
            case.query["wallet"] = wallet
            case.query.pop("cursor", None)
        if saga and "withdrawal_id" in (case.path_parameters or {}):
            case.path_parameters["withdrawal_id"] = saga[0]
        if "Idempotency-Key" in (case.headers or {}):
            case.headers["Idempotency-Key"] = str(uuid.UUID(bytes=contract.digest(case)[:16]))

    # one withdrawal kept before the run, for the readings to find
    r = httpx.post(
        f"{url}/v1/withdrawals",
        json={"wallet": wallet, "amount_minor": 100, "currency": "TRY", "destination_iban": IBAN},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 202, r.text
    saga.append(r.json()["id"])
    seen = contract.check_document(url, token=lambda: token, steer=steer, exclude_path_regex=r"^/v1/staff/")
    for reached in (
        "POST /v1/withdrawals 202",
        "GET /v1/withdrawals/{withdrawal_id} 200",
        "GET /v1/withdrawals 200",
    ):
        assert seen[reached], (reached, seen)


def test_the_document_names_the_currencies_the_service_takes(served: tuple[str, str, str]) -> None:
    url, token, wallet = served
    document = httpx.get(f"{url}/openapi.json").json()
    currency = document["components"]["schemas"]["WithdrawalIn"]["properties"]["currency"]
    assert currency["enum"] == ["TRY", "EUR", "USD"]  # the setting's default
    refused = httpx.post(
        f"{url}/v1/withdrawals",
        json={"wallet": wallet, "amount_minor": 100, "currency": "GBP", "destination_iban": IBAN},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": str(uuid.uuid4())},
    )
    assert refused.status_code == 422, refused.text
