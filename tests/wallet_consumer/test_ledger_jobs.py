"""wallet-consumer's ledger jobs (jobs.py): promo expiry returns each expired batch's remainder
once - to the business that funded it, or to promo_breakage for the platform's - with two
instances running the job at once, with two operator commands at once, and even with two rounds
that overlap without the lock; the sweep gathers the per-bucket sub-accounts into the central
ones. Each run leaves the ledger verified and the money where it was, moved.

The batches are expired by moving their clock (the owner ages ``expires_at``), never by waiting.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from typer.testing import CliRunner

from hiwallet.cli import app
from hiwallet.contracts.databases import DATABASES, service_role
from hiwallet.core import db
from hiwallet.ledger import Ledger, LedgerStore, Role, cash_account, system_account
from hiwallet.wallet_consumer import cli as consumer_cli
from hiwallet.wallet_consumer.jobs import PROMO_EXPIRY_LOCK_KEY, LedgerJobs
from hiwallet.wallet_consumer.metrics import LedgerJobMetrics
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from tests.topups import wallet_pool
from tests.wallet_consumer.conftest import FEES, TL, running, until, verified

HIWALLET = Path(sys.executable).parent / "hiwallet"


@dataclass
class Promos:
    """What a test's ledger holds: expired batches (with what each still holds), live ones."""

    businesses: list[str]
    customers: list[str]
    expired: dict[str, tuple[str, int]]  # batch id -> (funder: a business wallet or "platform", remaining)
    live: set[str]

    def to_business(self, business: str) -> int:
        return sum(left for funder, left in self.expired.values() if funder == business)

    @property
    def to_breakage(self) -> int:
        return sum(left for funder, left in self.expired.values() if funder == "platform")


async def promos(ledger: Ledger, owner: asyncpg.Connection, customers: int = 12) -> Promos:
    """Two businesses and ``customers`` customers across buckets. Each customer gets a batch of
    each business, one of the platform (a campaign) and one that stays live; some spend part of
    a batch first (a payment spends the earliest-expiring live batch), so a remainder is not
    always the amount. Then every batch but the live ones is aged past its expiry."""
    later = datetime.now(UTC) + timedelta(days=30)
    much_later = datetime.now(UTC) + timedelta(days=300)
    businesses = []
    for i in range(2):
        b = (await ledger.open_wallet(f"shop{i}", bucket=700 + i)).wallet_id
        await ledger.topup(f"fund-{b}", b, 10_000 * TL, provider="stripe", actor="t", ref="fund")
        businesses.append(b)
    wallets, expiring, live = [], [], set()
    for i in range(customers):
        c = (await ledger.open_wallet(f"c{i}", bucket=100 + 13 * i)).wallet_id
        wallets.append(c)
        for j, b in enumerate(businesses):
            g = await ledger.promo_grant(
                f"g-{c}-{j}", c, (10 + i + j) * TL, expires_at=later, actor="t", ref="welcome", business=b
            )
            expiring.append(g.id)
        g = await ledger.promo_grant(f"g-{c}-p", c, (5 + i) * TL, expires_at=later, actor="t", ref="campaign")
        expiring.append(g.id)
        g = await ledger.promo_grant(
            f"g-{c}-live", c, 7 * TL, expires_at=much_later, actor="t", ref="campaign", business=businesses[0]
        )
        live.add(g.id)
        if i % 3 == 0:  # spends part of its earliest batch (3 TL and the 2 % fee, all promo)
            await ledger.payment(f"pay-{c}", c, businesses[1], 3 * TL, actor="t", ref="coffee")
    # The grants' batch ids are their transaction ids (the batch records its grant).
    ids = await owner.fetch(
        "SELECT id, grant_transaction_id FROM ledger.promo_batches WHERE grant_transaction_id = ANY ($1)",
        expiring + sorted(live),
    )
    by_grant = {r["grant_transaction_id"]: r["id"] for r in ids}
    expired_ids = [by_grant[g] for g in expiring]
    await owner.execute(
        "UPDATE ledger.promo_batches SET expires_at = now() - interval '1 second' WHERE id = ANY ($1)",
        expired_ids,
    )
    rows = await owner.fetch(
        "SELECT b.id, b.remaining, b.funded_by, b.expire_to_account FROM ledger.promo_batches b"
        " WHERE b.id = ANY ($1)",
        expired_ids,
    )
    expired = {
        r["id"]: (
            "platform" if r["funded_by"] == "platform" else r["expire_to_account"].removesuffix(":cash"),
            r["remaining"],
        )
        for r in rows
    }
    assert all(left > 0 for _, left in expired.values())
    assert any(left < 10 * TL for _, left in expired.values())  # some were partly spent
    return Promos(businesses, wallets, expired, {by_grant[g] for g in live})


