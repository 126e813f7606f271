"""Rate limits shared by two instances of a front API through one Redis, and what happens when
Redis goes away (a local limit takes over, logged once and counted) and comes back (shared
again). Windows of a day, so that no window ends during a test."""

from __future__ import annotations

import httpx

from tests.edge.conftest import People, RedisServer, Stub, bearer, edge_settings, running_front, upstreams

DAY_S = 86_400
PROBLEM = "https://hiwallet.dev/problems/"


def _limits(**quota: int) -> dict[str, int]:
    return {"rate_limit_window_s": DAY_S, **{f"rate_limit_{k}": v for k, v in quota.items()}}


async def test_two_instances_share_a_customers_limit(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(
        people.idp, redis_server.url, **upstreams("personal", stub.url), **_limits(subject=4)
    )
    alice, bob = bearer(people.customer_token()), bearer(people.customer_token())
    async with (
        running_front("personal", **settings) as a,
        running_front("personal", **settings) as b,
        httpx.AsyncClient(base_url=a.url) as on_a,
        httpx.AsyncClient(base_url=b.url) as on_b,
    ):
        answers = [await (on_a if i % 2 else on_b).get("/v1/wallets/w1", headers=alice) for i in range(4)]
        assert [r.status_code for r in answers] == [200] * 4
        assert answers[0].headers["ratelimit-policy"] == f'"subject";q=4;w={DAY_S}'
        assert [r.headers["ratelimit"].split(";")[1] for r in answers] == ["r=3", "r=2", "r=1", "r=0"]
        for http in (on_a, on_b):
            refused = await http.get("/v1/wallets/w1", headers=alice)
            assert refused.status_code == 429, refused.text
            assert refused.json()["type"] == PROBLEM + "rate-limited"
            assert 0 < int(refused.headers["retry-after"]) <= DAY_S
            assert refused.headers["ratelimit"].startswith('"subject";r=0;t=')
        # another customer is not limited by alice's requests
        assert (await on_b.get("/v1/wallets/w1", headers=bob)).status_code == 200
    assert len(stub.seen) == 5  # the refused ones were not forwarded


async def test_anonymous_endpoints_are_limited_per_client_address(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(
        people.idp, redis_server.url, **upstreams("personal", stub.url), **_limits(address=2)
    )
    async with (
        running_front("personal", **settings) as a,
        running_front("personal", **settings) as b,
        httpx.AsyncClient(base_url=a.url) as on_a,
        httpx.AsyncClient(base_url=b.url) as on_b,
    ):
        body = {"email": "x@example.com"}
        first = await on_a.post("/v1/registrations", json=body)
        assert first.status_code == 200
        assert first.headers["ratelimit-policy"] == f'"address";q=2;w={DAY_S}'
        assert (await on_b.post("/v1/registrations", json=body)).status_code == 200
        refused = await on_a.post("/v1/registrations", json=body, headers={"X-Forwarded-For": "10.9.8.7"})
        assert refused.status_code == 429  # a claimed address changes nothing
        assert (await on_b.post("/v1/registrations/x/resend")).status_code == 429


async def test_redis_away_a_local_limit_takes_over_and_redis_back_shares_again(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    settings = edge_settings(
        people.idp, redis_server.url, **upstreams("personal", stub.url), **_limits(subject=3)
    )
    token = people.customer_token()
    async with running_front("personal", **settings) as front, httpx.AsyncClient(base_url=front.url) as http:
        assert (await http.get("/v1/wallets/w1", headers=bearer(token))).status_code == 200
        shared_before = sum(redis_server.keys().values())
        assert shared_before >= 1
        redis_server.stop()
        try:
            # Redis away: the API still answers, limited in this process (its own count, from 0)
            local = [await http.get("/v1/wallets/w1", headers=bearer(token)) for _ in range(4)]
            assert [r.status_code for r in local] == [200, 200, 200, 429]
            assert await front.metric("edge_rate_limit_local_total") >= 4
            assert await front.metric("edge_rate_limit_store_outages_total") == 1
        finally:
            redis_server.start()
        # Redis back (a fresh one, empty): decisions are shared again once it is asked again
        other = bearer(people.customer_token())

        async def shared() -> bool:
            await http.get("/v1/wallets/w1", headers=other)
            return sum(redis_server.keys().values()) >= 1

        from tests.waiting import until

        await until(shared, 10.0, "limits shared through Redis again")
        local_after = await front.metric("edge_rate_limit_local_total")
        assert (await http.get("/v1/wallets/w1", headers=other)).status_code == 200
        assert await front.metric("edge_rate_limit_local_total") == local_after


async def test_leases_ask_redis_less_and_never_allow_past_the_quota_across_instances(
    stub: Stub, people: People, redis_server: RedisServer
) -> None:
    """Each instance reserves a few requests ahead (core.edge.limits' leases): far fewer round
    trips than requests, and still never more than the quota allowed in a window over both
    instances, the last requests asking Redis one by one (a lease shrinks as the window fills)."""
    import redis

    quota = 2000
    settings = edge_settings(
        people.idp,
        redis_server.url,
        **upstreams("personal", stub.url),
        **_limits(subject=quota),
    )
    alice = bearer(people.customer_token())
    counter = redis.Redis.from_url(redis_server.url)
    try:
        async with (
            running_front("personal", **settings) as a,
            running_front("personal", **settings) as b,
            httpx.AsyncClient(base_url=a.url) as on_a,
            httpx.AsyncClient(base_url=b.url) as on_b,
        ):
            counter.config_resetstat()
            statuses = [
                (await (on_a if i % 2 else on_b).get("/v1/wallets/w1", headers=alice)).status_code
                for i in range(quota + 40)
            ]
            calls = sum(
                int(stats["calls"])
                for name, stats in counter.info("commandstats").items()
                if name in ("cmdstat_evalsha", "cmdstat_eval")
            )
    finally:
        counter.close()
    allowed = statuses.count(200)
    assert statuses == [200] * allowed + [429] * (quota + 40 - allowed)  # refused only at the end
    assert quota - 4 <= allowed <= quota  # never past it; early by at most the leases held (2 of 1)
    assert calls < (quota + 40) // 4, calls  # the round trips: far fewer than the requests
    assert sum(redis_server.keys().values()) >= allowed  # every allowed request counted in Redis
