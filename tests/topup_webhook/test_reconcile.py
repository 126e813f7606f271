"""The webhook that never arrived: the reconciliation asks the providers' listings and records,
once, each payment no webhook reported, through the same record."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from prometheus_client import CollectorRegistry

from hiwallet.core.ids import derived_id
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.reconcile import BankListing, Reconciler, StripeListing
from tests.servers import serve, stop
from tests.topup_webhook.conftest import (
    Listings,
    post_bank,
    post_stripe,
    running,
    stored,
    stripe_events,
    topup_settings,
    wallet_id,
    wire,
)


def reconciler_for(client: httpx.AsyncClient, listings: Listings) -> Reconciler:
    metrics = TopupMetrics(CollectorRegistry())
    provider = listings.client()
    return Reconciler(
        client.app.state.service,  # type: ignore[attr-defined]
        [StripeListing(provider, max_pages=10), BankListing(provider, max_pages=10)],
        window_s=86_400,
        metrics=metrics,
    )


def found_metric(reconciler: Reconciler, provider: str) -> float:
    return reconciler.metrics.reconciliation_found.labels(provider)._value.get()  # type: ignore[no-any-return]


async def test_reconciliation_records_what_no_webhook_reported_once(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    listings = Listings()
    reported_checkout, reported_intent = stripe_events(wallet=wallet_id(), amount=100)
    lost_checkout, lost_intent = stripe_events(wallet=wallet_id(), amount=200)
    late_checkout, late_intent = stripe_events(wallet=wallet_id(), amount=300)
    other = {**stripe_events()[0], "type": "customer.created", "data": {"object": {"id": "cus_1"}}}
    old_checkout, _ = stripe_events(amount=400)
    old_checkout["created"] = int(time.time()) - 3 * 86_400  # outside the window
    listings.events = [reported_checkout, reported_intent, lost_checkout, lost_intent, late_checkout, other]
    listings.events.append(old_checkout)
    reported_wire, lost_wire = wire(reference=wallet_id()), wire(reference="no wallet named")
    listings.wires = [reported_wire, lost_wire, wire(reference=None, amount_minor=1)]

    async with running(topup_settings(topup_db)) as client:
        # the webhooks that did arrive: one event of the first payment, the first wire
        assert (await post_stripe(client, reported_checkout)).status_code == 202
        assert (await post_bank(client, reported_wire)).status_code == 202
        before = await stored(owner)
        reconciler = reconciler_for(client, listings)

        # the lost card payment, the late one (no webhook yet), the two lost wires
        assert await reconciler.run() == 4
        assert (found_metric(reconciler, "stripe"), found_metric(reconciler, "bank")) == (2.0, 2.0)
        after = await stored(owner)
        new = {p["id"]: p for p in after.payments if p["id"] not in {q["id"] for q in before.payments}}
        lost = new[derived_id("topup", "stripe", lost_intent["data"]["object"]["id"])]  # type: ignore[index]
        assert sorted(lost["reported_by"]) == sorted([lost_checkout["id"], lost_intent["id"]])
        assert lost["routes"] == ["reconciliation"]
        lost_bank = new[derived_id("topup", "bank", lost_wire["id"])]
        assert (lost_bank["wallet"], lost_bank["reported_by"]) == (
            None,
            [f"reconciliation:{lost_wire['id']}"],
        )
        # one TopupRecorded per new payment, saying how it was found
        announced = [json.loads(m["body"]) for m in after.outbox[len(before.outbox) :]]
        assert sorted(m["payment_id"] for m in announced) == sorted(new)
        assert {m["route"] for m in announced} == {"reconciliation"}
        # the payments webhooks had reported were left alone (not even their other events stored)
        first = next(p for p in after.payments if p["id"] == before.payments[0]["id"])
        assert first["reported_by"] == [reported_checkout["id"]]
        assert not any(r["event_id"] == reported_intent["id"] for r in after.inbox)
        assert not any(r["event_type"] == "customer.created" for r in after.inbox)

        # again: nothing new
        assert await reconciler.run() == 0
        assert await stored(owner) == after

        # the late webhook finds the record: appended, not announced again
        assert (await post_stripe(client, late_intent)).status_code == 202
        late = await owner.fetchrow(
            "SELECT reported_by, routes FROM topup.payments WHERE provider_payment_id = $1",
            late_intent["data"]["object"]["id"],  # type: ignore[index]
        )
        assert late["routes"] == ["reconciliation", "webhook"]
        assert late["reported_by"][-1] == late_intent["id"]
        assert len((await stored(owner)).outbox) == len(after.outbox)


async def test_a_provider_that_does_not_answer_is_skipped_the_other_reconciled(
    topup_db: str, owner: asyncpg.Connection
) -> None:
    listings = Listings()
    listings.wires = [wire(reference=wallet_id())]
    broken = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(502)), base_url="http://x"
    )
    async with running(topup_settings(topup_db)) as client:
        reconciler = reconciler_for(client, listings)
        reconciler.listings[0] = StripeListing(broken, max_pages=10)
        assert await reconciler.run() == 1
    assert len((await stored(owner)).payments) == 1


@pytest.fixture
def listing_server() -> Iterator[tuple[Listings, str]]:
    listings = Listings()
    url, server, thread = serve(listings.app, "listings")
    yield listings, url
    stop(server, thread)


async def test_hiwallet_topups_reconcile_runs_one_round(
    topup_db: str, owner: asyncpg.Connection, listing_server: tuple[Listings, str]
) -> None:
    listings, url = listing_server
    _, intent = stripe_events(wallet=wallet_id(), amount=900)
    listings.events = [intent]
    listings.wires = [wire(reference=None)]
    env = {
        **os.environ,
        "HIWALLET_TOPUP_DATABASE": topup_db,
        "HIWALLET_TOPUP_STRIPE_URL": url,
        "HIWALLET_TOPUP_BANK_URL": url,
    }
    hiwallet = str(Path(sys.executable).parent / "hiwallet")
    for expected in ("recorded 2 payment(s)", "recorded 0 payment(s)"):
        proc = await asyncio.create_subprocess_exec(
            hiwallet,
            "topups",
            "reconcile",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert expected in out.decode()
    assert {"Bearer sk_test_hiwallet_dev", "Bearer bank_dev_key"} <= set(listings.auth)
    s = await stored(owner)
    assert len(s.payments) == 2
    assert {r["route"] for r in s.inbox} == {"reconciliation"}
