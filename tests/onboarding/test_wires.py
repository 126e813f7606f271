"""The first wire from the customer's own bank account -> verified (onboarding/wires.py), with
the real onboarding, identity and wallet-api (tests/onboarding/conftest.py), a real bank-fake
and real PostgreSQL; RabbitMQ for the consumer in the app.

The handler, called as core's Consumer calls it (``consume``): a wire whose sender's TCKN is
the customer's raises the tier once, recorded; a wire from someone else, without a TCKN, or
unknown to the bank changes nothing, recorded as such; a customer not through basic
verification, a wallet that is nobody's, a card top-up: nothing, not even a bank call; the bank
away: transient, nothing recorded; wallet-api away: the check recorded, the sweep finishes the
raise. Through the app: a TopupCredited published to the events exchange reaches the tier in
wallet-api, a poison message is dead-lettered."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from hiwallet.contracts.events import ONBOARDING_WIRES_QUEUE, events_topology, topup_credited
from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.consumer import DEAD_REASON_HEADER, IncomingMessage
from hiwallet.core.settings import get_settings
from hiwallet.fakes.bank import BankFakeSettings, create_bank_fake_app
from hiwallet.onboarding.app import create_onboarding_app
from hiwallet.onboarding.clients import DependencyUnavailable, ServiceToken, WalletApi
from hiwallet.onboarding.crypto import Hasher
from hiwallet.onboarding.store import database_spec
from hiwallet.onboarding.wires import CONSUMER_NAME, BankWires, WireHandler, WiresSettings
from tests.core.spine import collect
from tests.faultproxy import FaultProxy
from tests.onboarding.conftest import AYSE, MEHMET, Onboarding, run_in_service_loop
from tests.servers import free_port, serve, stop
from tests.topups import until

BANK_KEY = "bank_test_key"


@pytest.fixture(scope="module")
def bank() -> Iterator[str]:
    """bank-fake, for the module (its wires are ids of their own); its notifications go
    nowhere (no topup-webhook here: the tests make the TopupCredited themselves)."""
    settings = BankFakeSettings(
        api_key=BANK_KEY, webhook_url=f"http://127.0.0.1:{free_port()}/nowhere", retry_attempts=1
    )
    url, server, thread = serve(create_bank_fake_app(settings), "bank-fake")
    yield url
    stop(server, thread)


async def wire(bank_url: str, tckn: str | None, amount_minor: int = 100_00) -> str:
    """A wire booked at the bank, from a sender with ``tckn``: its id."""
    body: dict[str, Any] = {
        "sender_name": "Ayşe Yılmaz",
        "sender_iban": "TR330006100519786457841326",
        "amount_minor": amount_minor,
        "currency": "TRY",
        "reference": "HiWallet",
    }
    if tckn is not None:
        body["sender_tckn"] = tckn
    async with httpx.AsyncClient(base_url=bank_url) as client:
        response = await client.post("/v1/topups", json=body, headers={"Authorization": f"Bearer {BANK_KEY}"})
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def credited(
    wallet: str, wire_id: str, *, provider: str = "bank", amount_minor: int = 100_00
) -> OutgoingMessage:
    """The TopupCredited wallet-consumer writes for a credited wire."""
    return topup_credited(
        payment_id=f"pay-{uuid.uuid4().hex[:16]}",
        provider=provider,
        provider_payment_id=wire_id,
        wallet=wallet,
        amount_minor=amount_minor,
        currency="TRY",
        credited_at=datetime.now(UTC),
    )


def incoming(message: OutgoingMessage, *, message_id: str | None = None) -> IncomingMessage:
    return IncomingMessage(
        message_id=message_id or message.message_id,
        type=message.type,
        routing_key=message.routing_key,
        body=orjson.loads(message.body),
        headers={},
        redelivered=False,
        delivery_count=0,
    )


async def consume(
    pool: asyncpg.Pool, handler: WireHandler, message: IncomingMessage
) -> Mapping[str, Any] | None:
    """What core.consumer.Consumer does with one message: claim its id, handle it, store the
    outcome, one transaction; None for a repeat."""
    async with pool.acquire() as conn, conn.transaction():
        new = await conn.fetchval(
            "INSERT INTO onboarding.processed_events (consumer, message_id) VALUES ($1, $2)"
            " ON CONFLICT DO NOTHING RETURNING true",
            CONSUMER_NAME,
            message.message_id,
        )
        if not new:
            return None
        outcome = await handler(conn, message)
        await conn.execute(
            "UPDATE onboarding.processed_events SET outcome = $3 WHERE consumer = $1 AND message_id = $2",
            CONSUMER_NAME,
            message.message_id,
            orjson.dumps(dict(outcome)).decode(),
        )
        return outcome


@pytest.fixture
async def pool(onb: Onboarding) -> AsyncIterator[asyncpg.Pool]:
    p = await database_spec(onb.settings).create_pool(get_settings(), max_size=4)
    yield p
    await p.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def handler_for(onb: Onboarding, http: httpx.AsyncClient, bank_url: str, **wallet_api: Any) -> WireHandler:
    """The handler on this test's loop: its own token and clients, the service's keys."""
    settings = onb.settings.model_copy(update=wallet_api)
    return WireHandler(
        BankWires(http, WiresSettings(bank_url=bank_url, bank_api_key=BANK_KEY)),
        WalletApi(ServiceToken(http, settings), settings),
        Hasher.parse(onb.settings.hash_key.get_secret_value()),
    )


def new_phone() -> str:
    return f"+90532{random.randrange(10**7):07d}"


async def basic_customer(onb: Onboarding, who: Mapping[str, str] = AYSE) -> asyncpg.Record:
    """A customer through basic verification (tier unverified): their onboarding row."""
    email, auth = await onb.customer()
    assert (await onb.verify_phone(auth, new_phone())).status_code == 200
    identity = await onb.http.post("/v1/me/identity", json=dict(who), headers=auth)
    assert identity.status_code == 200, identity.text
    assert (await onb.accept_all(auth)).status_code == 200
    return await customer_of(onb, email)


async def customer_of(onb: Onboarding, email: str) -> asyncpg.Record:
    [user] = onb.users_with(email)
    [row] = await onb.sql("SELECT * FROM onboarding.customers WHERE sub = $1", user["id"])
    return row


async def wallet_tier(onb: Onboarding, account_id: str) -> str:
    [row] = await onb.wallet_sql("SELECT tier FROM wallet.accounts WHERE id = $1", account_id)
    return str(row["tier"])


async def tiers(onb: Onboarding, customer_id: str) -> tuple[str, str]:
    """onboarding's record: the tier set in wallet-api, the tier it means to set."""
    [row] = await onb.sql("SELECT tier, tier_wanted FROM onboarding.customers WHERE id = $1", customer_id)
    return str(row["tier"]), str(row["tier_wanted"])