async def expiries_per_batch(owner: asyncpg.Connection) -> dict[str, int]:
    rows = await owner.fetch(
        "SELECT ref, count(DISTINCT id) AS n FROM ledger.transactions"
        " WHERE type = 'promo_expiry' GROUP BY ref"
    )
    return {r["ref"].removeprefix("promo-batch:"): r["n"] for r in rows}


async def books(ledger: Ledger, p: Promos) -> dict[str, int]:
    """What the test watches: each business's cash, all customers' promo, breakage, and the
    sum of every account (zero: double entry)."""
    out = {b: (await ledger.wallet_balance(b)).cash for b in p.businesses}
    out["promo"] = sum([(await ledger.wallet_balance(c)).promo for c in p.customers])
    out["breakage"] = await ledger.store.system_balance(Role.PROMO_BREAKAGE, "TRY")
    return out


async def assert_expired_once(
    ledger: Ledger, owner: asyncpg.Connection, p: Promos, before: dict[str, int]
) -> None:
    """Every expired batch expired exactly once, its remainder where its funder is; live ones
    untouched; nothing else moved; the ledger verified."""
    assert await expiries_per_batch(owner) == dict.fromkeys(p.expired, 1)
    after = await books(ledger, p)
    for b in p.businesses:
        assert after[b] - before[b] == p.to_business(b), b
    assert after["breakage"] - before["breakage"] == p.to_breakage
    assert before["promo"] - after["promo"] == sum(left for _, left in p.expired.values())
    left = {
        r["id"]: r["remaining"]
        for r in await owner.fetch(
            "SELECT id, remaining FROM ledger.promo_batches WHERE id = ANY ($1)", list(p.live)
        )
    }
    assert left and all(v > 0 for v in left.values())  # live batches are never expired
    assert (
        await owner.fetchval(
            "SELECT count(*) FROM ledger.promo_batches WHERE remaining > 0 AND expires_at <= now()"
        )
        == 0
    )
    assert await owner.fetchval("SELECT sum(balance) FROM ledger.accounts") == 0
    await verified(ledger)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 when absent), whatever the
    order of its labels."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


async def test_two_instances_expire_each_batch_once(
    wallet_db: str, ledger: Ledger, owner: asyncpg.Connection, settings: WalletConsumerSettings
) -> None:
    p = await promos(ledger, owner)
    before = await books(ledger, p)
    # Small pages, a round every 50 ms in each instance: their rounds contend for the lock.
    fast = settings.model_copy(
        update={"promo_expiry_interval_s": 0.05, "promo_expiry_batch": 4, "sweep_interval_s": 3600.0}
    )
    async with running(fast, wallet_db) as one, running(fast, wallet_db) as two:

        async def all_expired() -> bool:
            return len(await expiries_per_batch(owner)) == len(p.expired)

        await until(all_expired, what="every expired batch returned")
        # a few more rounds (run or skipped) in both instances: nothing is expired again
        clients = (one, two)

        async def rounds() -> list[float]:
            texts = [(await c.get("/metrics")).text for c in clients]
            return [
                metric(t, "hiwallet_ledger_job_rounds_total", job="promo-expiry", result="done")
                + metric(t, "hiwallet_ledger_job_rounds_skipped", job="promo-expiry")
                for t in texts
            ]

        seen = await rounds()

        async def more_rounds() -> bool:
            return all(now >= then + 3 for now, then in zip(await rounds(), seen, strict=True))

        await until(more_rounds, what="three more rounds in each instance")
        texts = [(await c.get("/metrics")).text for c in clients]

    await assert_expired_once(ledger, owner, p, before)
    # The instances' counters together count each batch once, and the amount it returned.
    businesses = sum(1 for funder, _ in p.expired.values() if funder != "platform")
    counted = sum(
        metric(t, "hiwallet_promo_batches_expired_total", currency="TRY", to="business") for t in texts
    )
    assert counted == businesses
    counted = sum(
        metric(t, "hiwallet_promo_batches_expired_total", currency="TRY", to="breakage") for t in texts
    )
    assert counted == len(p.expired) - businesses
    returned = sum(
        metric(t, "hiwallet_promo_returned_minor_total", currency="TRY", to="breakage") for t in texts
    )
    assert returned == p.to_breakage
    assert (
        sum(metric(t, "hiwallet_ledger_job_rounds_total", job="promo-expiry", result="done") for t in texts)
        >= 2
    )
    assert (
        sum(metric(t, "hiwallet_ledger_job_rounds_total", job="promo-expiry", result="failed") for t in texts)
        == 0
    )


