"""The edge shared by every front API (platform code: it knows no business word).

- :mod:`.tokens`: a front API accepts only a token issued for it (401/403);
- :mod:`.limits`: rate limits shared in Redis, a local limit while Redis is away;
- :mod:`.forward`: one pooled client per upstream, forwarding what may pass, 503 for an
  upstream that is away;
- :mod:`.door`: the three together, and :func:`front_spec`, a front API's declaration.
"""

from hiwallet.core.edge.door import FrontDoor, Reshape, door, front_spec, query, segment
from hiwallet.core.edge.forward import (
    FORWARDED_REQUEST_HEADERS,
    RETURNED_HEADERS,
    Upstream,
    UpstreamFailed,
    UpstreamTimeouts,
    UpstreamUnavailable,
)
from hiwallet.core.edge.limits import LocalWindows, RateDecision, RateLimited, RateLimiter, RatePolicy
from hiwallet.core.edge.settings import EdgeSettings
from hiwallet.core.edge.tokens import CallerKind, FrontTokens

__all__ = [
    "FORWARDED_REQUEST_HEADERS",
    "RETURNED_HEADERS",
    "CallerKind",
    "EdgeSettings",
    "FrontDoor",
    "FrontTokens",
    "LocalWindows",
    "RateDecision",
    "RateLimited",
    "RateLimiter",
    "RatePolicy",
    "Reshape",
    "Upstream",
    "UpstreamFailed",
    "UpstreamTimeouts",
    "UpstreamUnavailable",
    "door",
    "front_spec",
    "query",
    "segment",
]
