"""Accounts, their members and wallets: opening them, raising a tier, and reading them."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

import asyncpg

from hiwallet import ledger
from hiwallet.core.ids import new_id
from hiwallet.wallet_api import domain, errors
from hiwallet.wallet_api.access import (
    check_currency,
    own_account,
    own_wallet,
    own_wallet_balance,
    require_onboarding,
)
from hiwallet.wallet_api.adapters import Q, Repo, WalletRow, balance_of, wallet_row
from hiwallet.wallet_api.domain import AccountKind, Caller, Tier
from hiwallet.wallet_api.parties import ClosedDays, LineParty, StatementLine, StatementLines
from hiwallet.wallet_api.retry import answered, in_transaction
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.views import JSON, account_view, ts, wallet_ref

WALLET_NUMBER_ATTEMPTS = 5  # a new number after a (rare) collision


class _AlreadyOpen(Exception):
    """The person's personal account was opened by a concurrent request."""


def _number_taken(exc: Exception) -> bool:
    return isinstance(exc, asyncpg.UniqueViolationError) and exc.constraint_name == "wallets_number_unique"


class Accounts:
    def __init__(self, pool: asyncpg.Pool, the_ledger: ledger.Ledger, settings: WalletApiSettings) -> None:
        self.pool = pool
        self.ledger = the_ledger
        self.settings = settings
        self.statement_lines = StatementLines(settings.statement_party_cache_size)
        self.closed_days = ClosedDays(settings.overview_day_cache_size)

    async def open_personal(self, caller: Caller, subject: str) -> tuple[JSON, bool]:
        """Onboarding opens a personal account for the customer ``subject`` (of the customer
        realm), who becomes its member; with a TRY wallet. At most one per person: opening it
        again answers the existing account (False: not created now)."""
        require_onboarding(self.settings, caller)
        issuer = self.settings.customer_issuer
        existing = await Repo(self.pool).personal_account_of(issuer, subject)
        if existing is not None:
            return await self._account_as_is(*existing), False
        account_id = await self._open_account(
            kind=AccountKind.PERSONAL,
            tier=Tier.UNKNOWN,
            name=None,
            opened_by=caller.actor,
            members=[(issuer, subject)],
        )
        if account_id is None:  # another request opened it at the same moment
            found = await Repo(self.pool).personal_account_of(issuer, subject)
            if found is None:
                raise AssertionError("a personal account opened concurrently is not found")
            return await self._account_as_is(*found), False
        return await self._account_as_is(account_id, domain.bucket_in(account_id)), True

    async def open_business(self, name: str, *, operator: str) -> JSON:
        """An operator (``hiwallet business open``) or an employee opens a business account, with a
        TRY wallet; ``operator`` is who, as the ledger names actors."""
        ledger.check_text(name, "name")
        account_id = await self._open_account(
            kind=AccountKind.BUSINESS, tier=None, name=name, opened_by=operator, members=[]
        )
        if account_id is None:  # only a person's account can exist already
            raise AssertionError("a business account without members collided")
        return await self._account_as_is(account_id, domain.bucket_in(account_id))

    async def link(self, account_id: str, issuer: str, subject: str, *, operator: str) -> JSON:
        """An operator makes an identity (a merchant integration's service account) a member."""
        bucket = domain.bucket_in(account_id)

        async def work(conn: asyncpg.Connection) -> None:
            account = await Repo(conn).account(bucket, account_id, for_update=True)
            if account is None:
                raise errors.NotFound("no such account")
            await conn.execute(Q["insert_member"], bucket, account_id, issuer, subject, operator)
            await conn.execute(
                Q["insert_identity_account"], issuer, subject, account_id, bucket, account.kind.value
            )

        await in_transaction(self.pool, work)
        return await self._account_as_is(account_id, bucket)

    async def _open_account(
        self,
        *,
        kind: AccountKind,
        tier: Tier | None,
        name: str | None,
        opened_by: str,
        members: list[tuple[str, str]],
    ) -> str | None:
        bucket = ledger.random_bucket()
        account_id = domain.new_account_id(bucket)

        async def work(conn: asyncpg.Connection) -> bool:
            await conn.execute(
                Q["insert_account"],
                bucket,
                account_id,
                kind.value,
                tier.value if tier else None,
                name,
                opened_by,
            )
            for issuer, subject in members:
                await conn.execute(Q["insert_member"], bucket, account_id, issuer, subject, opened_by)
                status = await conn.execute(
                    Q["insert_identity_account"], issuer, subject, account_id, bucket, kind.value
                )
                if status.endswith(" 0"):  # this person's personal account exists already
                    raise _AlreadyOpen()
            await self._add_wallet(conn, bucket, account_id, "TRY", owner=account_id)
            return True

        try:
            await in_transaction(self.pool, work)
        except _AlreadyOpen:
            return None
        return account_id

    async def _add_wallet(
        self, conn: asyncpg.Connection, bucket: int, account_id: str, currency: str, *, owner: str
    ) -> WalletRow:
        wallet_id = f"{bucket:04d}:w:{new_id()}"
        await self.ledger.open_wallet(owner, currency, wallet_id=wallet_id, conn=conn)

        # A new number after a (rare) collision, in a savepoint: tried again without losing the
        # transaction. Not the unit of work's retry: nothing failed but the draw.
        for attempt in range(1, WALLET_NUMBER_ATTEMPTS + 1):
            try:
                async with conn.transaction():
                    number = domain.new_wallet_number(bucket)
                    await conn.execute(Q["insert_wallet"], bucket, wallet_id, account_id, currency, number)
                break
            except asyncpg.UniqueViolationError as exc:
                if not _number_taken(exc):
                    raise
                if attempt == WALLET_NUMBER_ATTEMPTS:
                    raise errors.Unavailable("could not allocate a wallet number; retry") from exc
        found = await Repo(conn).wallet_of(bucket, account_id, currency)
        if found is None:
            raise AssertionError("a wallet just inserted is not found")
        return found

    async def _account_as_is(self, account_id: str, bucket: int) -> JSON:
        repo = Repo(self.pool)
        account = await repo.account(bucket, account_id)
        if account is None:
            raise errors.NotFound("no such account")
        return account_view(account, await repo.wallets_of(bucket, account_id))

    async def raise_tier(self, caller: Caller, account_id: str, tier: Tier) -> JSON:
        require_onboarding(self.settings, caller)
        if tier is domain.Tier.CONTRACTED:
            # Onboarding proves an e-mail, a phone, an identity and a wire: up to verified. The
            # highest tier needs evidence an employee records (staff_desk.contract).
            raise errors.ContractRequired(
                "the Contracted tier is raised by an employee with customer.contract, on evidence",
                requested=tier.value,
            )
        bucket = domain.bucket_in(account_id)

        async def work(conn: asyncpg.Connection) -> None:
            account = await Repo(conn).account(bucket, account_id, for_update=True)
            if account is None:
                raise errors.NotFound("no such account")
            if account.kind is not AccountKind.PERSONAL or account.tier is None:
                raise errors.NotPersonal("only a personal account has a tier")
            if domain.check_tier_raise(account.tier, tier):
                await conn.execute(Q["set_tier"], bucket, account_id, tier.value)

        await in_transaction(self.pool, work)
        return await self._account_as_is(account_id, bucket)

    async def accounts(self, caller: Caller) -> list[JSON]:
        found = await Repo(self.pool).accounts_of(caller.issuer, caller.subject)
        return [await self._account_as_is(account_id, bucket) for account_id, bucket in found]

    async def account(self, caller: Caller, account_id: str) -> JSON:
        account = await own_account(self.pool, caller, account_id)
        return account_view(account, await Repo(self.pool).wallets_of(account.bucket, account.id))

    async def open_wallet(self, caller: Caller, account_id: str, currency: str) -> tuple[JSON, bool]:
        """A wallet of another currency for an account of the caller (one per currency)."""
        check_currency(self.settings, currency)
        account = await own_account(self.pool, caller, account_id)

        async def work(conn: asyncpg.Connection) -> tuple[WalletRow, bool]:
            await Repo(conn).account(account.bucket, account.id, for_update=True)  # one opener at a time
            existing = await Repo(conn).wallet_of(account.bucket, account.id, currency)
            if existing is not None:
                return existing, False
            return await self._add_wallet(conn, account.bucket, account.id, currency, owner=account.id), True

        wallet, created = await in_transaction(self.pool, work)
        return await self.wallet(caller, wallet.id), created

    # -- wallets ----------------------------------------------------------------------------------

    async def wallet(self, caller: Caller, wallet_id: str) -> JSON:
        access, balance = await own_wallet_balance(self.pool, caller, wallet_id)
        return _wallet_view(access.wallet, balance)

    async def statement(
        self, caller: Caller, wallet_id: str, *, purse: str, cursor: str | None, limit: int
    ) -> JSON:
        """A page of the purse's statement, each line with its counterparty: one round trip
        (``wallet_statement_page``; ``wallet_statement_known`` when wallet-api holds all of the
        page's lines: the membership and their count only), refused as the four reads were: not
        the caller's wallet 404, a limit or cursor the ledger refuses 422 (its own checks,
        before the read), the database out of reach 503."""
        # The ledger's statement's own checks, answered as its refusals were (errors.from_ledger).
        if not 1 <= limit <= ledger.MAX_STATEMENT_PAGE:
            raise errors.InvalidRequest(f"limit must be 1..{ledger.MAX_STATEMENT_PAGE}", field="limit")
        after = 0
        if cursor is not None:
            if not cursor.isdigit() or len(cursor) > 18:
                raise errors.InvalidRequest("malformed cursor", field="cursor")
            after = int(cursor)
        account = f"{wallet_id}:{purse}"
        bucket = domain.bucket_in(wallet_id)
        repo = Repo(self.pool)
        # The lines already read of the page (versions after + 1 to after + limit: an account's
        # versions have no gaps, and a line is never deleted). Taken before the read: the cache
        # may be emptied meanwhile.
        kept = self.statement_lines
        cached: list[StatementLine | None] = [
            kept.get((account, v)) for v in range(after + 1, after + limit + 1)
        ]
        if all(cached):
            # All kept: the membership and how many lines there are (the page's and one more).
            known = await answered(
                repo.wallet_statement_known(
                    bucket, wallet_id, caller.issuer, caller.subject, account, after, limit
                )
            )
            if not known["member"]:
                raise errors.NotFound("no such wallet")
            count = known["lines"]
            if count >= limit and known["last"] == after + count:
                return {
                    "wallet_id": wallet_id,
                    "purse": purse,
                    "lines": [_line_view(after + 1 + n, line) for n, line in enumerate(cached) if line],
                    "next_cursor": str(after + limit) if count > limit else None,
                }
            # Not the lines kept (never on one PostgreSQL): the page is read as if none were.
            cached = [None] * limit
        rows = await answered(
            repo.wallet_statement_page(
                bucket,
                wallet_id,
                caller.issuer,
                caller.subject,
                account,
                after,
                limit,
                # the line after the page shows only that there is a next page: no counterparty
                [line is not None for line in cached] + [True],
            )
        )
        if not rows or not rows[0]["member"]:
            raise errors.NotFound("no such wallet")
        lines = [r for r in rows if r["version"] is not None]
        out = []
        for row in lines[:limit]:
            version = row["version"]
            line = cached[version - after - 1] if version - after <= limit else None
            if line is None:
                party: LineParty | None = None
                if row["party_number"] is not None:
                    kind = row["party_kind"]
                    party = (row["party_number"], kind, row["party_name"] if kind == "business" else None)
                line = (
                    row["transaction_id"],
                    row["type"],
                    row["ref"],
                    row["amount"],
                    row["line_currency"],
                    row["balance_after"],
                    ts(row["posted_at"]),
                    party,
                )
                if party is not None or row["no_party"]:
                    kept.put((account, version), line)
            out.append(_line_view(version, line))
        return {
            "wallet_id": wallet_id,
            "purse": purse,
            "lines": out,
            "next_cursor": str(lines[limit - 1]["version"]) if len(lines) > limit else None,
        }

    async def overview(self, caller: Caller, wallet_id: str, *, days: int) -> JSON:
        """The wallet, its live promo batches and its last ``days`` of cash: one membership check
        and one answer for what three reads would give (a home page's per wallet), in one round
        trip (``wallet_overview``), refused as the three reads were: not the caller's wallet 404,
        a wallet without its ledger accounts the ledger's own refusal, days out of range 422,
        the database out of reach 503."""
        if not 1 <= days <= ledger.MAX_BALANCE_DAYS:  # the ledger's daily_balances' own check
            raise errors.InvalidRequest(f"1 to {ledger.MAX_BALANCE_DAYS} days", field="days")
        # Taken before the read: its snapshot is later, so every day before closed_before(now)
        # it reads is closed (ClosedDays). The days' balances kept are not asked for (the read
        # begins after them); taken before the read too (the cache may be emptied meanwhile).
        started = datetime.now(UTC)
        today = started.date()
        first = today - timedelta(days=days - 1)
        cash_account = ledger.cash_account(wallet_id)
        known = self.closed_days.known(cash_account, first, days)
        row = await answered(
            Repo(self.pool).wallet_overview(
                domain.bucket_in(wallet_id),
                wallet_id,
                caller.issuer,
                caller.subject,
                first + timedelta(days=len(known)),
                today,
            )
        )
        if row is None or not row["member"]:
            raise errors.NotFound("no such wallet")
        balance = balance_of(row, wallet_id)
        if balance is None:
            # What the ledger's wallet_balance raises for a wallet it does not hold.
            missing = ledger.AccountNotFound(f"no wallet {wallet_id}", account=wallet_id)
            raise errors.from_ledger(missing) or errors.NotFound("no such wallet")
        view = _wallet_view(wallet_row(row), balance)
        now = datetime.now(UTC)
        batches = [
            {
                "id": b[0],
                "funded_by": b[1],
                "amount": b[2],
                "remaining": b[3],
                "expires_at": ts(b[4]),
                "grant_transaction_id": b[5],
            }
            for b in row["batches"] or ()
            if b[4] > now  # the live ones only, as _live_batches
        ]
        days_cash = [*known, *(row["days"] or ())]
        self.closed_days.keep(cash_account, first, days_cash, ClosedDays.closed_before(started))
        names = _day_names(first, len(days_cash))
        history = [{"day": day, "balance": cash} for day, cash in zip(names, days_cash, strict=True)]
        return {**view, "batches": batches, "days": history}

    async def _history(self, wallet_id: str, days: int) -> list[JSON]:
        today = datetime.now(UTC).date()
        first = today - timedelta(days=days - 1)
        history = await answered(self.ledger.daily_balances(f"{wallet_id}:cash", first, today))
        return [{"day": day.isoformat(), "balance": balance} for day, balance in history]

    async def balance_history(self, caller: Caller, wallet_id: str, *, days: int) -> JSON:
        access = await own_wallet(self.pool, caller, wallet_id)
        return {
            "wallet_id": wallet_id,
            "currency": access.wallet.currency,
            "days": await self._history(wallet_id, days),
        }

    async def promos(self, caller: Caller, wallet_id: str) -> JSON:
        await own_wallet(self.pool, caller, wallet_id)
        return {"wallet_id": wallet_id, "batches": await self._live_batches(wallet_id)}

    async def _live_batches(self, wallet_id: str) -> list[JSON]:
        batches = await answered(self.ledger.promo_batches(wallet_id))
        # The live batches only: an expired one is nothing the customer can spend, whether or not
        # wallet-consumer's expiry job has returned its remainder yet (the wallet's promo figure
        # leaves it out too). Its expiry is in the promo purse's statement.
        now = datetime.now(UTC)
        return [
            {
                "id": b.id,
                "funded_by": b.funded_by,
                "amount": b.amount,
                "remaining": b.remaining,
                "expires_at": ts(b.expires_at),
                "grant_transaction_id": b.grant_transaction_id,
            }
            for b in batches
            if b.expires_at > now
        ]


