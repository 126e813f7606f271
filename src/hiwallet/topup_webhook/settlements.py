"""The settlement importer: what each payout of a provider paid out, announced once.

topup-webhook owns the card provider's connection (its key, its listings), so it reads the
payouts: each round lists Stripe's paid payouts of the last window (``GET /v1/payouts``), and for
each one not recorded yet its balance transactions (``GET /v1/balance_transactions?payout=…``,
each charge expanded to name its PaymentIntent), and records the payout with one
``SettlementReported`` (contracts/settlements.py) through ``topup.record_settlement``: the
payout's row and its outbox row in one statement, or nothing when it was recorded before. The
relay publishes it; wallet-consumer posts it. So a payout is announced once whichever instance,
round or operator command read it, and twice-read is harmless.

The importer does not judge the lines: it names the payment each charge was for (the top-up's
id as topup-webhook derives it) and passes gross, fee and net as Stripe reported them.
wallet-consumer, which holds the ledger, decides what matches a top-up and what is a finding.
The payout's own balance transaction (type ``payout``: the money leaving Stripe) is not a line.

One round is a ``PeriodicJob`` under its advisory lock (one instance at a time); a provider that
does not answer is logged and left for the next round. Listings are read in pages, at most
``settlement_max_pages`` per listing and round.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
import structlog
from pydantic import ValidationError

from hiwallet.contracts.settlements import MAX_LINES, SettlementLine, settlement_reported
from hiwallet.core.ids import derived_id
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.store import TopupStore

__all__ = ["SettlementImporter", "SettlementListingFailed", "StripePayouts"]

log = structlog.get_logger(__name__)

PAGE_SIZE = 100
PROVIDER = "stripe"


class SettlementListingFailed(Exception):
    """A payout listing did not answer, or answered something that is not a listing."""


async def _listing(client: httpx.AsyncClient, path: str, params: Mapping[str, Any]) -> dict[str, Any]:
    try:
        response = await client.get(path, params=params)
    except httpx.HTTPError as exc:
        raise SettlementListingFailed(f"{path}: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise SettlementListingFailed(f"{path}: status {response.status_code}")
    try:
        body = response.json()
    except ValueError as exc:
        raise SettlementListingFailed(f"{path}: not JSON") from exc
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise SettlementListingFailed(f"{path}: not a listing")
    return body


class StripePayouts:
    """Stripe's payouts and their balance transactions, paged as Stripe pages (newest first,
    ``starting_after`` the last id)."""

    provider = PROVIDER

    def __init__(self, client: httpx.AsyncClient, max_pages: int) -> None:
        self.client = client
        self.max_pages = max_pages

    async def _pages(self, path: str, params: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        for _ in range(self.max_pages):
            body = await _listing(self.client, path, params)
            items = [i for i in body["data"] if isinstance(i, dict) and isinstance(i.get("id"), str)]
            yield items
            if not body.get("has_more") or not items:
                return
            params["starting_after"] = items[-1]["id"]
        raise SettlementListingFailed(f"{path}: longer than {self.max_pages} pages")

    async def paid_since(self, since_unix: int) -> AsyncIterator[list[dict[str, Any]]]:
        params: dict[str, Any] = {"status": "paid", "created[gte]": since_unix, "limit": PAGE_SIZE}
        async for page in self._pages("/v1/payouts", params):
            yield page

    async def lines(self, payout_id: str) -> list[dict[str, Any]]:
        """Every balance transaction of the payout, each charge's source expanded. A payout
        longer than the pages read is refused whole (no partial payout is announced)."""
        params: dict[str, Any] = {"payout": payout_id, "limit": PAGE_SIZE, "expand[]": "data.source"}
        found: list[dict[str, Any]] = []
        async for page in self._pages("/v1/balance_transactions", params):
            found.extend(page)
        return found


def _line(txn: Mapping[str, Any]) -> SettlementLine:
    source = txn.get("source")
    intent = source.get("payment_intent") if isinstance(source, dict) else None
    pid = intent if isinstance(intent, str) and intent else None
    return SettlementLine.model_validate(
        {
            "line_id": txn["id"],
            "type": str(txn.get("type")),
            "provider_payment_id": pid,
            "payment_id": derived_id("topup", PROVIDER, pid) if pid else None,
            "gross_minor": txn.get("amount"),
            "fee_minor": txn.get("fee"),
            "net_minor": txn.get("net"),
        }
    )


class SettlementImporter:
    def __init__(
        self,
        store: TopupStore,
        payouts: StripePayouts,
        *,
        window_s: int,
        model: Literal["gross", "net"],
        exchange: str,
        metrics: TopupMetrics,
        clock: Any = time.time,
    ) -> None:
        self.store = store
        self.payouts = payouts
        self.window_s = window_s
        self.model = model
        self.exchange = exchange
        self.metrics = metrics
        self._clock = clock

    async def run(self) -> int:
        """One round: how many payouts it announced."""
        since = int(self._clock()) - self.window_s
        announced = 0
        try:
            async for page in self.payouts.paid_since(since):
                known = await self.store.recorded_settlements(PROVIDER, [p["id"] for p in page])
                for payout in page:
                    if payout["id"] not in known and await self._announce(payout):
                        announced += 1
        except SettlementListingFailed as exc:
            log.warning("settlement import skipped the provider", provider=PROVIDER, error=str(exc))
        if announced:
            log.info("payouts announced", provider=PROVIDER, announced=announced)
        return announced

    async def _announce(self, payout: Mapping[str, Any]) -> bool:
        payout_id = payout["id"]
        txns = await self.payouts.lines(payout_id)
        try:
            lines = [_line(t) for t in txns if t.get("type") != "payout"]
            if len(lines) > MAX_LINES:
                raise ValueError(f"{len(lines)} lines, more than {MAX_LINES}")
            message = settlement_reported(
                provider=PROVIDER,
                payout_id=payout_id,
                currency=str(payout.get("currency", "")).upper(),
                model=self.model,
                amount_minor=int(payout["amount"]),
                paid_at=datetime.fromtimestamp(int(payout.get("arrival_date") or payout["created"]), tz=UTC),
                lines=lines,
                exchange=self.exchange,
            )
        except (ValidationError, ValueError, TypeError, KeyError) as exc:
            # Not what Stripe sends: nothing is announced; a person must look (logged each round).
            log.error("payout unreadable; not announced", provider=PROVIDER, payout=payout_id, error=str(exc))
            self.metrics.settlements.labels(PROVIDER, "unreadable").inc()
            return False
        recorded = await self.store.record_settlement(
            message,
            provider=PROVIDER,
            payout_id=payout_id,
            currency=str(payout["currency"]).upper(),
            amount_minor=int(payout["amount"]),
            lines=len(lines),
        )
        self.metrics.settlements.labels(PROVIDER, "announced" if recorded else "known").inc()
        return recorded