async def test_overlapping_rounds_without_the_lock_still_expire_each_batch_once(
    wallet_db: str, ledger: Ledger, owner: asyncpg.Connection
) -> None:
    """The lock is not what makes it exactly once: two rounds at once on two connections (as
    two instances whose lock was lost) each post what they find; the batch's row lock and its
    key return each remainder once, and the two reports together name each batch once."""
    p = await promos(ledger, owner, customers=15)
    before = await books(ledger, p)
    settings = WalletConsumerSettings(promo_expiry_batch=3)
    async with (
        wallet_pool(wallet_db, max_size=3, service="wallet_consumer") as a,
        wallet_pool(wallet_db, max_size=3, service="wallet_consumer") as b,
    ):
        jobs = [LedgerJobs(Ledger(LedgerStore(pool), FEES), settings) for pool in (a, b)]
        reports = await asyncio.gather(*(j.expire_promos() for j in jobs))
    named = [e.batch_id for r in reports for e in r.expired]
    assert sorted(named) == sorted(p.expired)  # each batch in exactly one report
    for r in reports:
        for e in r.expired:
            funder, left = p.expired[e.batch_id]
            assert e.amount_minor == left
            assert e.to == ("breakage" if funder == "platform" else "business")
            if funder == "platform":  # the breakage sub-account of the customer's bucket
                assert e.account.endswith(":sys:promo_breakage:TRY"), e
            else:
                assert e.account == cash_account(funder), e
    await assert_expired_once(ledger, owner, p, before)


async def test_a_round_waits_for_no_one_and_does_nothing_while_another_holds_the_lock(
    wallet_db: str, pool: asyncpg.Pool, ledger: Ledger, owner: asyncpg.Connection
) -> None:
    p = await promos(ledger, owner, customers=3)
    before = await books(ledger, p)
    jobs = LedgerJobs(Ledger(LedgerStore(pool), FEES), WalletConsumerSettings(), LedgerJobMetrics())
    connect = db.dedicated_connection(wallet_db, service_role("wallet", "wallet_consumer"))
    holder = await connect()  # another instance, in the middle of its round
    try:
        assert await holder.fetchval("SELECT pg_try_advisory_lock($1)", PROMO_EXPIRY_LOCK_KEY)
        assert await jobs.expire_promos_now(connect) is None
        assert await expiries_per_batch(owner) == {}
    finally:
        await holder.close()  # its lock with it
    report = await jobs.expire_promos_now(connect)
    assert report is not None and len(report.expired) == len(p.expired)
    again = await jobs.expire_promos_now(connect)
    assert again is not None and again.expired == []
    await assert_expired_once(ledger, owner, p, before)


