"""core.http: problem+json in one place, health, readiness, metrics, body limit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import BaseModel

from hiwallet.core.http import ProblemError, create_app


class InsufficientFunds(ProblemError):
    status = 422
    slug = "insufficient-funds"
    title = "Insufficient funds"


class Transfer(BaseModel):
    amount_minor: int
    currency: str


healthy = True


async def database() -> None:
    if not healthy:
        raise ConnectionError("postgres at 10.0.0.5 refused: password=hunter2")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    global healthy
    healthy = True
    app = create_app("http-test", ready_checks={"database": database}, max_body_bytes=1_000)

    @app.post("/transfers")
    async def transfer(body: Transfer) -> dict[str, int]:
        raise InsufficientFunds(
            "the wallet holds less than the amount", balance=500, amount=body.amount_minor
        )

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("SELECT secret FROM internals")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


async def test_problem_error_carries_its_fields(client: httpx.AsyncClient) -> None:
    response = await client.post("/transfers", json={"amount_minor": 900, "currency": "TRY"})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "https://hiwallet.dev/problems/insufficient-funds",
        "title": "Insufficient funds",
        "status": 422,
        "detail": "the wallet holds less than the amount",
        "instance": "/transfers",
        "balance": 500,
        "amount": 900,
    }


async def test_validation_errors_name_the_fields(client: httpx.AsyncClient) -> None:
    response = await client.post("/transfers", json={"amount_minor": "lots"})
    assert response.status_code == 422
    body = response.json()
    assert body["type"] == "https://hiwallet.dev/problems/validation-error"
    assert {tuple(e["loc"]) for e in body["errors"]} == {("body", "amount_minor"), ("body", "currency")}


async def test_unhandled_errors_hide_internals(client: httpx.AsyncClient) -> None:
    response = await client.get("/boom")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "https://hiwallet.dev/problems/internal-error"
    assert "SELECT" not in response.text and "RuntimeError" not in response.text


async def test_unknown_route_is_problem_json(client: httpx.AsyncClient) -> None:
    response = await client.get("/nowhere")
    assert response.status_code == 404
    assert response.json()["type"] == "https://hiwallet.dev/problems/not-found"


async def test_health_ready_and_metrics(client: httpx.AsyncClient) -> None:
    global healthy
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert (await client.get("/ready")).status_code == 200
    healthy = False
    not_ready = await client.get("/ready")
    assert not_ready.status_code == 503
    assert not_ready.json()["checks"] == {"database": "unavailable"}
    assert "hunter2" not in not_ready.text
    metrics = (await client.get("/metrics")).text
    assert 'http_requests_total{method="GET",route="/ready",service="http-test",status="503"} 1.0' in metrics
    assert "http_request_duration_seconds_bucket" in metrics


async def test_body_size_limit(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/transfers", content=b"x" * 5_000, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["type"] == "https://hiwallet.dev/problems/payload-too-large"
