"""The internal services, over HTTP with the employee's own access token (each service checks
the token and asks staff-admin itself): staff-admin, wallet-api, withdrawal-orchestrator.

Fail closed: no answer, a timeout or a server error -> :class:`ServiceAway` (the 503 page); a
403 -> :class:`NotAllowed` (the 403 page; the menu is asked again on the next page); a 401 ->
the person signs in again; a 404 -> :class:`NothingHere`; any other refusal -> :class:`ActionRefused`
with the service's own title. The body is never logged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import structlog

from hiwallet.backoffice_bff.errors import ActionRefused, NotAllowed, NothingHere, ServiceAway
from hiwallet.core.bff import GrantRefused

__all__ = ["MAX_ANSWER_BYTES", "STAFF_ADMIN", "WALLET", "WITHDRAWALS", "Upstreams"]

log = structlog.get_logger(__name__)

STAFF_ADMIN = "staff-admin"
WALLET = "wallet-api"
WITHDRAWALS = "withdrawal-orchestrator"
# A page's worth of JSON from an internal service; far larger is not what we asked for.
MAX_ANSWER_BYTES = 2_000_000


@dataclass
class Upstreams:
    client: httpx.AsyncClient
    urls: Mapping[str, str]
    timeout_s: float

    async def call(
        self,
        service: str,
        method: str,
        path: str,
        token: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        url = self.urls[service].rstrip("/") + path
        try:
            answer = await self.client.request(
                method,
                url,
                params=params,
                json=json,
                headers={"Authorization": f"Bearer {token}", **(headers or {})},
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            log.warning("upstream.unreachable", service=service, error=type(exc).__name__)
            raise ServiceAway(service) from None
        status = answer.status_code
        if status >= 500 or len(answer.content) > MAX_ANSWER_BYTES:
            log.warning("upstream.failed", service=service, status=status)
            raise ServiceAway(service)
        if status == 401:
            raise GrantRefused(f"{service} refused the session's token")
        if status == 403:
            refused = NotAllowed(_detail(answer) or "not allowed")
            refused.kind = _kind(answer)
            raise refused
        if status == 404:
            raise NothingHere(_detail(answer))
        if status >= 400:
            raise ActionRefused(_detail(answer), kind=_kind(answer), fields=_fields(answer), said=status)
        if status == 204 or not answer.content:
            return None
        try:
            return answer.json()
        except ValueError:
            log.warning("upstream.not_json", service=service, status=status)
            raise ServiceAway(service) from None


def _problem(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _detail(answer: httpx.Response) -> str | None:
    body = _problem(answer)
    text = body.get("detail") or body.get("title")
    return str(text)[:300] if text else None


def _kind(answer: httpx.Response) -> str | None:
    """The problem type's last segment (``…/problems/last-staff-manager`` -> its slug)."""
    kind = _problem(answer).get("type")
    return str(kind).rstrip("/").rsplit("/", 1)[-1][:100] if kind else None


# A refusal names at most this many fields (a form has a handful).
_MAX_FIELDS = 20


def _fields(answer: httpx.Response) -> tuple[str, ...]:
    """The body members a refusal names: a validation error's ``errors[].loc`` (``["body",
    "name"]`` -> ``name``) or a service's own ``field``."""
    body = _problem(answer)
    names: list[str] = []
    errors = body.get("errors")
    if isinstance(errors, list):
        for error in errors[:_MAX_FIELDS]:
            loc = error.get("loc") if isinstance(error, dict) else None
            if isinstance(loc, list) and len(loc) >= 2 and loc[0] == "body":
                names.append(str(loc[1])[:100])
    if isinstance(body.get("field"), str):
        names.append(body["field"][:100])
    return tuple(dict.fromkeys(names))