async def test_two_operator_commands_at_once_expire_each_batch_once(
    wallet_db: str, ledger: Ledger, owner: asyncpg.Connection, tmp_path: Path
) -> None:
    """`hiwallet ledger expire-promos` twice at once, as two processes: one runs the round
    (or both, one after the other), the other says another instance is running one; each batch
    expired once, and what the command printed is what happened."""
    p = await promos(ledger, owner)
    before = await books(ledger, p)
    env = {**os.environ, "HIWALLET_WALLET_CONSUMER_DATABASE": wallet_db, "COLUMNS": "400"}

    async def command() -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            str(HIWALLET),
            "ledger",
            "expire-promos",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode is not None
        return process.returncode, out.decode()

    results = await asyncio.gather(command(), command())
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    outputs = [out for code, out in results if code == 0]
    done = [out for out in outputs if "expired " in out and "batches" in out]
    assert len(done) >= 1
    assert f"expired {len(p.expired)} batches" in "".join(outputs)
    assert f"{p.to_breakage} to promo_breakage" in "".join(outputs)
    for code, out in results:
        if code == 2:
            assert "another instance is running a promo expiry round" in out
        elif f"expired {len(p.expired)} batches" not in out:
            assert "no promo batch to expire" in out  # ran after the other: nothing left
    await assert_expired_once(ledger, owner, p, before)


async def test_the_sweep_gathers_the_sub_accounts_once(
    wallet_db: str, pool: asyncpg.Pool, ledger: Ledger, owner: asyncpg.Connection
) -> None:
    """Top-ups and payments in many buckets leave clearing and revenue in per-bucket
    sub-accounts; a sweep round moves each into its central account once, a second moves
    nothing."""
    shop = (await ledger.open_wallet("shop", bucket=900)).wallet_id
    for i in range(8):
        c = (await ledger.open_wallet(f"c{i}", bucket=200 + 31 * i)).wallet_id
        await ledger.topup(f"t-{c}", c, (50 + i) * TL, provider="stripe", actor="t", ref="card")
        await ledger.topup(f"b-{c}", c, 5 * TL, provider="bank", actor="t", ref="wire")
        await ledger.payment(f"p-{c}", c, shop, (10 + i) * TL, actor="t", ref="order")
    totals_before = {
        (role, provider): await ledger.store.system_balance(role, "TRY", provider)
        for role, provider in [(Role.CLEARING, "stripe"), (Role.CLEARING, "bank"), (Role.REVENUE, None)]
    }
    assert totals_before[(Role.REVENUE, None)] > 0

    # Two rounds at once, as two instances (or the job and the operator's command) start them:
    # under the job's lock one runs, the other finds it taken or, after it, nothing to move.
    connect = db.dedicated_connection(wallet_db, service_role("wallet", "wallet_consumer"))
    jobs = [LedgerJobs(Ledger(LedgerStore(p), FEES), WalletConsumerSettings()) for p in (pool, pool)]
    reports = [r for r in await asyncio.gather(*(j.sweep_now(connect) for j in jobs)) if r is not None]
    assert reports
    swept = [s for r in reports for s in r.swept]
    # 8 buckets of stripe clearing, bank clearing and revenue (the payer's bucket)
    assert sorted((s.role, s.currency) for s in swept).count(("revenue", "TRY")) == 8
    assert len(swept) == 24
    for (role, provider), total in totals_before.items():
        # the whole is unchanged; it is all in the central account now
        assert await ledger.store.system_balance(role, "TRY", provider) == total
        central = (await ledger.store.account(system_account(role, "TRY", provider=provider))).balance
        assert central == total, (role, provider)
    assert (
        await owner.fetchval(
            "SELECT count(*) FROM ledger.accounts WHERE bucket <> 0 AND balance <> 0"
            " AND role IN ('clearing', 'revenue', 'promo_expense', 'promo_breakage')"
        )
        == 0
    )
    assert (await jobs[0].sweep()).swept == []
    await verified(ledger)


async def test_sweeps_at_once_without_the_lock_move_each_sub_account_once(
    pool: asyncpg.Pool, ledger: Ledger
) -> None:
    """Three rounds at once with no lock (an operator's command against a job that lost its
    lock's connection): the same sub-account's sweep posted by two at once is one posting and
    a replay, never a failure; the books stay whole."""
    shop = (await ledger.open_wallet("shop", bucket=900)).wallet_id
    for i in range(8):
        c = (await ledger.open_wallet(f"c{i}", bucket=200 + 31 * i)).wallet_id
        await ledger.topup(f"t-{c}", c, (50 + i) * TL, provider="stripe", actor="t", ref="card")
        await ledger.payment(f"p-{c}", c, shop, (10 + i) * TL, actor="t", ref="order")
    jobs = [LedgerJobs(Ledger(LedgerStore(pool), FEES), WalletConsumerSettings()) for _ in range(3)]
    reports = await asyncio.gather(*(j.sweep() for j in jobs))
    swept = [s for r in reports for s in r.swept]
    assert len(swept) == 16  # 8 buckets of stripe clearing and revenue, each moved by one round
    assert (await jobs[0].sweep()).swept == []
    await verified(ledger)


