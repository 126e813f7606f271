"""What every front API configures the same way: where its upstreams are, how long it waits for
them, the token it accepts and its rate limits. A front API's own settings subclass
:class:`EdgeSettings` with its prefix (``HIWALLET_PERSONAL_MOBILE_API_``…) and its upstreams'
addresses."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["EdgeSettings"]


class EdgeSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    port: int = 0
    # The token: issued by the customer realm, for this front API (its own name in the audience)
    # and for the internal services (``internal_audience``), which verify it again.
    issuer_base: str = "http://127.0.0.1:8080"
    realm: str = "hiwallet"
    internal_audience: str = "hiwallet-api"

    # Upstream calls (one pooled client per upstream): a connection is made within connect_s, a
    # free pooled connection found within pool_s, the answer read within read_s. Past any of
    # them the client gets 503 with Retry-After, never a hang. read_s above the internal
    # services' own bounds (a database statement times out at 5 s): their 503 arrives first.
    upstream_connect_timeout_s: float = 1.0
    upstream_read_timeout_s: float = 8.0
    upstream_pool_timeout_s: float = 1.0
    upstream_max_connections: int = 100
    upstream_max_response_bytes: int = 1 << 20
    # What the client is told to wait when an upstream is away.
    upstream_retry_after_s: int = 1

    # Rate limits: requests per window, per token subject and per client address (anonymous
    # endpoints), shared by every instance through Redis; a local limit while Redis is away.
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")  # may carry a password
    redis_timeout_s: float = 0.05
    # While Redis is away it is asked again at most this often (each try may cost the timeout).
    redis_retry_s: float = 1.0
    rate_limit_window_s: int = 60
    rate_limit_subject: int = 600
    rate_limit_address: int = 30
    max_body_bytes: int = 65_536
    # The HTTP protocol under uvicorn's server: "lean" (core/http/protocol.py: less CPU a
    # request, bounds on heads and idle connections) or "uvicorn" (its own httptools protocol).
    http_server: Literal["lean", "uvicorn"] = "lean"
