"""The first wire from the customer's own bank account -> Verified (docs/events.md).

wallet-consumer announces every credited wire (``TopupCredited``, contracts/events.py) on
``hiwallet.events``; this consumer takes them from ``hiwallet.onboarding.wires`` (core's
Consumer: each message's effect and its ``onboarding.processed_events`` row in one transaction,
a repeat acked without a second effect). For a wire credited to the TRY wallet of one of
onboarding's customers whose basic verification is done (tier unverified: phone, identity,
consents) and who is not verified yet:

1. ask the bank for the wire (``GET /v1/incoming-wires/{id}``, onboarding's own API key): the
   event carries ids only, the bank's record carries the sender's identity number, as Turkish
   banks' notifications do;
2. keyed-hash the sender's TCKN (the same HMAC as the customer's, core of onboarding/crypto.py)
   and compare it with the customer's ``tckn_hash``;
3. equal: record the check (``onboarding.wire_checks``, result ``verified``; a unique index
   lets one wire per customer verify), want tier ``verified`` and raise it in wallet-api
   through the same client the registration uses (``WalletApi.raise_tier``), once.

Anything else changes nothing, and is recorded as such: a wire from someone else
(``other-sender``), without a TCKN (``no-tckn``), one the bank does not know
(``wire-unknown``) in ``wire_checks``; a wallet that is no customer's, a customer already
verified or not through basic verification yet, a provider other than the bank, in the
message's stored outcome. Basic verification first, because Verified sits above Unverified on
the tiers' ladder (docs/architecture.md): a wire must not let a customer skip the consents.

What fails, and what happens:

- the bank unreachable or answering 5xx (:class:`DependencyUnavailable`): transient for the
  consumer, which pauses and tries the same message again with a capped back-off; never
  dead-lettered for it;
- wallet-api unreachable: the check and the wanted tier are committed anyway (``tier_wanted``
  above ``tier``), and onboarding's sweep raises it when wallet-api answers, as after any
  failed raise; the message is done;
- anything unexpected (a malformed event, a 4xx from the bank or wallet-api): the consumer's
  bounded attempts, then the dead letter (``hiwallet.events.dead``), replayable once fixed.

The two HTTP calls run inside the consumer's transaction, holding one connection and the
customer's row lock for at most their timeouts: wires are a handful a minute, and the lock is
what makes two wires of one customer at once verify once.

No personal data in a log line, a metric label or the stored outcome: ids and results only.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import structlog
from prometheus_client import CollectorRegistry, Counter
from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from stdnum.exceptions import ValidationError as NumberInvalid
from stdnum.tr import tckimlik

from hiwallet.contracts.events import (
    EVENTS_DEAD_LETTER_KEY,
    EVENTS_DEAD_LETTER_QUEUE,
    EVENTS_EXCHANGE,
    ONBOARDING_WIRES_QUEUE,
    TopupCredited,
    events_topology,
)
from hiwallet.contracts.topups import DEAD_LETTER_EXCHANGE
from hiwallet.core.broker import Broker, Topology
from hiwallet.core.consumer import Consumer, ConsumerMetrics, IncomingMessage, Unprocessable
from hiwallet.onboarding.clients import DependencyUnavailable, UnexpectedAnswer, WalletApi
from hiwallet.onboarding.crypto import Hasher
from hiwallet.onboarding.store import TIERS, Q, customer_by_wallet, rank, record_tier

__all__ = [
    "CONSUMER_NAME",
    "BankWires",
    "WireHandler",
    "WiresSettings",
    "declared_topology",
    "wires_consumer",
    "wires_topology",
]

log = structlog.get_logger(__name__)

CONSUMER_NAME = "onboarding-wires"
PROCESSED_TABLE = "onboarding.processed_events"
VERIFIED = "verified"
# Basic verification done: what a customer must have before a wire may verify them.
BASIC = "unverified"
WIRE_PROVIDER = "bank"

_CHECK = """\
INSERT INTO onboarding.wire_checks (payment_id, customer_id, wire_id, result)
VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING result"""
_CHECK_OF = "SELECT result FROM onboarding.wire_checks WHERE payment_id = $1"
_LOCK_CUSTOMER = "SELECT * FROM onboarding.customers WHERE id = $1 FOR UPDATE"


class WiresSettings(BaseSettings):
    """The wires consumer's part of ``HIWALLET_ONBOARDING_*`` (kept beside its code)."""

    model_config = SettingsConfigDict(env_prefix="HIWALLET_ONBOARDING_", extra="ignore")

    # Off: onboarding runs without a broker (the wires wait in their queue).
    wires_enabled: bool = True
    # The bank's API (bank-fake locally), with onboarding's own key.
    bank_url: str = "http://127.0.0.1:8094"
    bank_api_key: SecretStr = SecretStr("bank_dev_key")
    bank_timeout_s: float = 5.0
    # contracts.events' topology; the prefix renames its queues (tests and processes started by
    # them: never the real names).
    events_exchange: str = EVENTS_EXCHANGE
    events_queue_prefix: str = ""
    dead_letter_exchange: str = DEAD_LETTER_EXCHANGE
    events_dead_letter_key: str = EVENTS_DEAD_LETTER_KEY
    events_dead_letter_queue: str = EVENTS_DEAD_LETTER_QUEUE
    # Wires handled at once (each its own transaction; the customer's row lock orders two of
    # one customer), and attempts of a failing one before its dead letter.
    wires_concurrency: int = 4
    wires_max_attempts: int = 5
    # At stop: how long the wires in hand may take to finish (else given back and redelivered:
    # their processed_events rows make that harmless).
    stop_timeout_s: float = 15.0

    @property
    def queue(self) -> str:
        return self.events_queue_prefix + ONBOARDING_WIRES_QUEUE


