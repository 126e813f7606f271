"""The internal services, called with the person's own access token (the BFF never acts with
its own rights): one httpx client with timeouts, and what their answers mean for a page.

- No answer, a timeout, or 502/503/504: :class:`ServiceAway` (a 503 page naming the service and
  what to do), never a stack trace.
- 401: the token was refused (the session ended at the provider): :class:`SignInAgain`.
- Any other 4xx: :class:`Refused` with the service's problem (a page shows its title).
- Another 5xx: fail closed, logged, :class:`ServiceAway` too (the person can only retry)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import structlog

from hiwallet.core.http import ServiceUnavailable

__all__ = ["Refused", "ServiceAway", "SignInAgain", "Upstream"]

log = structlog.get_logger(__name__)

RETRY_AFTER_S = 30
_AWAY_STATUSES = frozenset({502, 503, 504})


class ServiceAway(ServiceUnavailable):
    slug = "service-away"
    title = "A part of HiWallet is not answering"

    def __init__(self, service: str) -> None:
        super().__init__(f"{service} did not answer", headers={"Retry-After": str(RETRY_AFTER_S)})
        self.service = service


class SignInAgain(Exception):
    """The service refused the session's token: the person signs in again."""


class Refused(Exception):
    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('type')}")
        self.status = status
        self.problem = problem

    @property
    def slug(self) -> str:
        return str(self.problem.get("type", "")).rsplit("/", 1)[-1]

    @property
    def title(self) -> str:
        return str(self.problem.get("title", ""))


@dataclass
class Upstream:
    """One internal service (``name`` is what the 503 page calls it)."""

    name: str
    base_url: str
    http: httpx.AsyncClient

    async def call(
        self,
        method: str,
        path: str,
        token: str | None,
        *,
        json: Any = None,
        data: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        # No token: a call made before anyone signed in (a registration).
        sent = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
        try:
            answer = await self.http.request(
                method, self.base_url.rstrip("/") + path, json=json, data=data, params=params, headers=sent
            )
        except httpx.HTTPError as exc:
            log.warning("upstream away", upstream=self.name, error=type(exc).__name__)
            raise ServiceAway(self.name) from None
        if answer.status_code in _AWAY_STATUSES:
            log.warning("upstream away", upstream=self.name, status=answer.status_code)
            raise ServiceAway(self.name)
        if answer.status_code == 401:
            raise SignInAgain()
        if answer.status_code >= 500:
            log.error("upstream failed", upstream=self.name, status=answer.status_code)
            raise ServiceAway(self.name)
        if answer.status_code >= 400:
            try:
                problem = answer.json()
            except ValueError:
                problem = {}
            raise Refused(answer.status_code, problem if isinstance(problem, dict) else {})
        if answer.status_code == 204 or not answer.content:
            return None
        try:
            return answer.json()
        except ValueError:
            log.error("upstream answered no JSON", upstream=self.name, status=answer.status_code)
            raise ServiceAway(self.name) from None