async def checks(onb: Onboarding) -> list[tuple[str, str, str]]:
    rows = await onb.sql(
        "SELECT customer_id, wire_id, result FROM onboarding.wire_checks ORDER BY checked_at"
    )
    return [(r["customer_id"], r["wire_id"], r["result"]) for r in rows]


async def test_the_customers_own_wire_verifies_them_once(
    onb: Onboarding, pool: asyncpg.Pool, http: httpx.AsyncClient, bank: str
) -> None:
    customer = await basic_customer(onb)
    assert (customer["tier"], await wallet_tier(onb, customer["account_id"])) == ("unverified", "unverified")
    handler = handler_for(onb, http, bank)
    own = await wire(bank, AYSE["tckn"])
    event = credited(customer["wallet_id"], own)

    done = await consume(pool, handler, incoming(event))
    assert done == {"result": "verified", "customer_id": customer["id"], "tier": "verified"}
    assert await wallet_tier(onb, customer["account_id"]) == "verified"
    assert await tiers(onb, customer["id"]) == ("verified", "verified")
    assert await checks(onb) == [(customer["id"], own, "verified")]
    [stored] = await onb.sql(
        "SELECT outcome::text FROM onboarding.processed_events WHERE consumer = $1", CONSUMER_NAME
    )
    assert orjson.loads(stored["outcome"]) == done  # ids and results: no TCKN, no name

    # the same message again: nothing; the same payment under another message id, or another
    # own wire: verified already, the bank not asked, no second check
    assert await consume(pool, handler, incoming(event)) is None
    again = await consume(pool, handler, incoming(event, message_id=str(uuid.uuid4())))
    assert again == {"result": "verified-already", "customer_id": customer["id"]}
    later = await consume(
        pool, handler, incoming(credited(customer["wallet_id"], await wire(bank, AYSE["tckn"])))
    )
    assert later is not None and later["result"] == "verified-already"
    assert len(await checks(onb)) == 1
    me = await onb.http.get(
        "/v1/me", headers={"Authorization": f"Bearer {onb.token(await email_of(onb, customer))}"}
    )
    assert me.json()["tier"] == "verified"


