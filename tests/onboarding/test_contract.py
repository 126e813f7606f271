"""onboarding's served OpenAPI document is exact (tests/contract.py: Schemathesis, every check,
positive, negative and coverage cases), with a real customer's token on every case.

Half the positive cases of the registration steps are pointed at a registration started for the
run, so generation reaches the steps' own answers, not only "no such registration"."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests import contract
from tests.onboarding.conftest import Onboarding, assert_problem, new_email

# The sweep and the per-address limit are off the path here: every case is its own request.
pytestmark = pytest.mark.parametrize(
    "onboarding_settings", [{"rate_per_ip": 100_000, "rate_per_address": 100_000}], indirect=True
)


@pytest.fixture
async def ready(onb: Onboarding) -> AsyncIterator[tuple[Onboarding, str, str]]:
    """The service, a customer's token, and a registration waiting for its code."""
    _email, auth = await onb.customer()
    registration_id = await onb.register(new_email())
    yield onb, auth["Authorization"].removeprefix("Bearer "), registration_id


def test_the_service_matches_its_document(ready: tuple[Onboarding, str, str]) -> None:
    onb, token, registration_id = ready

    def steer(case: Any) -> None:
        if contract.digest(case)[0] % 2:
            return
        if "registration_id" in (case.path_parameters or {}):
            case.path_parameters["registration_id"] = registration_id

    seen = contract.check_document(onb.url, token=lambda: token, steer=steer)
    # The run reached the use cases, not only the refusals.
    for reached in (
        "POST /v1/registrations 202",
        "POST /v1/registrations/{registration_id}/resend 202",
        "GET /v1/me 200",
        "POST /v1/me/phone 202",
    ):
        assert seen[reached], (reached, seen)


@pytest.mark.parametrize(
    "email",
    [
        "\ud800@example.com",  # lone surrogates: no text, in UTF-8 or PostgreSQL
        "a@ex\udfffample.com",
        "ab\ud800cd@example.com",
        "a\u001d@example.com",  # a control character (a line break to the mail's To: header)
        "a@example.com\u0085",
        "a@ex\u2028ample.com",
    ],
)
async def test_an_address_that_is_no_address_is_refused_with_nothing_written(
    onb: Onboarding, email: str
) -> None:
    r = await onb.http.post(
        "/v1/registrations",
        content=json.dumps({"email": email}),
        headers={"content-type": "application/json"},
    )
    assert_problem(r, "validation-error", 422)
    assert await onb.sql("SELECT 1 FROM onboarding.registrations") == []


async def test_a_body_that_is_not_utf8_is_a_documented_400(onb: Onboarding) -> None:
    r = await onb.http.post(
        "/v1/registrations",
        content=b'{"email": "\xff@example.com"}',
        headers={"content-type": "application/json"},
    )
    assert_problem(r, "malformed-body", 400)
    assert r.headers["content-type"] == "application/problem+json"
    document = (await onb.http.get("/openapi.json")).json()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if "requestBody" in operation:
                assert operation["responses"]["400"]["content"]["application/problem+json"] is not None, (
                    path,
                    method,
                )
    assert await onb.sql("SELECT 1 FROM onboarding.registrations") == []
