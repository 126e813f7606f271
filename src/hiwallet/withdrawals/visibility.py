"""Who may see a wallet's withdrawals: the orchestrator knows no members, so it asks wallet-api
(``GET /v1/wallets/{wallet}`` with the caller's own bearer token), which answers 200 to a
member and 404 to anyone else. The requester of a saga sees it without asking
(docs/withdrawals.md, "Who sees a withdrawal")."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import structlog

from hiwallet.core.auth import TokenRejected
from hiwallet.withdrawals import errors

log = structlog.get_logger(__name__)


class WalletDirectory:
    """wallet-api, asked one question. Bounded: a timeout per call and a cap on connections."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        max_connections: int,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(2.0, timeout_s)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()

    async def is_member(self, wallet: str, token: str) -> bool:
        """Whether the token's holder is a member of ``wallet``'s account (wallet-api says).
        wallet-api unreachable or failing: :class:`errors.WalletApiUnavailable` (503), never a
        guess either way."""
        try:
            response = await self.client.get(
                f"/v1/wallets/{quote(wallet, safe=':')}", headers={"Authorization": f"Bearer {token}"}
            )
        except httpx.HTTPError as exc:
            log.warning("wallet-api not reachable", error=type(exc).__name__)
            raise errors.WalletApiUnavailable(
                "who may see this wallet cannot be told now; retry", headers={"Retry-After": "5"}
            ) from exc
        status = response.status_code
        if status == 200:
            return True
        if status in (403, 404):
            return False
        if status == 401:
            # We verified the token a moment ago; wallet-api's verdict stands (it expired since).
            raise TokenRejected("the access token was refused by the wallet service")
        log.warning("wallet-api answered unexpectedly", status=status)
        raise errors.WalletApiUnavailable(
            "who may see this wallet cannot be told now; retry", headers={"Retry-After": "5"}
        )