async def email_of(onb: Onboarding, customer: asyncpg.Record) -> str:
    users = onb.idp.admin().get_users({"max": 1000})
    return str(next(u["email"] for u in users if u["id"] == customer["sub"]))


async def test_a_wire_from_someone_else_or_without_a_tckn_changes_nothing(
    onb: Onboarding, pool: asyncpg.Pool, http: httpx.AsyncClient, bank: str
) -> None:
    customer = await basic_customer(onb)
    handler = handler_for(onb, http, bank)
    other, anonymous = await wire(bank, MEHMET["tckn"]), await wire(bank, None)
    for wire_id, result in (
        (other, "other-sender"),
        (anonymous, "no-tckn"),
        ("wire_unknown0000", "wire-unknown"),
    ):
        done = await consume(pool, handler, incoming(credited(customer["wallet_id"], wire_id)))
        assert done == {"result": result, "customer_id": customer["id"]}
    assert await wallet_tier(onb, customer["account_id"]) == "unverified"
    assert [r for _, _, r in await checks(onb)] == ["other-sender", "no-tckn", "wire-unknown"]
    # the same payment again is answered from its record, the bank not asked again
    event = credited(customer["wallet_id"], other)
    await consume(pool, handler, incoming(event))
    again = await consume(pool, handler, incoming(event, message_id=str(uuid.uuid4())))
    assert again == {"result": "other-sender", "again": True, "customer_id": customer["id"]}

    # then their own: verified
    done = await consume(
        pool, handler, incoming(credited(customer["wallet_id"], await wire(bank, AYSE["tckn"])))
    )
    assert done is not None and done["result"] == "verified"
    assert await wallet_tier(onb, customer["account_id"]) == "verified"


async def test_nothing_is_checked_before_basic_verification_or_for_others(
    onb: Onboarding, pool: asyncpg.Pool, http: httpx.AsyncClient, bank: str
) -> None:
    email, auth = await onb.customer()
    # the identity verified, the consents not yet: still unknown, and a wire must not skip them
    assert (await onb.http.post("/v1/me/identity", json=AYSE, headers=auth)).status_code == 200
    customer = await customer_of(onb, email)
    # the bank is not asked: a handler whose bank does not answer shows it
    handler = handler_for(onb, http, f"http://127.0.0.1:{free_port()}")
    own = await wire(bank, AYSE["tckn"])
    done = await consume(pool, handler, incoming(credited(customer["wallet_id"], own)))
    assert done == {"result": "basic-incomplete", "customer_id": customer["id"]}
    nobody = await consume(pool, handler, incoming(credited("0042:w:nobody", own)))
    assert nobody == {"result": "not-a-customer"}
    card = await consume(pool, handler, incoming(credited(customer["wallet_id"], "pi_1", provider="stripe")))
    assert card == {"result": "not-a-wire"}
    assert await checks(onb) == []
    assert await wallet_tier(onb, customer["account_id"]) == "unknown"


