"""The fault campaign's short, seeded version in the suite (issue 25): the whole system under
`hiwallet up`, a bank workload through the front doors, processes killed with SIGKILL and one
stopped with SIGSTOP, and the campaign's own PostgreSQL cluster and RabbitMQ node restarted once
each (tests/chaos/servers.py: never the shared servers the suite's other tests use); then every
accepted request done once, the money conserved, no saga left unfinished, no dead letter, the
ledger verified (tests/chaos/campaign.py says how)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import asyncpg
import pytest

from hiwallet.core import db
from tests.chaos.campaign import CALLBACK_FAULTS, PROXIED, TARGETS, Config, run, schedule
from tests.chaos.servers import Unavailable, ensure

# A seed whose short schedule kills wallet-consumer, wallet-api and bank-webhook: the money
# path's consumer, its API and a saga's callback receiver (printed by the run; any seed replays).
SEED = 146
SHORT = Config(
    seed=SEED,
    duration_s=25.0,
    customers=6,
    workers=4,
    fault_every_s=6.0,
    # The campaign's own servers: the two restarts add some 15 s to the run.
    infrastructure=True,
    # Only the top-up notifications (and a bank callback) lost for a while: found by the
    # reconciliations, credited once.
    callbacks=True,
    callback_kinds=("lose",),
    cuts=False,
)


def test_the_same_seed_gives_the_same_schedule() -> None:
    first, again = schedule(random.Random(SEED), SHORT), schedule(random.Random(SEED), SHORT)
    assert [(f.at_s, f.kind, f.target) for f in first] == [(f.at_s, f.kind, f.target) for f in again]
    assert sorted((f.kind, f.target) for f in first if f.kind != "kill") == [
        ("callbacks", "lose"),
        ("postgres", "postgresql"),
        ("rabbitmq", "rabbitmq"),
    ]
    assert sum(1 for f in first if f.kind == "kill") == 3
    other = schedule(random.Random(SEED + 1), SHORT)
    assert [(f.kind, f.target) for f in first] != [(f.kind, f.target) for f in other]
    # The long run: every kind of process killed once per round, the servers restarted once each.
    long_run = schedule(random.Random(SEED), Config(seed=SEED, duration_s=600.0))
    assert {f.target for f in long_run if f.kind == "kill"} == set(TARGETS)
    assert sorted(f.kind for f in long_run if f.kind in ("postgres", "rabbitmq")) == ["postgres", "rabbitmq"]
    assert {f.target for f in long_run if f.kind == "callbacks"} == set(CALLBACK_FAULTS)
    assert {f.target for f in long_run if f.kind == "cut"} == set(PROXIED)
    assert any(f.kind == "stop" for f in long_run)


async def shared_postgres_started_at() -> object:
    shared = await asyncpg.connect(db.owner_dsn("postgres"))
    try:
        return await shared.fetchval("SELECT pg_postmaster_start_time()")
    finally:
        await shared.close()


async def test_a_short_campaign_keeps_the_books(tmp_path: Path) -> None:
    try:
        await asyncio.to_thread(ensure)
    except Unavailable as e:  # not Debian: no pg_createcluster, no rabbitmq-server to run a node
        pytest.skip(str(e))
    shared_since = await shared_postgres_started_at()
    figures = await run(SHORT, tmp_path / "up.log")
    # The restarts were the campaign's own servers': the shared PostgreSQL ran on throughout.
    assert await shared_postgres_started_at() == shared_since
    assert figures["findings"] == [], figures
    assert figures["faults"] == {"kill": 3, "postgres": 1, "rabbitmq": 1, "callbacks": 1}, figures
    assert set(figures["recovery_s"]) == {
        "kill wallet-consumer",
        "kill wallet-api",
        "kill bank-webhook",
        "postgres postgresql",
        "rabbitmq rabbitmq",
    }
    # At least once: a process started while its server restarts exits and is started again.
    assert figures["restarts"]["wallet-consumer"] >= 1 and figures["restarts"]["wallet-api"] >= 1
    # Every route of the workload was taken and answered 2xx at least once.
    done = figures["operations"]
    kinds = (
        "p2p",
        "payment",
        "refund",
        "withdrawal",
        "card_topup",
        "bank_topup",
        "promo",
        "goodwill",
        "review",
    )
    for kind in kinds:
        assert done.get(f"{kind} accepted", 0) > 0, (kind, done)
    # Withdrawals reviewed: released and cancelled both; lost top-up notifications found.
    assert set(figures["reviews"]) == {"release", "cancel"}, figures["reviews"]
    assert figures["topups_found_by_reconciliation"] > 0, figures
    assert figures["verify"]["ok"] and figures["dead_letters"] == 0
    money = figures["money"]
    assert money["in"] > 0 and money["out"] > 0 and money["in"] - money["out"] == money["balances_and_fees"]
    assert money["promo"] > 0 and money["goodwill"] > 0
    assert money["in"] == money["topups"] + money["promo"] + money["goodwill"]
