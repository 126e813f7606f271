"""The webhook that never arrived: each round asks every provider for what it took in the last
window (Stripe's ``GET /v1/events?created[gte]=``, the bank's ``GET /v1/incoming-wires?since=``)
and feeds each payment no record names yet through the same path as a webhook
(:meth:`TopupService.ingest`, route ``reconciliation``): stored in the inbox, recorded once,
announced once. A payment recorded meanwhile by a webhook is found by the record (its derived
id), so nothing is credited twice whichever comes first.

Each listing is read in pages, at most ``reconcile_max_pages`` per provider and round; a provider
that does not answer is logged and left for the next round, the others go on.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
import structlog

from hiwallet.core.http import ProblemError
from hiwallet.topup_webhook import providers
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.providers import Notification
from hiwallet.topup_webhook.service import TopupService
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from hiwallet.topup_webhook.store import Outcome

log = structlog.get_logger(__name__)

PAGE_SIZE = 100


class ListingFailed(Exception):
    """A provider's listing did not answer, or answered something that is not a listing."""


class Listing(Protocol):
    provider: str

    def since(self, since_unix: int) -> AsyncIterator[list[Notification]]:
        """The notifications of payments since ``since_unix``, a page at a time."""
        ...


async def _page(client: httpx.AsyncClient, path: str, params: Mapping[str, str | int]) -> dict[str, Any]:
    try:
        response = await client.get(path, params=params)
    except httpx.HTTPError as exc:
        raise ListingFailed(f"{path}: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise ListingFailed(f"{path}: status {response.status_code}")
    try:
        body = response.json()
    except ValueError as exc:
        raise ListingFailed(f"{path}: not JSON") from exc
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise ListingFailed(f"{path}: not a listing")
    return body


def _read(page: list[Any], read: Any) -> list[Notification]:
    found = []
    for item in page:
        if not isinstance(item, dict):
            continue
        try:
            found.append(read(item))
        except providers.Unreadable as exc:
            log.warning("listing item unreadable", reason=str(exc))
    return found


class StripeListing:
    provider = "stripe"

    def __init__(self, client: httpx.AsyncClient, max_pages: int) -> None:
        self.client = client
        self.max_pages = max_pages

    async def since(self, since_unix: int) -> AsyncIterator[list[Notification]]:
        params: dict[str, str | int] = {"created[gte]": since_unix, "limit": PAGE_SIZE}
        for _ in range(self.max_pages):
            body = await _page(self.client, "/v1/events", params)
            events = body["data"]
            yield _read(events, providers.from_stripe_listing)
            last = events[-1].get("id") if events and isinstance(events[-1], dict) else None
            if not body.get("has_more") or not isinstance(last, str):
                return
            params["starting_after"] = last
        log.warning("listing longer than the pages read this round", provider=self.provider)


class BankListing:
    provider = "bank"

    def __init__(self, client: httpx.AsyncClient, max_pages: int) -> None:
        self.client = client
        self.max_pages = max_pages

    async def since(self, since_unix: int) -> AsyncIterator[list[Notification]]:
        since = datetime.fromtimestamp(since_unix, tz=UTC).isoformat()
        params: dict[str, str | int] = {"since": since, "limit": PAGE_SIZE}
        for _ in range(self.max_pages):
            body = await _page(self.client, "/v1/incoming-wires", params)
            yield _read(body["data"], providers.from_bank_listing)
            cursor = body.get("next_cursor")
            if not isinstance(cursor, str) or not cursor:
                return
            params["cursor"] = cursor
        log.warning("listing longer than the pages read this round", provider=self.provider)


def provider_clients(settings: TopupWebhookSettings) -> dict[str, httpx.AsyncClient]:
    """One client per provider API, with its key and a timeout on everything."""
    timeout = httpx.Timeout(settings.provider_timeout_s)
    return {
        "stripe": httpx.AsyncClient(
            base_url=settings.stripe_url,
            headers={"authorization": f"Bearer {settings.stripe_api_key.get_secret_value()}"},
            timeout=timeout,
        ),
        "bank": httpx.AsyncClient(
            base_url=settings.bank_url,
            headers={"authorization": f"Bearer {settings.bank_api_key.get_secret_value()}"},
            timeout=timeout,
        ),
    }


def listings_for(clients: Mapping[str, httpx.AsyncClient], max_pages: int) -> list[Listing]:
    return [StripeListing(clients["stripe"], max_pages), BankListing(clients["bank"], max_pages)]


class Reconciler:
    def __init__(
        self,
        service: TopupService,
        listings: list[Listing],
        window_s: int,
        metrics: TopupMetrics,
        clock: Any = time.time,
    ) -> None:
        self.service = service
        self.listings = listings
        self.window_s = window_s
        self.metrics = metrics
        self._clock = clock

    async def run(self) -> int:
        """One round: how many payments it recorded that no webhook had reported."""
        since = int(self._clock()) - self.window_s
        found = 0
        for listing in self.listings:
            try:
                found += await self._provider(listing, since)
            except (ListingFailed, ProblemError) as exc:
                log.warning("reconciliation skipped a provider", provider=listing.provider, error=str(exc))
        return found

    async def _provider(self, listing: Listing, since: int) -> int:
        found = 0
        async for page in listing.since(since):
            payments = [n for n in page if n.payment is not None]
            if not payments:
                continue
            recorded = await self.service.store.recorded(
                listing.provider,
                [n.payment.provider_payment_id for n in payments if n.payment is not None],
            )
            for notification in payments:
                if notification.payment is None or notification.payment.provider_payment_id in recorded:
                    continue
                outcome = await self.service.ingest(notification, "reconciliation")
                if outcome is Outcome.RECORDED:
                    found += 1
                    self.metrics.reconciliation_found.labels(listing.provider).inc()
        if found:
            log.info(
                "reconciliation recorded payments no webhook reported", provider=listing.provider, found=found
            )
        return found
