"""Every front process answers /health, /ready and /metrics as any service, with no database
and no broker; /ready is the process itself: ready with every upstream and Redis away (a request
is then 503 with Retry-After, or limited locally)."""

from __future__ import annotations

import httpx
import pytest

from hiwallet.business_web_bff.app import create_business_web_bff_app
from tests.edge.conftest import People, bearer, edge_settings, nowhere, running_front, upstreams
from tests.servers import free_port, serve, stop


async def test_business_web_bff_answers_its_health_endpoints() -> None:
    app = create_business_web_bff_app()
    url, server, thread = serve(app, "business-web-bff")
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
            ready = await http.get("/ready")
            assert ready.status_code == 200, ready.text
            assert "database" not in ready.json()["checks"] and "broker" not in ready.json()["checks"]
            assert (await http.get("/metrics")).status_code == 200
    finally:
        stop(server, thread)


@pytest.mark.parametrize("kind", ["personal", "business"])
async def test_a_front_api_is_ready_with_everything_behind_it_away(people: People, kind: str) -> None:
    redis_away = f"redis://127.0.0.1:{free_port()}/0"
    settings = edge_settings(people.idp, redis_away, **upstreams(kind, nowhere()))
    token = people.customer_token() if kind == "personal" else people.merchant_token()
    async with running_front(kind, **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        ready = await http.get("/ready")
        assert ready.status_code == 200, ready.text
        assert "database" not in ready.json()["checks"]
        assert not hasattr(front.app.state, "pool")
        answer = await http.get("/v1/wallets/w1", headers=bearer(token))
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert answer.headers["ratelimit"].startswith('"subject";r=')  # decided locally
        assert await front.metric("edge_rate_limit_local_total") >= 1
        assert (await http.get("/metrics")).status_code == 200
