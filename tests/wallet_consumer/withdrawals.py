"""Helpers of the withdrawal commands' tests: wallets with wallet-api's records (account, member,
wallet), the commands' bodies as the orchestrator publishes them, and the consumer's
transaction without the broker."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from hiwallet.contracts.withdrawals import command_id
from hiwallet.core.consumer import IncomingMessage
from hiwallet.core.ids import new_id
from hiwallet.ledger import Ledger, Role
from hiwallet.wallet_consumer import WITHDRAWALS_CONSUMER_NAME, WithdrawalHandler, WithdrawalLimits
from tests.wallet_consumer.conftest import TL

ISSUER = "http://127.0.0.1:8080/realms/hiwallet"
LIMITS = WithdrawalLimits(verified_minor=1_000 * TL, contracted_minor=5_000 * TL)
FEE = 2 * TL  # tests/wallet_consumer/conftest.py FEES: the withdrawal's fixed fee


@dataclass(frozen=True)
class Holder:
    wallet: str
    account: str
    bucket: int
    subject: str


async def holder(
    ledger: Ledger,
    *,
    bucket: int,
    funded: int = 0,
    kind: str = "personal",
    tier: str | None = "verified",
    currency: str = "TRY",
    subject: str | None = None,
) -> Holder:
    """A wallet opened by the ledger, with wallet-api's records of its account (kind, tier),
    one member (``subject``) and the wallet; ``funded`` topped up. ``ledger`` is wallet-api's
    (the conftest's ``ledger``): its role opens wallets and writes their records."""
    subject = subject or f"user-{secrets.token_hex(4)}"
    wallet = (await ledger.open_wallet("holder", currency, bucket=bucket)).wallet_id
    account = f"{bucket:04d}:a:{new_id()}"
    async with ledger.unit_of_work() as conn:
        await conn.execute(
            "INSERT INTO wallet.accounts (bucket, id, kind, tier, name, opened_by, created_at, updated_at)"
            " VALUES ($1, $2, $3, $4, $5, 'test', now(), now())",
            bucket,
            account,
            kind,
            tier if kind == "personal" else None,
            "Acme" if kind == "business" else None,
        )
        await conn.execute(
            "INSERT INTO wallet.members (bucket, account_id, issuer, subject, added_by, created_at)"
            " VALUES ($1, $2, $3, $4, 'test', now())",
            bucket,
            account,
            ISSUER,
            subject,
        )
        await conn.execute(
            "INSERT INTO wallet.wallets (bucket, id, account_id, currency, number, created_at)"
            " VALUES ($1, $2, $3, $4, $5, now())",
            bucket,
            wallet,
            account,
            currency,
            f"{bucket:04d}{secrets.randbelow(10**12):012d}",
        )
    if funded:
        await ledger.topup(new_id(), wallet, funded, currency, provider="stripe", actor="test", ref="funding")
    return Holder(wallet, account, bucket, subject)


def debit_body(
    who: Holder,
    amount: int,
    *,
    saga: str | None = None,
    currency: str = "TRY",
    subject: str | None = None,
    wallet: str | None = None,
) -> dict[str, Any]:
    saga = saga or new_id()
    return {
        "command_id": command_id(saga, "debit"),
        "saga_id": saga,
        "wallet": wallet or who.wallet,
        "amount_minor": amount,
        "currency": currency,
        "requested_by": {"issuer": ISSUER, "subject": subject or who.subject},
    }


def settle_body(debit: Mapping[str, Any], transaction_id: str, **changes: Any) -> dict[str, Any]:
    return {
        "command_id": command_id(debit["saga_id"], "settle"),
        "saga_id": debit["saga_id"],
        "wallet": debit["wallet"],
        "amount_minor": debit["amount_minor"],
        "currency": debit["currency"],
        "debit_transaction_id": transaction_id,
        **changes,
    }


def refund_body(debit: Mapping[str, Any], transaction_id: str, actor: str = "system") -> dict[str, Any]:
    return {
        "command_id": command_id(debit["saga_id"], "refund"),
        "saga_id": debit["saga_id"],
        "wallet": debit["wallet"],
        "debit_transaction_id": transaction_id,
        "actor": actor,
    }


def command(kind: str, body: Any, *, message_id: str | None = None) -> IncomingMessage:
    """As it comes off the wire: type and routing key are the command's name."""
    return IncomingMessage(
        message_id=message_id or new_id(),
        type=kind,
        routing_key=kind,
        body=orjson.loads(orjson.dumps(body)),
        headers={},
        redelivered=False,
        delivery_count=0,
        correlation_id=body.get("saga_id") if isinstance(body, dict) else None,
    )


async def consume(
    pool: asyncpg.Pool, handler: WithdrawalHandler, msg: IncomingMessage
) -> Mapping[str, Any] | None:
    """What core.consumer.Consumer does with one message (its claim in processed_events, the
    handler, the outcome) in one transaction. None for a repeat of the message id."""
    async with pool.acquire() as conn, conn.transaction():
        new = await conn.fetchval(
            "INSERT INTO processed_events (consumer, message_id) VALUES ($1, $2)"
            " ON CONFLICT DO NOTHING RETURNING true",
            WITHDRAWALS_CONSUMER_NAME,
            msg.message_id,
        )
        if not new:
            return None
        outcome = await handler(conn, msg)
        await conn.execute(
            "UPDATE processed_events SET outcome = $3 WHERE consumer = $1 AND message_id = $2",
            WITHDRAWALS_CONSUMER_NAME,
            msg.message_id,
            dict(outcome),
        )
        return outcome


async def outbox(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(
        await pool.fetch(
            "SELECT message_id, exchange, routing_key, message_type, headers, body"
            " FROM wallet.outbox ORDER BY id"
        )
    )


async def bank_clearing(ledger: Ledger, bucket: int | None = None) -> int:
    """The bank's clearing: one bucket's sub-account, or all of them with the central one."""
    if bucket is None:
        return await ledger.store.system_balance(Role.CLEARING, "TRY", "bank")
    return (await ledger.store.account(f"{bucket:04d}:sys:clearing:bank:TRY")).balance


async def nostro(ledger: Ledger) -> int:
    return (await ledger.store.account("0000:sys:nostro:TRY")).balance


async def revenue(ledger: Ledger) -> int:
    return await ledger.store.system_balance(Role.REVENUE, "TRY")


async def withdrawal_used(pool: asyncpg.Pool, who: Holder) -> int:
    return int(
        await pool.fetchval(
            "SELECT coalesce(sum(used), 0) FROM wallet.limit_usage WHERE bucket = $1 AND account_id = $2"
            " AND kind = 'withdrawal'",
            who.bucket,
            who.account,
        )
    )
