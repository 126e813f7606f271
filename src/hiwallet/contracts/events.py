"""Domain events: what one service announces for whoever cares, and its topology.

``hiwallet.events`` is a topic exchange; a message's routing key names the event
(``topup.credited``) and its AMQP ``type`` is the model's name. Unlike the withdrawal saga's
commands (contracts/withdrawals.py), an event is addressed to nobody: each interested service binds
a queue of its own, by routing key (a pattern if it wants a family of events).

Every publish is mandatory (core/broker.py): an event no queue receives is refused and stays
in its outbox. So the publisher declares the whole topology too, the subscribers' queues
included, as every process of the saga declares the saga's; declaring is idempotent, and no
process depends on another having started first.

- ``TopupCredited`` (routing key ``topup.credited``): wallet-consumer, in the transaction that
  credited a bank top-up (a wire), through ``wallet.outbox``. Only the bank's: the card
  top-ups' path (1,000/s) does not pay for an event nobody reads. It carries ids and the
  amount, no personal data: a subscriber that needs the sender asks the bank itself. Its
  ``event_id`` (= the message id) is derived from the payment, so however often the payment is
  reported it names one event, and subscribers deduplicate by it.
- Queue ``hiwallet.onboarding.wires`` (quorum, a delivery limit, dead letters to
  ``hiwallet.events.dead``): onboarding's, bound to ``topup.credited`` (the first wire from the
  customer's own account raises the tier to verified).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import orjson
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, StrictStr

from hiwallet.contracts.topups import DEAD_LETTER_EXCHANGE
from hiwallet.core.broker import (
    DELIVERY_LIMIT,
    ExchangeSpec,
    OutgoingMessage,
    QueueSpec,
    Topology,
    dead_letter_topology,
)
from hiwallet.core.ids import derived_id

__all__ = [
    "EVENTS_DEAD_LETTER_KEY",
    "EVENTS_DEAD_LETTER_QUEUE",
    "EVENTS_EXCHANGE",
    "ONBOARDING_WIRES_QUEUE",
    "SETTLEMENT_REPORTED",
    "SUBSCRIPTIONS",
    "TOPUP_CREDITED",
    "WALLET_SETTLEMENTS_QUEUE",
    "TopupCredited",
    "events_topology",
    "topup_credited",
    "topup_credited_id",
]

EVENTS_EXCHANGE = "hiwallet.events"
EVENTS_DEAD_LETTER_KEY = "hiwallet.events"
EVENTS_DEAD_LETTER_QUEUE = "hiwallet.events.dead"
ONBOARDING_WIRES_QUEUE = "hiwallet.onboarding.wires"
TOPUP_CREDITED = "topup.credited"
# A provider's payout, reported by the service that owns its connection (contracts/settlements.py),
# posted by wallet-consumer from its own queue.
SETTLEMENT_REPORTED = "settlement.reported"
WALLET_SETTLEMENTS_QUEUE = "hiwallet.wallet.settlements"

# queue -> the routing keys (topic patterns) it is bound with
SUBSCRIPTIONS: dict[str, tuple[str, ...]] = {
    ONBOARDING_WIRES_QUEUE: (TOPUP_CREDITED,),
    WALLET_SETTLEMENTS_QUEUE: (SETTLEMENT_REPORTED,),
}

_ID = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9:_.\-|]+$")]


class TopupCredited(BaseModel):
    """A top-up credited to a wallet. ``provider_payment_id`` is the provider's id of the payment
    (the bank's wire id); ``credited_at`` the ledger transaction's time."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    event_id: _ID
    payment_id: _ID
    provider: Annotated[StrictStr, Field(pattern=r"^[a-z][a-z0-9_\-]{0,30}$")]
    provider_payment_id: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    wallet: _ID
    amount_minor: Annotated[StrictInt, Field(gt=0, le=10**15)]
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    credited_at: AwareDatetime


def topup_credited_id(payment_id: str) -> str:
    """The event's id for a payment: the same every time (one payment, one event)."""
    return derived_id("topup-credited", payment_id)


def topup_credited(
    *,
    payment_id: str,
    provider: str,
    provider_payment_id: str,
    wallet: str,
    amount_minor: int,
    currency: str,
    credited_at: datetime,
    exchange: str = EVENTS_EXCHANGE,
) -> OutgoingMessage:
    """The ``TopupCredited`` message for the outbox (core.outbox.enqueue)."""
    event = TopupCredited(
        event_id=topup_credited_id(payment_id),
        payment_id=payment_id,
        provider=provider,
        provider_payment_id=provider_payment_id,
        wallet=wallet,
        amount_minor=amount_minor,
        currency=currency,
        credited_at=credited_at,
    )
    return OutgoingMessage(
        message_id=event.event_id,
        exchange=exchange,
        routing_key=TOPUP_CREDITED,
        type=TopupCredited.__name__,
        body=orjson.dumps(event.model_dump(mode="json")),
    )


def events_topology(
    *,
    exchange: str = EVENTS_EXCHANGE,
    queue_prefix: str = "",
    dead_letter_exchange: str = DEAD_LETTER_EXCHANGE,
    dead_letter_key: str = EVENTS_DEAD_LETTER_KEY,
    dead_letter_queue: str = EVENTS_DEAD_LETTER_QUEUE,
) -> Topology:
    """``hiwallet.events`` (topic), every subscriber's queue (quorum, a delivery limit, dead
    letters) bound by its routing keys, and the dead letters. ``queue_prefix`` renames the
    subscribers' queues (tests, and processes started by them: never the real names)."""
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": DELIVERY_LIMIT,
        "x-dead-letter-exchange": dead_letter_exchange,
        "x-dead-letter-routing-key": dead_letter_key,
    }
    queues = tuple(
        QueueSpec(queue_prefix + queue, dict(arguments), tuple((exchange, key) for key in keys))
        for queue, keys in SUBSCRIPTIONS.items()
    )
    own = Topology(exchanges=(ExchangeSpec(exchange, "topic"),), queues=queues)
    return own + dead_letter_topology(dead_letter_exchange, dead_letter_queue, dead_letter_key)