class BankWires:
    """The bank's incoming wires (``GET /v1/incoming-wires/{id}``): the sender's identity
    number of one wire."""

    def __init__(self, client: httpx.AsyncClient, settings: WiresSettings) -> None:
        self._client = client
        self._settings = settings

    async def sender_tckn(self, wire_id: str) -> tuple[bool, str | None]:
        """(whether the bank knows the wire, the sender's TCKN or None)."""
        url = f"{self._settings.bank_url.rstrip('/')}/v1/incoming-wires/{wire_id}"
        try:
            response = await self._client.get(
                url,
                headers={"authorization": f"Bearer {self._settings.bank_api_key.get_secret_value()}"},
                timeout=self._settings.bank_timeout_s,
            )
        except httpx.HTTPError as exc:
            raise DependencyUnavailable("bank", type(exc).__name__) from exc
        if response.status_code >= 500:
            raise DependencyUnavailable("bank", f"status {response.status_code}")
        if response.status_code == 404:
            return False, None
        if response.status_code != 200:
            raise UnexpectedAnswer(f"the bank's wire answered {response.status_code}")
        tckn = response.json().get("sender_tckn")
        return True, tckn if isinstance(tckn, str) and tckn else None


@dataclass(frozen=True)
class WireMetrics:
    checked: Counter

    @classmethod
    def of(cls, registry: CollectorRegistry) -> WireMetrics:
        return cls(
            Counter(
                "hiwallet_onboarding_wires",
                "Credited wires handled by onboarding, by result (verified, other-sender, ...)",
                ["result"],
                registry=registry,
            )
        )