async def test_the_bank_away_records_nothing_and_wallet_api_away_is_finished_by_the_sweep(
    onb: Onboarding, pool: asyncpg.Pool, http: httpx.AsyncClient, bank: str
) -> None:
    customer = await basic_customer(onb)
    proxy = FaultProxy("127.0.0.1", int(bank.rsplit(":", 1)[1]))
    await proxy.start()
    try:
        handler = handler_for(onb, http, f"http://127.0.0.1:{proxy.port}")
        event = incoming(credited(customer["wallet_id"], await wire(bank, AYSE["tckn"])))
        async with proxy.down():
            with pytest.raises(DependencyUnavailable):
                await consume(pool, handler, event)
        # rolled back: not processed, not checked; the consumer tries it again (transient)
        assert await onb.sql("SELECT 1 FROM onboarding.processed_events") == []
        assert await checks(onb) == []

        # wallet-api away: the check and the wanted tier are committed, the raise is left over
        away = handler_for(
            onb, http, f"http://127.0.0.1:{proxy.port}", wallet_api_url=f"http://127.0.0.1:{free_port()}"
        )
        done = await consume(pool, away, event)
        assert done == {"result": "verified", "customer_id": customer["id"], "tier": "pending"}
    finally:
        await proxy.close()
    assert await tiers(onb, customer["id"]) == ("unverified", "verified")
    assert await wallet_tier(onb, customer["account_id"]) == "unverified"
    run_in_service_loop(onb, onb.service.sweep())
    assert await wallet_tier(onb, customer["account_id"]) == "verified"
    assert await tiers(onb, customer["id"]) == ("verified", "verified")


async def test_the_app_consumes_the_events_exchange_and_dead_letters_poison(
    onb: Onboarding, broker: Broker, bank: str
) -> None:
    prefix = f"hwtest.{uuid.uuid4().hex[:10]}"
    wires = WiresSettings(
        bank_url=bank,
        bank_api_key=BANK_KEY,
        events_exchange=f"{prefix}.events",
        events_queue_prefix=f"{prefix}.",
        dead_letter_exchange=f"{prefix}.dead-letters",
        events_dead_letter_key=f"{prefix}.events",
        events_dead_letter_queue=f"{prefix}.events.dead",
        wires_max_attempts=2,
    )
    topology = events_topology(
        exchange=wires.events_exchange,
        queue_prefix=wires.events_queue_prefix,
        dead_letter_exchange=wires.dead_letter_exchange,
        dead_letter_key=wires.events_dead_letter_key,
        dead_letter_queue=wires.events_dead_letter_queue,
    )
    customer = await basic_customer(onb)
    app = create_onboarding_app(onb.settings, wires_settings=wires)  # with the consumer (and sweep)
    url, server, thread = serve(app, "onboarding-wires")
    try:
        async with httpx.AsyncClient(base_url=url) as client:

            async def ready() -> bool:  # the topology declared, the wires consumed (core.service)
                return (await client.get("/ready")).status_code == 200

            await until(ready, 20)
            named = (await client.get("/ready")).json()["checks"]
            assert named == {"database": "ok", "broker": "ok", "consumers": "ok", "background": "ok"}
            own = await wire(bank, AYSE["tckn"])
            event = credited(customer["wallet_id"], own)
            event = OutgoingMessage(**{**event.__dict__, "exchange": wires.events_exchange})
            await broker.publish([event])

            async def verified() -> bool:
                return await wallet_tier(onb, customer["account_id"]) == "verified"

            await until(verified, 20)
            poison = OutgoingMessage(
                message_id=str(uuid.uuid4()),
                exchange=wires.events_exchange,
                routing_key="topup.credited",
                type="TopupCredited",
                body=b'{"wallet": "x"}',
            )
            await broker.publish([poison])
            [dead] = await collect(broker, [wires.events_dead_letter_queue], 1, timeout_s=20)
            assert str(dead.headers[DEAD_REASON_HEADER]).startswith("malformed TopupCredited")
            metrics = (await client.get("/metrics")).text
            assert 'hiwallet_onboarding_wires_total{result="verified"} 1.0' in metrics
        assert await checks(onb) == [(customer["id"], own, "verified")]
        assert wires.queue == f"{prefix}.{ONBOARDING_WIRES_QUEUE}"
    finally:
        stop(server, thread)
        await broker.delete(topology)
