"""wallet-api's adapter to PostgreSQL: the named queries and the rows they return as views.

Only this module and the ledger's store touch SQL. Every query names its bucket (tests check)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import asyncpg

from hiwallet import ledger
from hiwallet.core.queries import load_queries
from hiwallet.wallet_api.domain import AccountKind, Tier

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")


@dataclass(frozen=True, slots=True)
class AccountRow:
    id: str
    bucket: int
    kind: AccountKind
    tier: Tier | None
    name: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class WalletRow:
    id: str
    bucket: int
    account_id: str
    currency: str
    number: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class WalletAccess:
    """A wallet with its account's kind and tier, and whether the caller is a member."""

    wallet: WalletRow
    kind: AccountKind
    tier: Tier | None
    member: bool


def account_row(r: asyncpg.Record) -> AccountRow:
    return AccountRow(
        id=r["id"],
        bucket=r["bucket"],
        kind=AccountKind(r["kind"]),
        tier=Tier(r["tier"]) if r["tier"] is not None else None,
        name=r["name"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
    )


def wallet_row(r: asyncpg.Record) -> WalletRow:
    return WalletRow(
        id=r["id"],
        bucket=r["bucket"],
        account_id=r["account_id"],
        currency=r["currency"],
        number=r["number"],
        created_at=r["created_at"],
    )


def wallet_access(r: asyncpg.Record, member: bool | None = None) -> WalletAccess:
    return WalletAccess(
        wallet=wallet_row(r),
        kind=AccountKind(r["kind"]),
        tier=Tier(r["tier"]) if r["tier"] is not None else None,
        member=bool(r["member"]) if member is None else member,
    )


def balance_of(row: asyncpg.Record, wallet_id: str) -> ledger.WalletBalance | None:
    """The wallet's balances from a row of ``ledger_api.wallet_purses``' two purses, as the
    ledger's WalletBalance; None when the ledger has not both of the wallet's accounts."""
    if row["cash"] is None or row["promo"] is None:
        return None
    return ledger.WalletBalance(
        wallet_id,
        row["cash_currency"],
        cash=int(row["cash"]),
        promo=int(row["promo"]),
        held=int(row["held"]),
        promo_expired=int(row["promo_expired"]),
    )


class Repo:
    """Statements on one connection (the caller's transaction) or on the pool."""

    def __init__(self, db: asyncpg.Connection | asyncpg.Pool) -> None:
        self.db = db

    async def account(self, bucket: int, account_id: str, *, for_update: bool = False) -> AccountRow | None:
        q = Q["get_account_for_update"] if for_update else Q["get_account"]
        row = await self.db.fetchrow(q, bucket, account_id)
        return account_row(row) if row else None

    async def is_member(self, bucket: int, account_id: str, issuer: str, subject: str) -> bool:
        return bool(await self.db.fetchval(Q["is_member"], bucket, account_id, issuer, subject))

    async def members_of(self, bucket: int, account_id: str) -> list[asyncpg.Record]:
        return list(await self.db.fetch(Q["members_of_account"], bucket, account_id))

    async def opened_by(self, bucket: int, account_id: str) -> str | None:
        value = await self.db.fetchval(Q["account_opened_by"], bucket, account_id)
        return None if value is None else str(value)

    async def account_of_wallet(self, bucket: int, wallet_id: str) -> str | None:
        value = await self.db.fetchval(Q["wallet_account"], bucket, wallet_id)
        return None if value is None else str(value)

    async def wallets_of(self, bucket: int, account_id: str) -> list[WalletRow]:
        return [wallet_row(r) for r in await self.db.fetch(Q["wallets_of_account"], bucket, account_id)]

    async def wallet_of(self, bucket: int, account_id: str, currency: str) -> WalletRow | None:
        row = await self.db.fetchrow(Q["wallet_of_account"], bucket, account_id, currency)
        return wallet_row(row) if row else None

    async def wallet_with_access(
        self, bucket: int, wallet_id: str, issuer: str, subject: str
    ) -> WalletAccess | None:
        row = await self.db.fetchrow(Q["wallet_with_access"], bucket, wallet_id, issuer, subject)
        return wallet_access(row) if row else None

    async def wallet_with_balance(
        self, bucket: int, wallet_id: str, issuer: str, subject: str
    ) -> tuple[WalletAccess, ledger.WalletBalance | None] | None:
        """wallet_with_access and the wallet's balances, one round trip; the balances None when
        the ledger has not both of the wallet's accounts."""
        row = await self.db.fetchrow(
            Q["wallet_with_balance"],
            bucket,
            wallet_id,
            issuer,
            subject,
            ledger.cash_account(wallet_id),
            ledger.promo_account(wallet_id),
        )
        if row is None:
            return None
        return wallet_access(row), balance_of(row, wallet_id)

    async def wallet_statement_page(
        self,
        bucket: int,
        wallet_id: str,
        issuer: str,
        subject: str,
        account: str,
        after: int,
        limit: int,
        known: list[bool],
    ) -> list[asyncpg.Record]:
        """Whether the caller is a member of the wallet's account and, for a member, ``account``'s
        lines after version ``after`` (``limit`` and one more), each with its counterparty's
        wallet unless ``known`` says the caller has it (``known[i]``: the line of version
        ``after + 1 + i``): one round trip. No row for no such wallet."""
        rows: list[asyncpg.Record] = await self.db.fetch(
            Q["wallet_statement_page"],
            bucket,
            wallet_id,
            issuer,
            subject,
            account,
            after,
            limit + 1,
            f"{wallet_id}:",
            known,
        )
        return rows

    async def wallet_statement_known(
        self,
        bucket: int,
        wallet_id: str,
        issuer: str,
        subject: str,
        account: str,
        after: int,
        limit: int,
    ) -> asyncpg.Record:
        """Whether the caller is a member of the wallet's account and, for a member, how many of
        ``account``'s lines after version ``after`` there are (``limit`` and one more at most)
        and the last one's version: one round trip, one row (member false for no such
        wallet)."""
        row: asyncpg.Record = await self.db.fetchrow(
            Q["wallet_statement_known"], bucket, wallet_id, issuer, subject, account, after, limit + 1
        )
        return row

    async def wallet_overview(
        self,
        bucket: int,
        wallet_id: str,
        issuer: str,
        subject: str,
        first: date,
        last: date,
    ) -> asyncpg.Record | None:
        """wallet_with_balance's row and, for a member, the promo account's batches and the
        cash account's balance at the end of each day from ``first`` to ``last`` (the days the
        caller does not have): one round trip."""
        row: asyncpg.Record | None = await self.db.fetchrow(
            Q["wallet_overview"],
            bucket,
            wallet_id,
            issuer,
            subject,
            ledger.cash_account(wallet_id),
            ledger.promo_account(wallet_id),
            first,
            last,
        )
        return row

    async def wallet_by_number(self, bucket: int, number: str) -> WalletAccess | None:
        row = await self.db.fetchrow(Q["wallet_by_number"], bucket, number)
        return wallet_access(row, member=False) if row else None

    async def member_wallets(
        self, buckets: list[int], wallet_ids: list[str], issuer: str, subject: str
    ) -> dict[str, AccountKind]:
        """Of these wallets, the ones whose account the caller is a member of, with its kind."""
        rows = await self.db.fetch(Q["member_of_any_wallet"], buckets, wallet_ids, issuer, subject)
        return {r["id"]: AccountKind(r["kind"]) for r in rows}

    async def personal_account_of(self, issuer: str, subject: str) -> tuple[str, int] | None:
        row = await self.db.fetchrow(Q["personal_account_of"], issuer, subject)
        return (row["account_id"], row["bucket"]) if row else None

    async def accounts_of(self, issuer: str, subject: str) -> list[tuple[str, int]]:
        rows = await self.db.fetch(Q["accounts_of_identity"], issuer, subject)
        return [(r["account_id"], r["bucket"]) for r in rows]
