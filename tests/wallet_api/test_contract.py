"""The served OpenAPI document is complete and true: Schemathesis generates requests from it
(valid and invalid) and sends them over HTTP with a real customer token; no answer is a server
error, and every answer matches the document (status, content type, headers, body schema).

Half the generated ids are swapped for the customer's real ones, so generation reaches past the
404s into the use cases. Bounded: EXAMPLES per operation and generation mode."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests import pgtemplate
from tests.identity.conftest import IdentityServer
from tests.wallet_api.conftest import TL, Customer, WalletApi, running_api

EXAMPLES = 30


@pytest.fixture(scope="module")
async def contract_api(
    wallet_template: str, customer_idp: IdentityServer, staff_idp: IdentityServer
) -> AsyncIterator[tuple[WalletApi, Customer, Customer]]:
    database = await pgtemplate.clone(wallet_template)
    try:
        async with running_api(database, customer_idp, staff_idp) as api:
            alice = await api.customer(funds=1_000_000 * TL)
            bob = await api.customer()
            yield api, alice, bob
            report = await api.ledger.store.verify()
            assert report.ok, report.problems
    finally:
        await pgtemplate.drop_database(database)


def _steer(case: Any, alice: Customer, bob: Customer) -> None:
    """Point half of the cases at real resources of the caller; the other half stay random."""
    if uuid.uuid4().int % 2:
        return
    real = {"wallet_id": alice.wallet_id, "account_id": alice.account_id}
    for name in list(case.path_parameters or {}):
        if name in real:
            case.path_parameters[name] = real[name]
    if isinstance(case.body, dict):
        if "from_wallet" in case.body:
            case.body["from_wallet"] = alice.wallet_id
        if "to_wallet_number" in case.body:
            case.body["to_wallet_number"] = bob.number


def _checker(operation: Any, mode: GenerationMode, api: WalletApi, alice: Customer, bob: Customer) -> Any:
    positive = mode is GenerationMode.POSITIVE

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: Any) -> None:
        headers = {}
        if positive:  # a negative case keeps what it was built to break
            _steer(case, alice, bob)
            if "Idempotency-Key" not in (case.headers or {}):
                headers["Idempotency-Key"] = str(uuid.uuid4())
        # positive_data_acceptance is left out: a well-formed request may be refused for a reason
        # of the domain (funds, limits, tier, an unsupported currency), and that refusal is a 422
        # problem by design (SYSTEM.md). Every other built-in check runs, negative data included.
        case.call_and_validate(
            base_url=api.base_url, headers=headers, excluded_checks=[positive_data_acceptance]
        )

    return check


def test_the_api_matches_its_document(contract_api: tuple[WalletApi, Customer, Customer]) -> None:
    api, alice, bob = contract_api
    schema = schemathesis.openapi.from_url(f"{api.base_url}/openapi.json")

    @schema.auth()
    class _Bearer:
        """The real token, set by Schemathesis' auth hook (so it generates no Authorization of
        its own, and negative cases stay negative in what they were built to break)."""

        def get(self, case: Any, context: Any) -> str:
            return alice.token

        def set(self, case: Any, data: str, context: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    failures: dict[str, str] = {}
    ran = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            check = _checker(operation, mode, api, alice, bob)
            try:
                check()
            except Exception as exc:
                failures[f"{operation.label} ({mode.value})"] = str(exc)[:3000]
            ran += 1
    assert ran == 24
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())


def test_the_document_lists_every_endpoint_and_the_security_scheme(
    contract_api: tuple[WalletApi, Customer, Customer],
) -> None:
    api = contract_api[0]
    document = httpx.get(f"{api.base_url}/openapi.json").json()
    operations = {(path, method) for path, item in document["paths"].items() for method in item}
    assert operations == {
        ("/v1/accounts/personal", "post"),
        ("/v1/accounts/{account_id}/tier", "put"),
        ("/v1/accounts", "get"),
        ("/v1/accounts/{account_id}", "get"),
        ("/v1/accounts/{account_id}/wallets", "post"),
        ("/v1/wallets/{wallet_id}", "get"),
        ("/v1/wallets/{wallet_id}/statement", "get"),
        ("/v1/wallets/{wallet_id}/promos", "get"),
        ("/v1/transfers", "post"),
        ("/v1/transfers/{transfer_id}", "get"),
        ("/v1/transfers/{transfer_id}/refund", "post"),
        ("/v1/promos", "post"),
    }
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    money = ("/v1/transfers", "/v1/promos", "/v1/transfers/{transfer_id}/refund")
    for path, item in document["paths"].items():
        for method, op in item.items():
            assert op["security"] == [{"HTTPBearer": []}], (path, method)
            for status in ("401", "403", "404", "422"):
                assert op["responses"][status]["content"]["application/problem+json"], (path, method, status)
            if method == "post" and path in money:
                assert any(p["name"] == "Idempotency-Key" and p["required"] for p in op["parameters"])
    assert "Problem" in document["components"]["schemas"]
