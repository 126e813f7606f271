"""Two notifications of one payment arriving together (stripe-fake retrying both at once after a
PostgreSQL restart): the two ingests race for the payment's row. Each is answered as if they had
come one after the other (one recorded, the other reported), never a 500.

The interleaving is forced, not hoped for: a third ingest of the same payment holds the row in
an open transaction, both notifications wait on it (asserted: PostgreSQL names it as what blocks
them), and it rolls back, so both go for the row at the same moment, each past its check for a
conflict. Without the fix the loser met ``payments_one_per_provider_payment`` (23505)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import orjson
import pytest

from hiwallet.core.settings import get_settings
from hiwallet.topup_webhook import providers
from hiwallet.topup_webhook.app import database_spec
from hiwallet.topup_webhook.providers import Notification
from hiwallet.topup_webhook.store import IngestItem, Outcome, Q, TopupStore
from tests import pgtemplate
from tests.topup_webhook.conftest import stored, stripe_events, topup_settings, wallet_id
from tests.topups import until

EXCHANGE = "hwt.topups"
ROUNDS = 16  # payments raced; each round is one forced collision


@pytest.fixture
async def pool(topup_db: str) -> AsyncIterator[asyncpg.Pool]:
    p = await database_spec(topup_settings(topup_db)).create_pool(get_settings(), max_size=4)
    yield p
    await p.close()


def stripe(event: dict[str, object]) -> Notification:
    return providers.read("stripe", orjson.dumps(event))


async def _blocked_by(owner: asyncpg.Connection, pid: int, count: int) -> None:
    """Until ``count`` backends wait on ``pid``: PostgreSQL says what blocks them."""

    async def waiting() -> bool:
        query = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))"
        return bool(await owner.fetchval(query, pid) == count)

    await until(waiting, timeout_s=10)


async def _race(
    topup_db: str, owner: asyncpg.Connection, ingest: Callable[[Notification], Awaitable[Outcome]]
) -> None:
    for _ in range(ROUNDS):
        wallet = wallet_id()
        checkout, intent = stripe_events(wallet=wallet, amount=700)
        held = {**checkout, "id": f"{checkout['id']}_held"}  # a third notification of the payment
        async with pgtemplate.owner_connection(topup_db) as holder:
            holder_pid = await holder.fetchval("SELECT pg_backend_pid()")
            tx = holder.transaction()
            await tx.start()
            n = stripe(held)
            p = n.payment
            assert p is not None
            await holder.fetchval(  # as the store sends it, as the owner: in an open transaction
                Q["ingest"],
                *(n.provider, n.event_id, n.event_type, "webhook", n.payload),
                *(p.id, p.provider_payment_id, p.wallet, p.reference, p.amount_minor, p.currency),
                *("held-message", EXCHANGE, None),
            )
            both = asyncio.gather(ingest(stripe(checkout)), ingest(stripe(intent)), return_exceptions=True)
            await _blocked_by(owner, holder_pid, 2)  # the interleaving happened: both wait on it
            await tx.rollback()
            answers = await both
        for a in answers:
            if isinstance(a, BaseException):
                raise a
        # as if one had come after the other: one recorded, the other its repeat
        assert sorted(answers) == sorted([Outcome.RECORDED, Outcome.REPORTED]), answers
    s = await stored(owner)
    assert len(s.payments) == ROUNDS
    assert all(len(p["reported_by"]) == 2 for p in s.payments)
    assert len(s.outbox) == ROUNDS  # one TopupRecorded per payment


@pytest.mark.parametrize("path", ["alone", "batch"])
async def test_two_ingests_of_one_payment_at_once(
    pool: asyncpg.Pool, topup_db: str, owner: asyncpg.Connection, path: str
) -> None:
    """Alone: topup.ingest, as with no writers. Batch: two batches of one (topup.ingest_batch's
    set-based path), as two instances' coalescers would send them."""
    store = TopupStore(pool, EXCHANGE)

    async def ingest(n: Notification) -> Outcome:
        if path == "alone":
            return await store.ingest(n, "webhook", None)
        [answer] = await store.ingest_batch([IngestItem(n, "webhook", None)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    await _race(topup_db, owner, ingest)


@pytest.mark.parametrize("path", ["alone", "batch"])
async def test_a_unique_violation_that_reaches_the_store_is_sent_again(
    pool: asyncpg.Pool, owner: asyncpg.Connection, path: str
) -> None:
    """The store's own guard, apart from the SQL's: a unique violation (as a race would raise
    it) is cured by sending the notification again; one that every attempt meets is a defect
    (raised: a logged 500), never retried without end. A trigger stands in for the race."""
    # A sequence counts the inserts tried (a failed statement rolls back a table's count, not a
    # sequence's): the first ``raise_until`` meet a unique violation.
    await owner.execute(
        """
        CREATE SEQUENCE topup.test_inserts;
        CREATE TABLE topup.test_violations (raise_until bigint NOT NULL);
        INSERT INTO topup.test_violations VALUES (1);
        CREATE FUNCTION topup.test_violate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF nextval('topup.test_inserts') <= (SELECT raise_until FROM topup.test_violations) THEN
                RAISE unique_violation USING CONSTRAINT = 'payments_one_per_provider_payment';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_violate BEFORE INSERT ON topup.payments
            FOR EACH ROW EXECUTE FUNCTION topup.test_violate();
        """
    )
    store = TopupStore(pool, EXCHANGE)

    async def ingest(n: Notification) -> Outcome:
        if path == "alone":
            return await store.ingest(n, "webhook", None)
        [answer] = await store.ingest_batch([IngestItem(n, "webhook", None)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    checkout, intent = stripe_events(wallet=wallet_id(), amount=700)
    assert await ingest(stripe(checkout)) is Outcome.RECORDED  # the second attempt
    assert await owner.fetchval("SELECT last_value FROM topup.test_inserts") == 2  # it met one
    assert await ingest(stripe(intent)) is Outcome.REPORTED

    await owner.execute("UPDATE topup.test_violations SET raise_until = 1000")
    other, _ = stripe_events(wallet=wallet_id(), amount=300)
    with pytest.raises(asyncpg.UniqueViolationError):
        await ingest(stripe(other))
    s = await stored(owner)
    assert len(s.payments) == 1 and len(s.outbox) == 1
