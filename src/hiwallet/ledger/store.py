"""The ledger's adapter to PostgreSQL: posting through ``ledger.post``, holds, and reads.

One posting is one database transaction around one call of the posting function; outbox rows
or an idempotency record of a caller can join that transaction through :meth:`LedgerStore.post`
given an open connection (the unit of work of the service that owns them).

The ledger's driver errors are translated here, in :func:`translate`, and nowhere else: a caller
whose own statement posts through ``ledger_api.post_batch`` (wallet-api's ``wallet.transfer_batch``)
has its failure translated by the same function, through :meth:`hiwallet.ledger.Ledger.error_of`.
What a retry can cure is :func:`hiwallet.core.db.is_transient`'s to say.

What is retried, how often and how far apart is the platform's one policy
(:func:`hiwallet.core.uow.in_transaction`: a deadlock or serialization failure, a connection
lost before anything was sent; never a lock or statement timeout): a posting's own transaction
and a batch's statement are run through it, the ledger keeps no retry loop of its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import date, datetime
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg
import orjson

from hiwallet.core import uow
from hiwallet.core.coalesce import Coalescer
from hiwallet.core.db import is_connection_error, is_transient
from hiwallet.core.queries import load_queries
from hiwallet.ledger import errors
from hiwallet.ledger.accounts import (
    BUCKETS,
    CENTRAL_BUCKET,
    Role,
    bucket_of,
    cash_account,
    check_currency,
    promo_account,
    system_account,
)
from hiwallet.ledger.faults import NO_FAULTS, FaultInjector, FaultPoint
from hiwallet.ledger.model import (
    AccountState,
    HoldResult,
    Leg,
    LineResult,
    Posting,
    PostResult,
    PromoBatch,
    Statement,
    StatementLine,
    TransactionView,
    WalletBalance,
)
from hiwallet.ledger.rules import check_amount, check_text
from hiwallet.ledger.settings import LedgerSettings, get_ledger_settings
from hiwallet.ledger.verify import VerifyReport, verify

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")

DEFAULT_PROVIDERS = ("stripe", "bank")
MAX_BATCH = 1_000
MAX_STATEMENT_PAGE = 500
# The days of balance history one read may ask for (a year).
MAX_BALANCE_DAYS = 366

# What the driver and the network raise: translated. Anything else is raised as it is.
_DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)

_SQLSTATE_ERRORS: dict[str, type[errors.LedgerError]] = {
    "HW001": errors.InsufficientFunds,
    "HW002": errors.AccountNotFound,
    "HW003": errors.TransactionIdReused,
    "HW004": errors.CurrencyMismatch,
    "HW005": errors.HoldNotUsable,
    "HW006": errors.NotRefundable,
    "HW007": errors.NothingToExpire,
    "HW008": errors.InvalidPosting,
}
# The database's last line of defence, named in the migrations. If one fires, the check in the
# posting function above it was missed: report it as what it protects.
_CONSTRAINT_ERRORS: dict[str, type[errors.LedgerError]] = {
    "accounts_customer_not_negative": errors.InsufficientFunds,
    "accounts_held_within_balance": errors.InsufficientFunds,
    "transactions_refunded_once": errors.NotRefundable,
}


def translate(exc: BaseException) -> errors.LedgerError | errors.LedgerInternalError:
    """An exception from the driver, as the ledger's error: a refusal by its SQLSTATE or
    constraint; :class:`~errors.LedgerUnavailable` only for what a retry can cure
    (:func:`hiwallet.core.db.is_transient`); anything else - an invariant trigger (HW010-HW012),
    an unknown HW code, a data error, an unmapped constraint, an unknown state - is a defect,
    :class:`~errors.LedgerInternalError`, never "retry"."""
    if isinstance(exc, errors.LedgerError | errors.LedgerInternalError):
        return exc
    state = getattr(exc, "sqlstate", None) or None
    constraint = getattr(exc, "constraint_name", None) or None
    if isinstance(exc, asyncpg.PostgresError):
        message = getattr(exc, "message", None) or str(exc)
        if state in _SQLSTATE_ERRORS:
            return _SQLSTATE_ERRORS[state](message, **_detail(getattr(exc, "detail", None)))
        if constraint in _CONSTRAINT_ERRORS:
            return _CONSTRAINT_ERRORS[constraint](message, constraint=constraint)
    # The type and SQLSTATE, not the driver's text: str() of an asyncpg error carries
    # PostgreSQL's DETAIL, which quotes a row's values, and these messages reach logs.
    if is_transient(exc):
        return errors.LedgerUnavailable(f"database unavailable: {type(exc).__name__} (sqlstate {state})")
    # Our own invariant triggers (SQLSTATE class HW) say which invariant and where in their
    # primary message (ids and amounts, never a person's data; never their DETAIL): kept, it is
    # what an operator reading the 500's log needs.
    own = (
        f": {exc.message}"
        if isinstance(exc, asyncpg.PostgresError) and (state or "").startswith("HW")
        else ""
    )
    return errors.LedgerInternalError(
        f"database error: {type(exc).__name__} (sqlstate {state}, constraint {constraint}){own}",
        sqlstate=state,
        constraint=constraint,
    )


def _detail(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        detail = json.loads(raw)
    except ValueError:
        return {"detail": raw}
    return detail if isinstance(detail, dict) else {"detail": detail}


def _translated_cause(exc: uow.Unavailable) -> errors.LedgerError | errors.LedgerInternalError:
    """What the unit of work gave up on (its last attempt's failure), as the ledger's error: a
    conflict each time is :class:`~errors.LedgerUnavailable`, as a lost connection is."""
    return translate(exc.__cause__ if exc.__cause__ is not None else exc)


def _fetch_batch(batch: list[_PostCall], conn: asyncpg.Connection) -> Any:
    # the statement's awaitable itself, not a coroutine around it: no frame more per batch
    return conn.fetchval(Q["post_batch"], batch)


class _PostCall(NamedTuple):
    """One ``ledger.posting_in`` (migration 0008): asyncpg encodes a tuple as a composite, field
    by field in order. Also the arguments of ``ledger.post``, in its order."""

    id: str
    home: int
    type: str
    actor: str
    ref: str
    request_hash: bytes
    parts_balanced: bool
    refund_of: str | None
    metadata: dict[str, Any]
    buckets: list[int]
    accounts: list[str]
    amounts: list[int]
    currencies: list[str]
    options: dict[str, Any]


def _answer(raw: dict[str, Any]) -> PostResult:
    """The posting function's answer: a result, or a refusal raised as the ledger's error."""
    if "error" in raw:
        err = raw["error"]
        kind = _SQLSTATE_ERRORS.get(err["sqlstate"])
        if kind is None:  # a refusal this code does not know: a defect, not "retry"
            raise errors.LedgerInternalError(
                f"unknown refusal {err['sqlstate']}: {err['message']}", sqlstate=err["sqlstate"]
            )
        raise kind(err["message"], **(err["detail"] or {}))
    return _result(raw)


def _result(raw: dict[str, Any]) -> PostResult:
    return PostResult(
        id=raw["id"],
        replayed=raw["replayed"],
        posted_at=datetime.fromisoformat(raw["posted_at"]),
        # in (account, version) order, the same for a first answer and a replay
        lines=tuple(
            sorted(
                (
                    LineResult(line["account"], line["version"], line["amount"], line["balance_after"])
                    for line in raw["lines"]
                ),
                key=lambda line: (line.account, line.version),
            )
        ),
    )


def _account(row: asyncpg.Record) -> AccountState:
    return AccountState(
        id=row["id"],
        bucket=row["bucket"],
        role=row["role"],
        purse=row["purse"],
        currency=row["currency"],
        owner=row["owner"],
        balance=row["balance"],
        held=row["held"],
        version=row["version"],
    )


def _line(row: asyncpg.Record) -> StatementLine:
    return StatementLine(
        account=row["account_id"],
        version=row["version"],
        transaction_id=row["transaction_id"],
        type=row["type"],
        ref=row["ref"],
        amount=row["amount"],
        currency=row["currency"],
        balance_after=row["balance_after"],
        posted_at=row["posted_at"],
    )


def _jsonb_binary(value: Any) -> bytes:
    # jsonb's binary format: a version byte, then the text
    return b"\x01" + orjson.dumps(value)


def _jsonb_parse(data: bytes) -> Any:
    return orjson.loads(memoryview(data)[1:])


async def init_connection(conn: asyncpg.Connection) -> None:
    """Every pooled connection of the ledger's database: jsonb as Python objects through orjson,
    and the posting's composite type known.

    - jsonb through orjson: every posting's answer and options are jsonb (measured: 1.7 µs to
      read a posting's answer, 4.6 µs with the standard library's json; 0.25 µs to write a
      small object, 3.1 µs). In jsonb's binary format, because asyncpg encodes a composite
      (``ledger.posting_in``, with jsonb fields) only in binary, with binary fields.
    - ``ledger.posting_in``: asyncpg learns a type it does not know by introspection, three
      round trips on the connection's first statement that uses it (jit off, the catalog
      query, jit back). Preparing the batch's statement here pays them when the connection
      opens, not inside the first batch posted on it.
    """
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_binary, decoder=_jsonb_parse, schema="pg_catalog", format="binary"
    )
    await conn.prepare(Q["post_batch"])


class LedgerStore:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        faults: FaultInjector = NO_FAULTS,
        transit_legs: bool = False,
        providers: Sequence[str] = DEFAULT_PROVIDERS,
        coalesce_writers: int = 4,
        coalesce_max_batch: int = 100,
        coalesce_parts: int = 2,
    ) -> None:
        self._pool = pool
        self._faults = faults
        self.transit_legs = transit_legs
        self.providers = list(providers)
        # Concurrent plain postings share a round trip and a commit (core/coalesce.py); off under
        # fault injection, whose points sit around one posting's own transaction.
        self._coalescer = (
            Coalescer(
                self.post_batch,
                writers=coalesce_writers,
                max_batch=coalesce_max_batch,
                parts=coalesce_parts,
                share_keys=self._locked_rows,
            )
            if coalesce_writers > 0 and faults is NO_FAULTS
            else None
        )

    @classmethod
    def from_settings(cls, pool: asyncpg.Pool, settings: LedgerSettings | None = None) -> LedgerStore:
        settings = settings or get_ledger_settings()
        return cls(
            pool,
            transit_legs=settings.transit_legs,
            coalesce_writers=settings.coalesce_writers,
            coalesce_max_batch=settings.coalesce_max_batch,
            coalesce_parts=settings.coalesce_parts,
        )

    # -----------------------------------------------------------------------------------------
    # Posting
    # -----------------------------------------------------------------------------------------

    def _locked_rows(self, posting: Posting) -> list[str]:
        """The accounts a posting locks (an account id names its bucket), and its id: two
        postings that share one would wait on each other (or, for an id, be answered one by the
        other as a replay, not by a unique violation between two calls), so the coalescer keeps
        them in one batch."""
        keys = [posting.id, *(leg.account for leg in posting.legs)]
        if self.transit_legs:  # each bucket's transit sub-account, as _arguments adds them
            parts = {(bucket_of(leg.account), leg.currency) for leg in posting.legs}
            if len({b for b, _ in parts}) > 1:
                keys += [system_account(Role.TRANSIT, c, bucket=b) for b, c in parts]
        return keys

    def _arguments(self, posting: Posting) -> _PostCall:
        legs = list(posting.legs)
        options = dict(posting.options)
        buckets = [bucket_of(leg.account) for leg in legs]
        if self.transit_legs and len(set(buckets)) > 1:
            # Each bucket's part gets a transit leg so that it balances on its own: the
            # posting function fills the amounts once every other amount is final.
            transit: list[int] = []
            for b, currency in sorted({(b, leg.currency) for b, leg in zip(buckets, legs, strict=True)}):
                legs.append(Leg(system_account(Role.TRANSIT, currency, bucket=b), 0, currency))
                buckets.append(b)
                transit.append(len(legs))  # 1-based, for PL/pgSQL
            options["transit_legs"] = transit
        return _PostCall(
            id=posting.id,
            home=posting.home_bucket,
            type=posting.type.value,
            actor=posting.actor,
            ref=posting.ref,
            request_hash=posting.request_hash(),
            parts_balanced=self.transit_legs,
            refund_of=posting.refund_of,
            metadata=posting.metadata,
            buckets=buckets,
            accounts=[leg.account for leg in legs],
            amounts=[leg.amount for leg in legs],
            currencies=[leg.currency for leg in legs],
            options=options,
        )

    def batch_arguments(self, postings: Sequence[Posting]) -> list[_PostCall]:
        """``ledger.post_batch``'s one argument for ``postings``: an array of
        ``ledger.posting_in``. Also for a caller whose own SQL function posts through
        ``ledger_api.post_batch`` in the same statement as its own writes (wallet-api's transfers);
        it reads each answer with ``post_answer``."""
        return [self._arguments(p) for p in postings]

    @staticmethod
    def post_answer(raw: dict[str, Any]) -> PostResult:
        """``ledger.post``'s answer as a result; a refusal raises the ledger's error."""
        return _answer(raw)

    async def post(self, posting: Posting, conn: asyncpg.Connection | None = None) -> PostResult:
        """Post once. With ``conn`` (in an open transaction) the posting joins the caller's unit
        of work and the caller commits; without, this is its own transaction, retried on a
        deadlock or serialization failure."""
        args = self._arguments(posting)
        if conn is not None:
            try:
                raw = await conn.fetchval(Q["post"], *args)
            except Exception as exc:
                raise translate(exc) from exc
            return _answer(raw)
        if self._coalescer is not None and not posting.options and posting.refund_of is None:
            return await self._coalescer.submit(posting)
        return await self._post_alone(args)

    async def _post_alone(self, args: _PostCall) -> PostResult:
        # The unit of work's policy tries it again after a deadlock or serialization failure:
        # the server rolled the posting back, and the same id makes a second attempt safe (a
        # replay if the first had committed after all). One statement, so a connection lost
        # once it was sent is in doubt and not tried again (the caller's retry with the same id
        # finds out).
        try:
            return await uow.in_transaction(
                self._pool, partial(self._post_own_transaction, args), one_statement=True
            )
        except uow.Unavailable as exc:
            # every attempt failed for what a retry can cure: the last failure, as before
            raise _translated_cause(exc) from exc.__cause__
        except (errors.LedgerError, errors.LedgerInternalError):
            raise
        except Exception as exc:
            raise translate(exc) from exc

    async def _post_own_transaction(self, args: _PostCall, conn: asyncpg.Connection) -> PostResult:
        if self._faults is NO_FAULTS:
            # One statement in autocommit: PostgreSQL wraps it in its own transaction; the
            # balance check runs at the end of the statement that writes the lines. One round
            # trip, where BEGIN ... COMMIT would be three (on loopback each costs more client
            # CPU than the posting's Python).
            raw = await conn.fetchval(Q["post"], *args)
            return _answer(raw)
        # Under test, the same call in an explicit transaction, so that a fault can strike
        # between the posting and its commit.
        await self._faults(FaultPoint.BEFORE, conn)
        async with conn.transaction():
            raw = await conn.fetchval(Q["post"], *args)
            await self._faults(FaultPoint.INSIDE, conn)
            await self._faults(FaultPoint.AT_COMMIT, conn)
        await self._faults(FaultPoint.AFTER_COMMIT, conn)
        return _answer(raw)

    async def post_batch(
        self, postings: Sequence[Posting]
    ) -> list[PostResult | errors.LedgerError | errors.LedgerInternalError]:
        """Many postings in one database transaction and one round trip; a result for each. A
        posting refused for a ledger reason leaves nothing and does not stop the others."""
        if not 0 < len(postings) <= MAX_BATCH:
            raise errors.InvalidPosting(f"a batch holds 1 to {MAX_BATCH} postings", field="postings")
        batch = self.batch_arguments(postings)
        try:
            # One statement in autocommit, as for a single posting: one round trip. The unit of
            # work's policy runs it again, whole, after a deadlock or serialization failure
            # (rolled back by the server; the postings' ids make a second attempt safe).
            raw = await uow.in_transaction(self._pool, partial(_fetch_batch, batch), one_statement=True)
        except uow.Unavailable as exc:
            raise _translated_cause(exc) from exc.__cause__
        except asyncpg.PostgresError as exc:
            # A posting of the batch failed for a reason that is not a refusal: most often
            # another writer posted one of these ids meanwhile (the set-based batch writes
            # its ids at the end, so it cannot tell which). One at a time, each posting
            # finds out for itself, and one bad posting cannot fail its neighbours. A batch
            # of one too: the set-based path claims no id, the single posting's path does
            # (ON CONFLICT: the same key posted at once by two callers, e.g. two sweeps of
            # one sub-account, is answered as a replay, not a unique violation).
            if is_connection_error(exc):
                # (the server went away: each posting alone would meet the same outage)
                raise translate(exc) from exc
            return [await self._answer_alone(p) for p in postings]
        except Exception as exc:
            raise translate(exc) from exc
        results: list[PostResult | errors.LedgerError | errors.LedgerInternalError] = []
        for item in raw:
            try:
                results.append(_answer(item))
            except (errors.LedgerError, errors.LedgerInternalError) as refused:
                results.append(refused)
        return results

    async def _answer_alone(
        self, posting: Posting
    ) -> PostResult | errors.LedgerError | errors.LedgerInternalError:
        try:
            return await self._post_alone(self._arguments(posting))
        # a refusal, or this posting's own failure (one bad posting cannot fail its neighbours)
        except (errors.LedgerError, errors.LedgerInternalError) as answer:
            return answer

    # -----------------------------------------------------------------------------------------
    # Accounts
    # -----------------------------------------------------------------------------------------

    async def ensure_system_accounts(self, currency: str, buckets: Sequence[int] | None = None) -> None:
        """Create the system sub-accounts of ``currency`` (all buckets by default). Idempotent."""
        check_currency(currency)
        todo = range(BUCKETS) if buckets is None else sorted({CENTRAL_BUCKET, *buckets})
        async with uow.unit_of_work(self._pool) as conn:
            await conn.executemany(Q["ensure_system_accounts"], [(b, currency, self.providers) for b in todo])

    async def open_wallet(
        self, wallet_id: str, currency: str, *, owner: str, conn: asyncpg.Connection | None = None
    ) -> WalletBalance:
        """Open a wallet's two accounts (cash, promo). Opening it again answers as it is. With
        ``conn`` (in an open transaction) the accounts join the caller's unit of work."""
        check_currency(currency)
        b = bucket_of(wallet_id)
        if b == CENTRAL_BUCKET:
            raise errors.InvalidPosting("bucket 0 is for system accounts", field="wallet")
        if conn is not None:
            try:
                await self._open_accounts(conn, wallet_id, b, currency, owner)
            except Exception as exc:
                raise translate(exc) from exc
            return WalletBalance(wallet_id, currency, cash=0, promo=0, held=0)
        try:
            async with uow.unit_of_work(self._pool) as own:
                await self._open_accounts(own, wallet_id, b, currency, owner)
        except Exception as exc:
            raise translate(exc) from exc
        return await self.wallet_balance(wallet_id)

    async def open_wallets(
        self, wallet_ids: Sequence[str], currency: str, *, owner: str, conn: asyncpg.Connection | None = None
    ) -> None:
        """Open many wallets' accounts as ``open_wallet`` opens each (the same rows), in two
        statements: their buckets' system sub-accounts, then their accounts. With ``conn`` (in
        an open transaction) they join the caller's unit of work."""
        check_currency(currency)
        buckets = [bucket_of(w) for w in wallet_ids]
        if CENTRAL_BUCKET in buckets:
            raise errors.InvalidPosting("bucket 0 is for system accounts", field="wallet")
        if not wallet_ids:
            return
        try:
            if conn is not None:
                await self._open_many(conn, wallet_ids, buckets, currency, owner)
                return
            async with uow.unit_of_work(self._pool) as own:
                await self._open_many(own, wallet_ids, buckets, currency, owner)
        except Exception as exc:
            raise translate(exc) from exc

    async def _open_many(
        self,
        conn: asyncpg.Connection,
        wallet_ids: Sequence[str],
        buckets: list[int],
        currency: str,
        owner: str,
    ) -> None:
        await conn.execute(
            Q["ensure_system_accounts_of"], sorted({CENTRAL_BUCKET, *buckets}), currency, self.providers
        )
        await conn.execute(
            Q["open_accounts"],
            buckets + buckets,
            [cash_account(w) for w in wallet_ids] + [promo_account(w) for w in wallet_ids],
            ["cash"] * len(wallet_ids) + ["promo"] * len(wallet_ids),
            currency,
            owner,
        )

    async def _open_accounts(
        self, conn: asyncpg.Connection, wallet_id: str, b: int, currency: str, owner: str
    ) -> None:
        await conn.execute(Q["ensure_system_accounts"], CENTRAL_BUCKET, currency, self.providers)
        await conn.execute(Q["ensure_system_accounts"], b, currency, self.providers)
        await conn.executemany(
            Q["open_account"],
            [
                (b, cash_account(wallet_id), "cash", currency, owner),
                (b, promo_account(wallet_id), "promo", currency, owner),
            ],
        )

    async def account(self, account_id: str) -> AccountState:
        try:
            row = await self._pool.fetchrow(Q["get_account"], bucket_of(account_id), account_id)
        except (errors.LedgerError, errors.LedgerInternalError):
            raise
        except Exception as exc:
            raise translate(exc) from exc
        if row is None:
            raise errors.AccountNotFound(f"no account {account_id}", account=account_id)
        return _account(row)

    async def wallet_balance(self, wallet_id: str) -> WalletBalance:
        cash, promo = cash_account(wallet_id), promo_account(wallet_id)
        try:
            rows = await self._pool.fetch(Q["wallet_balance"], bucket_of(wallet_id), [cash, promo])
        except (errors.LedgerError, errors.LedgerInternalError):
            raise
        except Exception as exc:
            raise translate(exc) from exc
        by_id = {r["id"]: r for r in rows}
        if cash not in by_id or promo not in by_id:
            raise errors.AccountNotFound(f"no wallet {wallet_id}", account=wallet_id)
        c, p = _account(by_id[cash]), _account(by_id[promo])
        return WalletBalance(
            wallet_id,
            c.currency,
            cash=c.balance,
            promo=p.balance,
            held=c.held,
            promo_expired=int(by_id[promo]["expired"]),
        )

    async def system_balance(self, role: Role, currency: str, provider: str | None = None) -> int:
        """The balance of a system account: the sum of its per-bucket sub-accounts."""
        value = await self._read("fetchval", Q["system_balance"], role.value, currency, provider)
        return int(value)

    # -----------------------------------------------------------------------------------------
    # Reading
    # -----------------------------------------------------------------------------------------

    async def _read(self, method: str, query: str, *args: Any) -> Any:
        """One read on the pool (``fetch``, ``fetchrow`` or ``fetchval``), its driver error
        translated."""
        try:
            return await getattr(self._pool, method)(query, *args)
        except Exception as exc:
            raise translate(exc) from exc

    async def statement(self, account_id: str, *, cursor: str | None = None, limit: int = 50) -> Statement:
        """Lines in version order; ``cursor`` is the last version seen (opaque to callers)."""
        if not 1 <= limit <= MAX_STATEMENT_PAGE:
            raise errors.InvalidRequest(f"limit must be 1..{MAX_STATEMENT_PAGE}", field="limit")
        after = 0
        if cursor is not None:
            if not cursor.isdigit() or len(cursor) > 18:
                raise errors.InvalidCursor("malformed cursor", field="cursor")
            after = int(cursor)
        rows = await self._read("fetch", Q["statement"], bucket_of(account_id), account_id, after, limit + 1)
        lines = tuple(_line(r) for r in rows[:limit])
        next_cursor = str(lines[-1].version) if len(rows) > limit else None
        return Statement(lines, next_cursor)

    async def transaction(self, transaction_id: str) -> TransactionView:
        home = bucket_of(transaction_id)
        head = await self._read("fetchrow", Q["transaction_home"], home, transaction_id)
        if head is None or head["home_bucket"] != home:
            raise errors.TransactionNotFound(
                f"no transaction {transaction_id}", transaction_id=transaction_id
            )
        lines = await self._read("fetch", Q["transaction_lines"], head["buckets"], transaction_id)
        return TransactionView(
            id=head["id"],
            type=head["type"],
            actor=head["actor"],
            ref=head["ref"],
            refund_of=head["refund_of"],
            posted_at=head["posted_at"],
            metadata=head["metadata"],
            legs=tuple(_line(r) for r in lines),
        )

    async def has_lines(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """For each (transaction id, account id): whether that transaction has a line on that
        account (in the account's bucket), in one read."""
        if not pairs:
            return []
        rows = await self._read(
            "fetch",
            Q["lines_exist"],
            [bucket_of(account) for _, account in pairs],
            [account for _, account in pairs],
            [transaction for transaction, _ in pairs],
        )
        return [bool(r["found"]) for r in rows]

    async def actors(self, account_id: str, transaction_ids: list[str]) -> dict[str, str]:
        """The actor of each of these transactions of ``account_id``'s statement (staff read the
        customer's record with who did what: ``staff:<sub>``, ``customer:<sub>``...)."""
        if not transaction_ids:
            return {}
        rows = await self._read("fetch", Q["actors"], bucket_of(account_id), transaction_ids)
        return {r["id"]: r["actor"] for r in rows}

    async def counterparties(self, account_id: str, transaction_ids: list[str]) -> dict[str, str]:
        """The other customer wallet (its id) each of these transactions of ``account_id``'s
        statement moved money with, where there is one (a p2p transfer, a payment, a refund; not
        a top-up or a withdrawal). One wallet each: the first by id, should there be several."""
        if not transaction_ids:
            return {}
        wallet = account_id.rsplit(":", 1)[0]
        rows = await self._read(
            "fetch", Q["counterparties"], bucket_of(account_id), account_id, f"{wallet}:", transaction_ids
        )
        found: dict[str, str] = {}
        for r in rows:
            found.setdefault(r["transaction_id"], r["account_id"].rsplit(":", 1)[0])
        return found

    async def refund_of(self, transaction_id: str) -> str | None:
        """The id of the refund of ``transaction_id``, if there is one."""
        value = await self._read("fetchval", Q["refund_of"], bucket_of(transaction_id), transaction_id)
        return None if value is None else str(value)

    async def balance_as_of(self, account_id: str, at: datetime) -> int:
        """The balance the account had at ``at``: the balance its last line before then left."""
        await self.account(account_id)
        value = await self._read("fetchval", Q["balance_as_of"], bucket_of(account_id), account_id, at)
        return 0 if value is None else int(value)

    async def daily_balances(self, account_id: str, first: date, last: date) -> list[tuple[date, int]]:
        """The account's balance at the end of each UTC day from ``first`` to ``last`` (at most
        MAX_BALANCE_DAYS days), in order."""
        days = (last - first).days + 1
        if not 1 <= days <= MAX_BALANCE_DAYS:
            raise errors.InvalidRequest(f"1 to {MAX_BALANCE_DAYS} days", field="days")
        rows = await self._read("fetch", Q["daily_balances"], bucket_of(account_id), account_id, first, last)
        return [(r["day"], r["balance"]) for r in rows]

    async def promo_batches(self, wallet_id: str) -> list[PromoBatch]:
        promo = promo_account(wallet_id)
        rows = await self._read("fetch", Q["promo_batches"], bucket_of(wallet_id), promo)
        return [
            PromoBatch(
                id=r["id"],
                account=r["account_id"],
                funder_account=r["funder_account"],
                funded_by=r["funded_by"],
                amount=r["amount"],
                remaining=r["remaining"],
                expires_at=r["expires_at"],
                grant_transaction_id=r["grant_transaction_id"],
            )
            for r in rows
        ]

    async def expired_promo_batches(self, now: datetime, limit: int = 500) -> list[asyncpg.Record]:
        """Batches past their expiry that still hold money, earliest first."""
        return list(await self._pool.fetch(Q["expired_promo_batches"], now, limit))

    async def currencies_to_sweep(self, roles: Sequence[Role]) -> list[str]:
        """The currencies in which a per-bucket sub-account of one of ``roles`` holds something."""
        rows = await self._read("fetch", Q["currencies_to_sweep"], [r.value for r in roles])
        return [str(r["currency"]) for r in rows]

    async def sub_accounts_to_sweep(
        self, role: Role, currency: str, provider: str | None
    ) -> list[AccountState]:
        """Per-bucket sub-accounts of a system account that hold something."""
        pattern = f"%:sys:{role.value}:{provider + ':' if provider else ''}{currency}"
        rows = await self._pool.fetch(Q["sub_accounts_to_sweep"], role.value, currency, pattern)
        return [
            AccountState(
                r["id"], r["bucket"], role.value, None, currency, None, r["balance"], 0, r["version"]
            )
            for r in rows
        ]

    # -----------------------------------------------------------------------------------------
    # Holds
    # -----------------------------------------------------------------------------------------

    async def place_hold(self, wallet_id: str, key: str, amount: int) -> HoldResult:
        amount, key = check_amount(amount), check_text(key, "key")
        account = cash_account(wallet_id)
        raw = await self._call(Q["place_hold"], bucket_of(wallet_id), account, key, amount)
        return _hold(account, key, raw)

    async def release_hold(self, wallet_id: str, key: str) -> HoldResult:
        key = check_text(key, "key")
        account = cash_account(wallet_id)
        raw = await self._call(Q["release_hold"], bucket_of(wallet_id), account, key)
        return _hold(account, key, raw)

    async def _call(self, query: str, *args: Any) -> Any:
        try:
            async with uow.unit_of_work(self._pool) as conn:
                return await conn.fetchval(query, *args)
        except Exception as exc:
            raise translate(exc) from exc

    async def verify(self, *, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        async with self._pool.acquire() as conn:
            return await verify(conn, progress=progress)

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[asyncpg.Connection]:
        """One connection in one transaction, for a caller that writes more than the posting
        (an idempotency record, an outbox row) and wants it all or nothing: the platform's unit
        of work as a block (what it asks for with ``after_commit`` runs once it committed),
        never retried (a block cannot be run again)."""
        try:
            async with uow.unit_of_work(self._pool) as conn:
                yield conn
        except _DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        # anything else is the caller's own (its refusal, its bug): rolled back, raised as it is


def _hold(account: str, key: str, raw: dict[str, Any]) -> HoldResult:
    return HoldResult(
        account=account,
        key=key,
        status=raw["status"],
        amount=raw["amount"],
        held=raw["held"],
        balance=raw["balance"],
        replayed=raw["replayed"],
    )
