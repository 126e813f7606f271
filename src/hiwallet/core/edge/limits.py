"""Rate limits shared by every instance of a front API, in Redis, with a local stand-in.

The algorithm: a fixed window per key, counted in Redis by one Lua script (INCRBY, and PEXPIRE when
it made the key) in one round trip. Why this and not a sliding log or GCRA: one
atomic call and one small key per client and window whatever the rate, and what it counts is
exactly what the IETF RateLimit headers say (``r`` requests left in this window, ``t`` seconds
until it resets). The price, a burst of up to twice the limit across a window's edge, is
acceptable for an abuse guard (the internal services keep the money rules).

Leases: a process does not ask Redis on every request. It reserves a few of a window's requests
ahead (INCRBY n: they count in Redis at once, for every instance) and spends them locally, then
reserves again. A lease is at most ``LEASE_MAX`` and at most a ``LEASE_SHARE``-th of what the
window had left when it was reserved, and 1 while nothing is known of the window (its first
request) or little is left, so near the limit every request asks Redis, as before. The limit
keeps its meaning: no more than the quota is allowed in a window across all instances (a
reservation past the quota is refused, atomically in Redis). What it costs: the requests another
instance reserved and has not used yet count as used, so a client spread over several instances
may see ``r`` lower by them, and at worst be refused that many requests early (never more than
a 64th of its quota, since leases shrink as the window fills). Why: the round trip to Redis was
about 60–70 µs of the front's CPU a request (bench/front_bench.py, docs/performance.md), a fifth
of what the door cost.

Redis away (refused, unreachable, slower than ``timeout_s``) must not take the API down: a
local limiter (the same windows, in this process) takes over, the outage is logged once
(and once more when Redis is back) and every locally decided request is counted
(``edge_rate_limit_local_total``). While Redis is away it is asked again at most every
``retry_s``, so requests do not each pay its timeout. With N instances each limiting locally, a
client may get up to N times its limit during the outage: the price of staying up.

Headers (draft-ietf-httpapi-ratelimit-headers, structured fields):
``RateLimit-Policy: "subject";q=600;w=60`` and ``RateLimit: "subject";r=599;t=42``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from hiwallet.core.http import TooManyRequests

__all__ = ["LocalWindows", "RateDecision", "RateLimited", "RateLimiter", "RatePolicy"]

log = structlog.get_logger(__name__)

# KEYS[1] the window's key; ARGV[1] the window in ms, ARGV[2] the requests reserved. The count
# after them (the key made by this call, i.e. the count is what it reserved: the expiry set).
_COUNT = """
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if n == tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
"""
# A lease (the requests reserved ahead in one round trip): at most this many, and at most this
# share of what the window had left (so that near the limit a lease is 1: exact).
LEASE_MAX = 32
LEASE_SHARE = 64
# Connections to Redis per process: a check holds one for one round trip.
REDIS_MAX_CONNECTIONS = 32
# The local windows kept at most; past it the expired ones are dropped (and, if still too many,
# all: a flood of distinct keys must not grow the process).
LOCAL_MAX_KEYS = 100_000


@dataclass(frozen=True)
class RatePolicy:
    name: str  # a structured-field token: the policy in the headers and in the Redis key
    quota: int  # requests per window
    window_s: int

    @functools.cached_property
    def policy_header(self) -> str:
        return f'"{self.name}";q={self.quota};w={self.window_s}'

    @functools.cached_property
    def policy_line(self) -> tuple[bytes, bytes]:
        """``RateLimit-Policy`` as a header line (lower-case name), made once."""
        return (b"ratelimit-policy", self.policy_header.encode("latin-1"))


@dataclass(frozen=True)
class RateDecision:
    policy: RatePolicy
    remaining: int
    reset_s: int
    allowed: bool

    @property
    def headers(self) -> dict[str, str]:
        return {
            "RateLimit-Policy": self.policy.policy_header,
            "RateLimit": f'"{self.policy.name}";r={self.remaining};t={self.reset_s}',
        }

    @property
    def raw_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """:attr:`headers` as header lines (names in lower case, values encoded)."""
        policy = self.policy
        state = f'"{policy.name}";r={self.remaining};t={self.reset_s}'.encode("latin-1")
        return (policy.policy_line, (b"ratelimit", state))


class RateLimited(TooManyRequests):
    """The front API's limit per customer or per address (the platform's one rate-limited type)."""


class LocalWindows:
    """The same fixed windows, counted in this process."""

    def __init__(self, max_keys: int = LOCAL_MAX_KEYS) -> None:
        self._counts: dict[str, int] = {}
        self._max_keys = max_keys

    def count(self, key: str, window_index: int) -> int:
        full = f"{key}:{window_index}"
        n = self._counts.get(full, 0) + 1
        self._counts[full] = n
        if len(self._counts) > self._max_keys:
            suffix = f":{window_index}"
            self._counts = {k: v for k, v in self._counts.items() if k.endswith(suffix)}
            if len(self._counts) > self._max_keys:
                self._counts = {full: n}
        return n


@dataclass
class _Lease:
    """A window's requests this process reserved in Redis: ``left`` not used yet; ``top`` the
    window's count in Redis after its latest reservation (every instance's requests and leases)."""

    left: int = 0
    top: int = 0


class RateLimiter:
    def __init__(
        self,
        redis_url: str,
        *,
        prefix: str,
        timeout_s: float,
        retry_s: float,
        counters: Any = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # redis-py's asyncio client (EVALSHA of the script, loaded once, EVAL if Redis forgot
        # it). No retries: a Redis that does not answer in timeout_s is away, and this request is
        # decided locally at once. Its pool is bounded: a stalled Redis holds few sockets.
        self.redis: Redis = Redis.from_url(
            redis_url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            max_connections=REDIS_MAX_CONNECTIONS,
        )
        self._script = self.redis.register_script(_COUNT)
        self.prefix = prefix
        self.retry_s = retry_s
        self.local = LocalWindows()
        self._leases: dict[str, _Lease] = {}  # "key:window" -> its lease; bounded as the local ones
        self._clock = clock
        self._monotonic = monotonic
        self._down_since: float | None = None  # monotonic; None while Redis answers
        self._next_try = 0.0
        # ``counters``: local_decisions and store_outages (:meth:`counters`, made once per app:
        # a registry refuses the same name twice); unregistered ones when not given.
        if counters is None:
            self.local_decisions, self.outages = self.counters(None)
        else:
            self.local_decisions, self.outages = counters.local_decisions, counters.store_outages

    @staticmethod
    def counters(registry: CollectorRegistry | None) -> tuple[Counter, Counter]:
        local = Counter(
            "edge_rate_limit_local_total",
            "Rate-limit decisions taken in this process because Redis was not reachable",
            registry=registry,
        )
        outages = Counter(
            "edge_rate_limit_store_outages_total",
            "Times the shared rate-limit store (Redis) was found unreachable",
            registry=registry,
        )
        return local, outages

    @property
    def shared(self) -> bool:
        """Whether decisions are currently shared through Redis."""
        return self._down_since is None

    async def aclose(self) -> None:
        await self.redis.aclose()

    async def check(self, policy: RatePolicy, who: str) -> RateDecision:
        now = self._clock()
        window_index = int(now // policy.window_s)
        reset_s = max(1, math.ceil((window_index + 1) * policy.window_s - now))
        key = f"{self.prefix}:{policy.name}:{who}"
        window_key = f"{key}:{window_index}"
        lease = self._leases.get(window_key)
        if lease is not None and lease.left > 0:  # reserved ahead in Redis: spent here
            lease.left -= 1
            return RateDecision(policy, max(0, policy.quota - (lease.top - lease.left)), reset_s, True)
        # 1 while nothing is known of the window (or little is left), else a share of what is
        size = 1 if lease is None else max(1, min(LEASE_MAX, (policy.quota - lease.top) // LEASE_SHARE))
        total = await self._count(key, window_index, policy.window_s, size)
        if total is None:  # decided in this process (Redis away)
            count = self.local.count(key, window_index)
            return RateDecision(policy, max(0, policy.quota - count), reset_s, count <= policy.quota)
        usable = min(size, policy.quota - (total - size))  # the reserved ones within the quota
        if usable <= 0:
            return RateDecision(policy, 0, reset_s, False)
        lease = self._lease(window_key, window_index)  # again: others may have reserved meanwhile
        lease.left += usable - 1  # one is this request's
        lease.top = max(lease.top, total)
        return RateDecision(policy, max(0, policy.quota - (lease.top - lease.left)), reset_s, True)

    def _lease(self, window_key: str, window_index: int) -> _Lease:
        lease = self._leases.get(window_key)
        if lease is None:
            if len(self._leases) >= LOCAL_MAX_KEYS:  # past windows' first, then all
                suffix = f":{window_index}"
                self._leases = {k: v for k, v in self._leases.items() if k.endswith(suffix)}
                if len(self._leases) >= LOCAL_MAX_KEYS:
                    self._leases = {}
            lease = self._leases[window_key] = _Lease()
        return lease

    def enforce(self, decision: RateDecision) -> None:
        if not decision.allowed:
            raise RateLimited(
                f"at most {decision.policy.quota} requests per {decision.policy.window_s} s; "
                f"retry in {decision.reset_s} s",
                headers={**decision.headers, "Retry-After": str(decision.reset_s)},
            )

    async def _count(self, key: str, window_index: int, window_s: int, size: int) -> int | None:
        """The window's count in Redis after reserving ``size`` requests; None when Redis is away
        (counted: the caller decides locally)."""
        if self._down_since is None or self._monotonic() >= self._next_try:
            try:
                n = await self._script(keys=[f"{key}:{window_index}"], args=[window_s * 2000, size])
            except (RedisError, OSError, TimeoutError) as exc:
                self._went_away(exc)
            else:
                if self._down_since is not None:
                    log.info(
                        "rate-limit store back; limits shared again",
                        away_s=round(self._monotonic() - self._down_since, 3),
                    )
                    self._down_since = None
                return int(n)
        self.local_decisions.inc()
        return None

    def _went_away(self, exc: Exception) -> None:
        self._next_try = self._monotonic() + self.retry_s
        if self._down_since is None:
            self._down_since = self._monotonic()
            self.outages.inc()
            # Once per outage (not per request): the error's class, never the URL's password.
            log.warning(
                "rate-limit store unreachable; limiting in this process until it answers",
                error=type(exc).__name__,
                retry_s=self.retry_s,
            )