def parse(message: IncomingMessage) -> TopupCredited:
    if message.type != TopupCredited.__name__:
        raise Unprocessable(f"unknown message type {message.type[:60]!r}")
    try:
        return TopupCredited.model_validate(message.body)
    except ValidationError as exc:
        fields = sorted({f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['type']}" for e in exc.errors()})
        raise Unprocessable(f"malformed TopupCredited ({'; '.join(fields)[:300]})") from None


def same_person(hasher: Hasher, sender_tckn: str, tckn_hash: bytes) -> bool:
    """Whether the sender's TCKN is the one whose keyed hash the customer has (in constant
    time). The bank's number is compacted first, as onboarding's own is before hashing."""
    try:
        number = str(tckimlik.compact(sender_tckn))
    except NumberInvalid:
        return False
    return hmac.compare_digest(hasher.tckn(number), bytes(tckn_hash))


class WireHandler:
    """``core.consumer.Handler`` of ``TopupCredited``: ``await handler(conn, message)`` in the
    consumer's transaction, answering the outcome stored with the message."""

    def __init__(
        self,
        bank: BankWires,
        wallet_api: WalletApi,
        hasher: Hasher,
        metrics: WireMetrics | None = None,
    ) -> None:
        self.bank = bank
        self.wallet_api = wallet_api
        self.hasher = hasher
        self.metrics = metrics

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        done = await self.handle(conn, parse(message))
        if self.metrics is not None:
            self.metrics.checked.labels(done["result"]).inc()
        log.info("wire handled", payment_id=message.body.get("payment_id"), **done)
        return done

    async def handle(self, conn: asyncpg.Connection, event: TopupCredited) -> dict[str, Any]:
        if event.provider != WIRE_PROVIDER:
            return {"result": "not-a-wire"}
        found = await customer_by_wallet(conn, event.wallet)
        if found is None:
            return {"result": "not-a-customer"}
        customer = await conn.fetchrow(_LOCK_CUSTOMER, found["id"])  # two wires at once: one verifies
        ids = {"customer_id": customer["id"]}
        if rank(customer["tier_wanted"]) >= rank(VERIFIED):
            return {"result": "verified-already", **ids}
        if rank(customer["tier_wanted"]) < rank(BASIC) or customer["tckn_hash"] is None:
            return {"result": "basic-incomplete", **ids}
        checked = await conn.fetchval(_CHECK_OF, event.payment_id)
        if checked is not None:  # checked before (another message of the same payment)
            return {"result": checked, "again": True, **ids}
        known, sender = await self.bank.sender_tckn(event.provider_payment_id)
        if not known:
            result = "wire-unknown"
        elif sender is None:
            result = "no-tckn"
        elif not same_person(self.hasher, sender, customer["tckn_hash"]):
            result = "other-sender"
        else:
            result = VERIFIED
        await conn.fetchval(_CHECK, event.payment_id, customer["id"], event.provider_payment_id, result)
        if result != VERIFIED:
            return {"result": result, **ids}
        return {"result": result, **ids, "tier": await self._raise(conn, customer)}

    async def _raise(self, conn: asyncpg.Connection, customer: asyncpg.Record) -> str:
        """Want verified, and tell wallet-api; its answer recorded. wallet-api unreachable: the
        wanted tier stays above the tier set, and onboarding's sweep finishes it."""
        await conn.execute(Q["want_tier"], customer["id"], VERIFIED, TIERS)
        try:
            tier = await self.wallet_api.raise_tier(customer["account_id"], VERIFIED)
        except DependencyUnavailable as exc:
            log.warning(
                "tier raise deferred: wallet-api unavailable",
                customer_id=customer["id"],
                tier=VERIFIED,
                error=str(exc),
            )
            return "pending"
        await record_tier(conn, customer["id"], tier)
        log.info("tier raised by the first own wire", customer_id=customer["id"], tier=tier)
        return tier


def wires_topology(settings: WiresSettings) -> Topology:
    """What onboarding declares for its consumer: contracts.events' topology under the
    settings' names (idempotent: wallet-consumer declares it too)."""
    return events_topology(
        exchange=settings.events_exchange,
        queue_prefix=settings.events_queue_prefix,
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_key=settings.events_dead_letter_key,
        dead_letter_queue=settings.events_dead_letter_queue,
    )


def declared_topology() -> Topology:
    """What onboarding declares with the environment's settings (the deployment registry):
    nothing when the wires consumer is off."""
    wires = WiresSettings()
    return wires_topology(wires) if wires.wires_enabled else Topology((), ())


def wires_consumer(
    *,
    broker: Broker,
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    wallet_api: WalletApi,
    hasher: Hasher,
    registry: CollectorRegistry,
    settings: WiresSettings,
) -> Consumer:
    """core's Consumer of the wires' queue (run and stopped by the onboarding app's builder,
    core.service: it consumes once the topology is declared; at stop it takes no new message
    and finishes the ones in hand, their transactions committed or given back)."""
    return Consumer(
        broker=broker,
        pool=pool,
        queues=[settings.queue],
        consumer_name=CONSUMER_NAME,
        handler=WireHandler(BankWires(http, settings), wallet_api, hasher, WireMetrics.of(registry)),
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_key=settings.events_dead_letter_key,
        max_attempts=settings.wires_max_attempts,
        # the bank away: not the message's fault; paused and tried again, never dead
        transient_errors=(DependencyUnavailable,),
        metrics=ConsumerMetrics(registry),
        table=PROCESSED_TABLE,
        prefetch=settings.wires_concurrency,
        concurrency=settings.wires_concurrency,
    )
