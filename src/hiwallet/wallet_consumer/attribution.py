"""An operator's attribution of an unattributed top-up to a wallet (``hiwallet topups
attribute``): credited once, through the ledger under the payment's key, and the row marked, in
one transaction; a second attribution is refused, whoever asks. A wire (the bank's top-up)
announces its credit (``TopupCredited``) in that transaction too, as the consumer's credit does."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from hiwallet.contracts.events import EVENTS_EXCHANGE
from hiwallet.core.text import has_control_characters
from hiwallet.ledger import Ledger
from hiwallet.wallet_consumer.handler import ANNOUNCED_PROVIDER, announce
from hiwallet.wallet_consumer.topups import (
    MAX_OPERATOR,
    Q,
    Unattributed,
    UnattributedTopup,
    credited_under_key,
    why_not_creditable,
)

log = structlog.get_logger(__name__)


class AttributionRefused(Exception):
    """Nothing was credited or marked. ``code`` is stable."""

    code = "refused"


class NoSuchTopup(AttributionRefused):
    code = "not-unattributed"


class AlreadyAttributed(AttributionRefused):
    code = "already-attributed"

    def __init__(self, message: str, topup: UnattributedTopup) -> None:
        super().__init__(message)
        self.topup = topup


class CreditedElsewhere(AttributionRefused):
    """The ledger has a top-up under this payment's key already (a message credited it)."""

    code = "credited-already"


class NotCreditable(AttributionRefused):
    code = "wallet-not-creditable"

    def __init__(self, message: str, reason: Unattributed) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Attribution:
    topup: UnattributedTopup
    wallet: str
    transaction_id: str


def operator_actor(operator: str) -> str:
    name = operator.strip()
    if not name or len(name) > MAX_OPERATOR or has_control_characters(name):
        raise AttributionRefused(f"the operator's name must be 1..{MAX_OPERATOR} printable characters")
    return f"operator:{name}"


async def attribute(
    ledger: Ledger, payment_id: str, wallet: str, *, operator: str, events_exchange: str = EVENTS_EXCHANGE
) -> Attribution:
    """Credit the unattributed top-up ``payment_id`` to ``wallet`` and mark it attributed by
    ``operator``, all or nothing. Refused (:class:`AttributionRefused`) when there is no such
    top-up, it is attributed already, the ledger has it credited, or the wallet cannot take it;
    a ledger refusal is raised as the ledger's error, :class:`LedgerUnavailable` included."""
    actor = operator_actor(operator)
    async with ledger.unit_of_work() as conn:
        row = await conn.fetchrow(Q["lock_unattributed"], payment_id)
        if row is None:
            raise NoSuchTopup(f"no unattributed top-up {payment_id[:100]}")
        topup = UnattributedTopup.of(row)
        if topup.attributed:
            raise AlreadyAttributed(
                f"top-up {payment_id} was attributed already, to {topup.attributed_wallet}", topup
            )
        credited = await credited_under_key(conn, payment_id)
        if credited is not None:
            raise CreditedElsewhere(f"the ledger has top-up {payment_id} credited already ({credited})")
        reason = await why_not_creditable(conn, wallet, topup.currency)
        if reason is not None:
            raise NotCreditable(f"wallet {wallet[:100]} cannot take this top-up: {reason.value}", reason)
        posted = await ledger.topup(
            payment_id,
            wallet,
            topup.amount_minor,
            topup.currency,
            provider=topup.provider,
            actor=actor,
            ref=topup.provider_payment_id,
            conn=conn,
        )
        await conn.execute(Q["mark_attributed"], payment_id, wallet, actor)
        if topup.provider == ANNOUNCED_PROVIDER:
            await announce(conn, topup, wallet, posted, exchange=events_exchange)
    log.info("top-up attributed", payment_id=payment_id, transaction_id=posted.id)
    return Attribution(topup=topup, wallet=wallet, transaction_id=posted.id)