async def test_the_sweep_job_runs_in_the_service_with_its_metrics(
    wallet_db: str, ledger: Ledger, owner: asyncpg.Connection, settings: WalletConsumerSettings
) -> None:
    c = (await ledger.open_wallet("c", bucket=321)).wallet_id
    await ledger.topup("t1", c, 40 * TL, provider="stripe", actor="t", ref="card")
    fast = settings.model_copy(update={"sweep_interval_s": 0.05})
    async with running(fast, wallet_db) as one, running(fast, wallet_db) as two:

        async def counted() -> list[str] | None:
            # what the instances counted, once one of them counted the sweep (after its commit)
            texts = [(await client.get("/metrics")).text for client in (one, two)]
            name = "hiwallet_ledger_sub_accounts_swept_total"
            done = sum(metric(t, name, role="clearing", currency="TRY") for t in texts)
            return texts if done else None

        texts = await until(counted, what="the clearing sub-account swept")
        # a few more rounds in each: nothing is swept again
        rounds = [
            metric(t, "hiwallet_ledger_job_rounds_total", job="ledger-sweep", result="done")
            + metric(t, "hiwallet_ledger_job_rounds_skipped", job="ledger-sweep")
            for t in texts
        ]

        async def more_rounds() -> list[str] | None:
            now = [(await client.get("/metrics")).text for client in (one, two)]
            ran = [
                metric(t, "hiwallet_ledger_job_rounds_total", job="ledger-sweep", result="done")
                + metric(t, "hiwallet_ledger_job_rounds_skipped", job="ledger-sweep")
                for t in now
            ]
            return now if all(a >= b + 3 for a, b in zip(ran, rounds, strict=True)) else None

        texts = await until(more_rounds, what="three more sweep rounds in each instance")
    name = "hiwallet_ledger_sub_accounts_swept_total"
    assert sum(metric(t, name, role="clearing", currency="TRY") for t in texts) == 1
    name = "hiwallet_ledger_swept_minor_total"
    assert sum(metric(t, name, role="clearing", currency="TRY") for t in texts) == 40 * TL
    central = await ledger.store.account(system_account(Role.CLEARING, "TRY", provider="stripe"))
    assert central.balance == await ledger.store.system_balance(Role.CLEARING, "TRY", "stripe") != 0
    assert (
        await owner.fetchval("SELECT count(DISTINCT id) FROM ledger.transactions WHERE type = 'sweep'") == 1
    )
    await verified(ledger)


async def test_the_sweep_command_prints_what_it_moved(
    wallet_db: str, ledger: Ledger, owner: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(DATABASES, "wallet", wallet_db)
    monkeypatch.setattr(consumer_cli, "console", Console(emoji=False, soft_wrap=True, width=400))
    for i in range(3):
        c = (await ledger.open_wallet(f"c{i}", bucket=40 + i)).wallet_id
        await ledger.topup(f"t-{c}", c, 10 * TL, provider="stripe", actor="t", ref="card")
    runner = CliRunner()
    done = await asyncio.to_thread(runner.invoke, app, ["ledger", "sweep"])
    assert done.exit_code == 0, done.output
    assert "swept 3 sub-accounts" in done.output
    assert re.search(r"clearing\s.*TRY\s.*3\s.*-3000", done.output), done.output
    again = await asyncio.to_thread(runner.invoke, app, ["ledger", "sweep"])
    assert again.exit_code == 0 and "nothing to sweep" in again.output
    central = await ledger.store.account(system_account(Role.CLEARING, "TRY", provider="stripe"))
    assert central.balance == -30 * TL
    # the operator is the actor of what the command posted
    rows = await owner.fetch("SELECT DISTINCT actor FROM ledger.transactions WHERE type = 'sweep'")
    assert [r["actor"] for r in rows] == [f"operator:{pwd.getpwuid(os.getuid()).pw_name}"]
    await verified(ledger)