async def counterparties(
    pool: asyncpg.Pool, ledger_: ledger.Ledger, account: str, transaction_ids: list[str]
) -> dict[str, JSON]:
    """The other wallet of each statement line that has one (a transfer, a payment, a refund):
    its number, and a business's name (a person's name is not wallet-api's to show)."""
    found = await answered(ledger_.counterparties(account, transaction_ids))
    if not found:
        return {}
    wallet_ids = sorted(set(found.values()))
    rows = await pool.fetch(Q["counterparty_wallets"], [ledger.bucket_of(w) for w in wallet_ids], wallet_ids)
    wallets = {
        r["id"]: {
            "wallet_number": r["number"],
            "kind": r["kind"],
            "name": r["name"] if r["kind"] == "business" else None,
        }
        for r in rows
    }
    return {tx: wallets[w] for tx, w in found.items() if w in wallets}


def _wallet_view(wallet: WalletRow, balance: ledger.WalletBalance) -> JSON:
    return {
        **wallet_ref(wallet),
        "account_id": wallet.account_id,
        "cash": balance.cash,
        "promo": balance.promo_live,  # never expired promo, even before the job returned it
        "held": balance.held,
        "available": balance.available,
    }


def _line_view(version: int, line: StatementLine) -> JSON:
    """A statement line as its page shows it (StatementOut's line, field for field)."""
    party = line[7]
    return {
        "transaction_id": line[0],
        "type": line[1],
        "reference": line[2],
        "amount": line[3],
        "currency": line[4],
        "balance_after": line[5],
        "version": version,
        "posted_at": line[6],
        "counterparty": None
        if party is None
        else {"wallet_number": party[0], "kind": party[1], "name": party[2]},
    }


@lru_cache(maxsize=16)
def _day_names(first: date, count: int) -> tuple[str, ...]:
    """The ISO dates of ``count`` days from ``first``: the same few windows all day (today's last
    30 days, mostly), so an overview does not date and format its 30 days anew each time (a
    fifth of the overview's own Python time in py-spy's samples on bench/read_bench.py)."""
    return tuple((first + timedelta(days=n)).isoformat() for n in range(count))
