"""``hiwallet topups reconcile``: one reconciliation round by hand, under the same lock as the
service's rounds (never two at once); ``hiwallet topups settle``: one round of the payouts'
import, likewise.

:func:`register` adds this package's ``topups`` commands to any Typer: ``hiwallet.cli`` mounts
one ``topups`` sub-app holding them and wallet-consumer's (``unattributed``, ``attribute``), so
neither service imports the other."""

from __future__ import annotations

import asyncio

import typer
from prometheus_client import CollectorRegistry
from rich.console import Console

from hiwallet.core.jobs import PeriodicJob
from hiwallet.core.outbox import RelayHint
from hiwallet.core.settings import get_settings
from hiwallet.topup_webhook.app import RECONCILE_LOCK_KEY, database_spec, settlement_importer, settlement_job
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.reconcile import Reconciler, listings_for, provider_clients
from hiwallet.topup_webhook.retention import OUTBOX_CHANNEL
from hiwallet.topup_webhook.service import TopupService, verifiers_for
from hiwallet.topup_webhook.settings import TopupWebhookSettings, get_topup_webhook_settings
from hiwallet.topup_webhook.store import TopupStore

__all__ = ["reconcile_once", "register", "settle_once"]

console = Console(emoji=False, soft_wrap=True)


async def reconcile_once(settings: TopupWebhookSettings) -> int | None:
    """One round; None when another instance holds the round's lock (it is running one)."""
    core = get_settings()
    pool = await database_spec(settings).create_pool(core, max_size=2)
    clients = provider_clients(settings)
    # what it records wakes the service's relay (by a pg_notify: no relay runs here)
    hint = RelayHint(pool, OUTBOX_CHANNEL)
    try:
        metrics = TopupMetrics(CollectorRegistry())
        store = TopupStore(pool, settings.exchange, on_recorded=hint.committed)
        service = TopupService(store, verifiers_for(settings), metrics)
        reconciler = Reconciler(
            service, listings_for(clients, settings.reconcile_max_pages), settings.reconcile_window_s, metrics
        )
        found: list[int] = []

        async def round_() -> int:
            found.append(await reconciler.run())
            return found[-1]

        job = PeriodicJob(
            "topup-reconcile",
            settings.reconcile_interval_s,
            RECONCILE_LOCK_KEY,
            round_,
            database_spec(settings).dedicated(core),
        )
        return found[0] if await job.run_once() else None
    finally:
        for client in clients.values():
            await client.aclose()
        await hint.aclose()
        await pool.close()


def reconcile() -> None:
    """Ask each provider for its payments of the last window and record those no webhook
    reported (once: a payment recorded before is left alone)."""
    found = asyncio.run(reconcile_once(get_topup_webhook_settings()))
    if found is None:
        console.print("[yellow]busy[/yellow]: a reconciliation round is running elsewhere; try again")
        raise typer.Exit(1)
    console.print(f"recorded [bold]{found}[/bold] payment(s) no webhook had reported")


async def settle_once(settings: TopupWebhookSettings) -> int | None:
    """One round of the payouts' import; None when another instance holds its lock."""
    core = get_settings()
    pool = await database_spec(settings).create_pool(core, max_size=2)
    clients = provider_clients(settings)
    hint = RelayHint(pool, OUTBOX_CHANNEL)  # what it records wakes the service's relay
    try:
        store = TopupStore(pool, settings.exchange, on_recorded=hint.committed)
        importer = settlement_importer(store, settings, clients, TopupMetrics(CollectorRegistry()))
        announced: list[int] = []

        async def round_() -> int:
            announced.append(await importer.run())
            return announced[-1]

        job = settlement_job(settings, round_, database_spec(settings).dedicated(core))
        return announced[0] if await job.run_once() else None
    finally:
        for client in clients.values():
            await client.aclose()
        await hint.aclose()
        await pool.close()


def settle() -> None:
    """Read the card provider's payouts of the last window and announce each new one to
    wallet-consumer (once: a payout recorded before is left alone)."""
    announced = asyncio.run(settle_once(get_topup_webhook_settings()))
    if announced is None:
        console.print("[yellow]busy[/yellow]: a settlement round is running elsewhere; try again")
        raise typer.Exit(1)
    console.print(f"announced [bold]{announced}[/bold] payout(s)")


def register(app: typer.Typer) -> None:
    """Add topup-webhook's ``topups`` commands to ``app``."""
    app.command("reconcile")(reconcile)
    app.command("settle")(settle)
