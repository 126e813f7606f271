"""The handler of TopupRecorded, called as core's Consumer calls it (tests/wallet_consumer/
conftest.py ``consume``): credited once, whatever repeats; unattributable top-ups stored and not
credited; malformed messages and ledger refusals that are not the wallet's Unprocessable; the
ledger verified after each."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from hiwallet.core.consumer import Unprocessable
from hiwallet.ledger import Ledger, LedgerStore, LedgerUnavailable, Role, cash_account, promo_account
from hiwallet.wallet_consumer import CONSUMER_NAME, TopupHandler, is_transient
from tests.wallet_consumer.conftest import TL, cash, consume, message, topup_body, verified


async def clearing(ledger: Ledger, provider: str = "stripe", currency: str = "TRY") -> int:
    return await ledger.store.system_balance(Role.CLEARING, currency, provider)


async def test_a_topup_is_credited_once_and_recorded(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla", bucket=421)).wallet_id
    body = topup_body(wallet, 250 * TL)
    msg = message(body)

    first = await consume(pool, handler, msg)
    assert first is not None and first["result"] == "credited"
    assert await cash(ledger, wallet) == 250 * TL
    assert await clearing(ledger) == -250 * TL
    row = await pool.fetchrow(
        "SELECT outcome FROM processed_events WHERE consumer = $1 AND message_id = $2",
        CONSUMER_NAME,
        msg.message_id,
    )
    assert row["outcome"] == {"result": "credited", "transaction_id": first["transaction_id"]}
    tx = await ledger.transaction(first["transaction_id"])
    assert (tx.type, tx.actor, tx.ref) == ("topup", "topup-webhook:stripe", body["provider_payment_id"])
    assert tx.id == f"0421:{body['payment_id']}"

    # the same message again (a redelivery): acked, nothing done
    assert await consume(pool, handler, msg) is None
    assert await cash(ledger, wallet) == 250 * TL
    await verified(ledger)


async def test_the_same_payment_under_two_message_ids_is_credited_once(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    body = topup_body(wallet, 99 * TL, route="webhook")
    first = await consume(pool, handler, message(body))
    again = await consume(pool, handler, message({**body, "route": "reconciliation"}))
    assert first is not None and again is not None
    assert (first["result"], again["result"]) == ("credited", "replayed")
    assert again["transaction_id"] == first["transaction_id"]
    assert await cash(ledger, wallet) == 99 * TL
    assert await pool.fetchval("SELECT count(*) FROM processed_events") == 2
    await verified(ledger)


async def test_a_payment_credited_by_another_actor_is_credited_already(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    """Another route posted the same payment under its key first (another actor: the ledger
    answers TransactionIdReused, not a replay): the message changes nothing and is done."""
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    body = topup_body(wallet, 10 * TL)
    await ledger.topup(
        body["payment_id"],
        wallet,
        10 * TL,
        provider="stripe",
        actor="operator:ayla",
        ref=body["provider_payment_id"],
    )
    done = await consume(pool, handler, message(body))
    assert done is not None and done["result"] == "credited-already"
    assert await cash(ledger, wallet) == 10 * TL
    await verified(ledger)


async def test_a_key_taken_by_another_transaction_is_unprocessable(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla", bucket=5)).wallet_id
    other = (await ledger.open_wallet("bob", bucket=5)).wallet_id
    body = topup_body(wallet, 10 * TL)
    await ledger.topup("fund", wallet, 50 * TL, provider="stripe", actor="test", ref="fund")
    await ledger.transfer(body["payment_id"], wallet, other, TL, actor="x", ref="x")
    with pytest.raises(Unprocessable, match="names another transaction"):
        await consume(pool, handler, message(body))
    assert await cash(ledger, wallet) == 49 * TL
    assert await pool.fetchval("SELECT count(*) FROM processed_events") == 0  # rolled back
    await verified(ledger)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("none", "no-reference"),
        ("blank", "no-reference"),
        ("malformed", "malformed-reference"),
        ("central-bucket", "malformed-reference"),
        ("unknown", "unknown-wallet"),
        ("closed", "closed-wallet"),
        ("currency", "currency-mismatch"),
    ],
)
async def test_an_unattributable_topup_is_stored_not_credited(
    pool: asyncpg.Pool,
    ledger: Ledger,
    handler: TopupHandler,
    closed_wallet: str,
    case: str,
    reason: str,
) -> None:
    eur = (await ledger.open_wallet("euro", "EUR", bucket=9)).wallet_id
    wallet: str | None = {
        "none": None,
        "blank": "  ",
        "malformed": "Ayla Yılmaz, wallet 421",
        "central-bucket": "0000:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
        "unknown": "0421:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
        "closed": closed_wallet,
        "currency": eur,
    }[case]
    body = topup_body(wallet, 70 * TL, reference="havale 421" if case == "none" else None)
    msg = message(body)
    done = await consume(pool, handler, msg)
    assert done == {"result": "unattributed", "reason": reason}
    row = await pool.fetchrow(
        "SELECT * FROM wallet.unattributed_topups WHERE payment_id = $1", body["payment_id"]
    )
    assert row is not None
    assert (row["reason"], row["amount_minor"], row["currency"], row["attributed_wallet"]) == (
        reason,
        70 * TL,
        "TRY",
        None,
    )
    assert row["reference"] == ("havale 421" if case == "none" else wallet)
    assert await clearing(ledger) == 0  # nothing credited anywhere
    # the same payment again, by another message: one row, still not credited
    again = await consume(pool, handler, message(body))
    assert again == {"result": "unattributed-already", "reason": reason}
    assert await pool.fetchval("SELECT count(*) FROM wallet.unattributed_topups") == 1
    await verified(ledger)


async def test_a_payment_credited_before_is_not_made_unattributed(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    """A later message of a credited payment that names no usable wallet: credited already,
    not handed to an operator who would credit it a second time."""
    wallet = (await ledger.open_wallet("ayla", bucket=17)).wallet_id
    body = topup_body(wallet, 5 * TL)
    await consume(pool, handler, message(body))
    later = await consume(pool, handler, message({**body, "wallet": None}))
    assert later is not None and later["result"] == "credited-already"
    assert await pool.fetchval("SELECT count(*) FROM wallet.unattributed_topups") == 0
    assert await cash(ledger, wallet) == 5 * TL


def _without(body: dict[str, Any], field: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != field}


MALFORMED: dict[str, Any] = {
    "no payment id": lambda b: _without(b, "payment_id"),
    "no wallet field": lambda b: _without(b, "wallet"),
    "amount as text": lambda b: {**b, "amount_minor": "1000"},
    "amount as bool": lambda b: {**b, "amount_minor": True},
    "amount as float": lambda b: {**b, "amount_minor": 10.5},
    "amount zero": lambda b: {**b, "amount_minor": 0},
    "amount negative": lambda b: {**b, "amount_minor": -5},
    "amount too big": lambda b: {**b, "amount_minor": 10**18},
    "currency lower": lambda b: {**b, "currency": "try"},
    "provider upper": lambda b: {**b, "provider": "Stripe"},
    "payment id with space": lambda b: {**b, "payment_id": "a b"},
    "control character": lambda b: {**b, "provider_payment_id": "pi_\x00"},
    "naive time": lambda b: {**b, "recorded_at": "2026-12-01T10:00:00"},
    "unknown route": lambda b: {**b, "route": "carrier-pigeon"},
    "wallet a number": lambda b: {**b, "wallet": 421},
    "a list": lambda b: [b],
    "a string": lambda b: "TopupRecorded",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_a_malformed_message_is_unprocessable(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler, case: str
) -> None:
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    body = MALFORMED[case](topup_body(wallet, 10 * TL))
    with pytest.raises(Unprocessable) as refused:
        await consume(pool, handler, message(body))
    assert "1000" not in str(refused.value) and "pi_" not in str(refused.value)  # names, not values
    assert await cash(ledger, wallet) == 0
    assert await pool.fetchval("SELECT count(*) FROM processed_events") == 0


async def test_a_message_of_another_type_is_unprocessable(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    with pytest.raises(Unprocessable, match="unknown message type"):
        await consume(pool, handler, message(topup_body(wallet), type_="WithdrawalRequested"))


async def test_no_clearing_account_in_that_currency_is_unprocessable_until_it_exists(
    pool: asyncpg.Pool, api_pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    """A USD wallet in a bucket without USD system accounts (opened account by account, as no
    service does): the ledger refuses the clearing account, not the wallet's. Dead-lettered;
    once the system accounts exist, the same message credits."""
    wallet = "0777:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0777"
    async with api_pool.acquire() as conn:
        for account, purse in ((cash_account(wallet), "cash"), (promo_account(wallet), "promo")):
            await conn.execute(
                "SELECT ledger.open_account(777::smallint, $1, $2, 'USD', 'x')", account, purse
            )
    msg = message(topup_body(wallet, 30 * TL, currency="USD"))
    with pytest.raises(Unprocessable, match="no ledger account 0777:sys:clearing:stripe:USD"):
        await consume(pool, handler, msg)
    assert await pool.fetchval("SELECT count(*) FROM processed_events") == 0

    await ledger.store.ensure_system_accounts("USD", buckets=[777])
    done = await consume(pool, handler, msg)  # the dead letter replayed
    assert done is not None and done["result"] == "credited"
    assert await cash(ledger, wallet) == 30 * TL
    await verified(ledger)


async def test_a_provider_without_clearing_accounts_is_unprocessable_until_they_exist(
    pool: asyncpg.Pool, api_pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler
) -> None:
    wallet = (await ledger.open_wallet("ayla", bucket=3)).wallet_id
    msg = message(topup_body(wallet, 30 * TL, provider="papara"))
    with pytest.raises(Unprocessable, match="clearing:papara:TRY"):
        await consume(pool, handler, msg)
    await LedgerStore(api_pool, providers=["stripe", "bank", "papara"]).ensure_system_accounts(
        "TRY", buckets=[3]
    )
    done = await consume(pool, handler, msg)
    assert done is not None and done["result"] == "credited"
    assert await cash(ledger, wallet) == 30 * TL
    await verified(ledger)


async def test_a_lost_database_is_transient_not_unprocessable(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler, owner: asyncpg.Connection
) -> None:
    """The connection dies under the handler: what it raises pauses the consumer (is_transient),
    nothing is dead-lettered, and the message handled again credits once."""
    wallet = (await ledger.open_wallet("ayla")).wallet_id
    msg = message(topup_body(wallet, 12 * TL))
    with pytest.raises(Exception) as lost:
        async with pool.acquire() as conn, conn.transaction():
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            await owner.execute("SELECT pg_terminate_backend($1)", pid)
            await handler(conn, msg)
    assert not isinstance(lost.value, Unprocessable)
    assert is_transient(lost.value)
    assert is_transient(LedgerUnavailable("database unavailable"))
    done = await consume(pool, handler, msg)
    assert done is not None and done["result"] == "credited"
    assert await cash(ledger, wallet) == 12 * TL
