"""Top-ups as wallet-consumer sees them: the ``TopupRecorded`` message's body, where a top-up
may be credited (a wallet that exists, is open and holds its currency), the top-ups that could
not be (``wallet.unattributed_topups``), and an operator's attribution of one to a wallet.

Every ledger write goes through the ledger's declared API (``hiwallet.ledger``), under the
ledger key ``payment_id``: whatever route reported a payment and however often, one ledger
transaction. That key makes a repeat a replay within one bucket (a transaction's id is its
home bucket and its key); across wallets - hence buckets - the unattributed row is the guard:
a payment that has one is credited only by its attribution, once (a trigger refuses changing
an attribution, migrations/wallet/0010).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import asyncpg
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, StrictStr

from hiwallet.core.queries import load_queries
from hiwallet.core.text import PRINTABLE_TEXT_PATTERN
from hiwallet.ledger import (
    BUCKETS,
    MAX_AMOUNT_MINOR,
    MAX_KEY,
    MAX_TEXT,
    cash_account,
)

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")

MESSAGE_TYPE = "TopupRecorded"
# wallet-consumer's outbox: the withdrawal saga's responses and the credited wires' events.
OUTBOX_TABLE = "wallet.outbox"
# A wallet id as the ledger makes them (ledger.new_wallet_id): a customer bucket, ":w:", an id.
_WALLET_ID = re.compile(r"^(\d{4}):w:[A-Za-z0-9\-]{1,64}$")
_KEY_PATTERN = r"^[A-Za-z0-9:_.\-]+$"  # the ledger's key alphabet (the payment id is the key)
_PROVIDER_PATTERN = r"^[a-z][a-z0-9_\-]{0,30}$"  # the ledger's clearing provider names
MAX_REFERENCE = 500
MAX_OPERATOR = 100

PrintableText = Annotated[StrictStr, Field(pattern=PRINTABLE_TEXT_PATTERN)]


class TopupRecorded(BaseModel):
    """The body of ``TopupRecorded`` (CONTRACT-10), checked as the ledger will check it, so a
    body the ledger would refuse is refused here with its field. ``wallet`` is kept as text: a
    malformed reference is the payer's mistake, not the message's (an unattributed top-up)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    payment_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_KEY, pattern=_KEY_PATTERN)]
    provider: Annotated[StrictStr, Field(pattern=_PROVIDER_PATTERN)]
    provider_payment_id: Annotated[PrintableText, Field(max_length=MAX_TEXT)]
    wallet: Annotated[StrictStr, Field(max_length=MAX_REFERENCE)] | None
    reference: Annotated[StrictStr, Field(max_length=MAX_REFERENCE)] | None = None
    amount_minor: Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT_MINOR)]
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    recorded_at: AwareDatetime
    route: Literal["webhook", "reconciliation", "operator"]

    @property
    def actor(self) -> str:
        return f"topup-webhook:{self.provider}"


class Unattributed(StrEnum):
    """Why a top-up was not credited (``wallet.unattributed_topups.reason``)."""

    NO_REFERENCE = "no-reference"
    MALFORMED_REFERENCE = "malformed-reference"
    UNKNOWN_WALLET = "unknown-wallet"
    CLOSED_WALLET = "closed-wallet"
    CURRENCY_MISMATCH = "currency-mismatch"


def wallet_bucket(wallet: str) -> int | None:
    """The wallet's bucket if ``wallet`` is shaped as a wallet id, else None."""
    match = _WALLET_ID.match(wallet)
    if match is None or not 1 <= int(match[1]) < BUCKETS:
        return None
    return int(match[1])


async def why_not_creditable(
    conn: asyncpg.Connection, wallet: str | None, currency: str
) -> Unattributed | None:
    """None if a top-up of ``currency`` may be credited to ``wallet``, else why not."""
    if wallet is None or not wallet.strip():
        return Unattributed.NO_REFERENCE
    bucket = wallet_bucket(wallet)
    if bucket is None:
        return Unattributed.MALFORMED_REFERENCE
    row = await conn.fetchrow(Q["wallet_state"], bucket, wallet, cash_account(wallet))
    if row is None:
        return Unattributed.UNKNOWN_WALLET
    if row["closed_at"] is not None:
        return Unattributed.CLOSED_WALLET
    if row["currency"] != currency:
        return Unattributed.CURRENCY_MISMATCH
    return None


@dataclass(frozen=True)
class UnattributedTopup:
    payment_id: str
    provider: str
    provider_payment_id: str
    reference: str | None
    amount_minor: int
    currency: str
    reason: str
    created_at: datetime
    attributed_wallet: str | None
    attributed_by: str | None
    attributed_at: datetime | None

    @classmethod
    def of(cls, row: asyncpg.Record) -> UnattributedTopup:
        return cls(**dict(row))

    @property
    def attributed(self) -> bool:
        return self.attributed_wallet is not None


async def record_unattributed(conn: asyncpg.Connection, body: TopupRecorded, reason: Unattributed) -> bool:
    """Store the top-up as unattributed; False if its payment has a row already."""
    # The reference as the notification gave it, else the wallet text that was not a wallet.
    reference = body.reference if body.reference is not None else body.wallet
    status = await conn.execute(
        Q["insert_unattributed"],
        body.payment_id,
        body.provider,
        body.provider_payment_id,
        reference,
        body.amount_minor,
        body.currency,
        reason.value,
    )
    return bool(status == "INSERT 0 1")


async def credited_under_key(conn: asyncpg.Connection, payment_id: str) -> str | None:
    """The id of a ledger transaction under the payment's key, in any bucket: the payment was
    credited to some wallet already (by an earlier message). Rare path: one probe a bucket."""
    row = await conn.fetchrow(Q["credited_under_key"], payment_id, BUCKETS)
    return None if row is None else str(row["id"])


async def unattributed_of(conn: asyncpg.Connection, payment_id: str) -> UnattributedTopup | None:
    row = await conn.fetchrow(Q["unattributed_of_payment"], payment_id)
    return None if row is None else UnattributedTopup.of(row)


async def list_unattributed(
    pool: asyncpg.Pool, *, include_attributed: bool = False, limit: int = 100
) -> list[UnattributedTopup]:
    if not 1 <= limit <= 1000:
        raise ValueError("limit must be 1..1000")
    rows = await pool.fetch(Q["list_all" if include_attributed else "list_open"], limit)
    return [UnattributedTopup.of(r) for r in rows]


async def count_unattributed(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval(Q["count_unattributed"]))


def outcome(result: str, **fields: Any) -> dict[str, Any]:
    """A handled message's outcome (stored in processed_events): what happened, ids only."""
    return {"result": result, **fields}
