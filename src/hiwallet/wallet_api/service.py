"""wallet-api's use cases. One public method is one database transaction; the rules live here
(who may see and move what, tiers, limits, idempotency); SQL lives in adapters and the ledger.

Answers are JSON-ready dicts: a money-moving answer is stored as-is for idempotent replays."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Generic, TypeVar

import asyncpg
import structlog

from hiwallet.core.coalesce import Coalescer
from hiwallet.core.http import ProblemError
from hiwallet.core.ids import new_id
from hiwallet.ledger import errors as ledger_errors
from hiwallet.ledger import rules
from hiwallet.ledger.accounts import random_bucket, wallet_of
from hiwallet.ledger.model import Posting, PostResult, TransactionView, TxType
from hiwallet.ledger.service import Fees
from hiwallet.ledger.store import LedgerStore, translate
from hiwallet.wallet_api import adapters, domain, errors
from hiwallet.wallet_api.adapters import AccountRow, Q, Repo, WalletAccess, WalletRow
from hiwallet.wallet_api.domain import AccountKind, Caller, Tier
from hiwallet.wallet_api.settings import WalletApiSettings

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
MAX_IDEMPOTENCY_KEY = 255
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII, as an sf-string's content
RETRY_ATTEMPTS = 3
TRANSFER_ATTEMPTS = 3  # a transfer decided again after "stale" or "retry" answers
K = TypeVar("K")
V = TypeVar("V")
PROMO_MAX_DAYS = 366


@dataclass(frozen=True)
class Answer:
    """What a money-moving request answers: status and body, first time or replayed."""

    status: int
    body: JSON
    replayed: bool = False


def request_hash(operation: str, payload: Any) -> bytes:
    content = json.dumps([operation, payload], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(content.encode()).digest()


def check_idempotency_key(key: str | None) -> str:
    if key is None:
        raise errors.IdempotencyKeyMissing("send an Idempotency-Key header (a UUID is a good key)")
    # RFC draft: the key is an sf-string; accept it quoted or bare.
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not _IDEMPOTENCY_KEY.match(key):
        raise errors.IdempotencyKeyInvalid(
            f"the key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters", field="Idempotency-Key"
        )
    return key


def _in_progress() -> errors.IdempotencyInProgress:
    return errors.IdempotencyInProgress("the first request with this key is still running; retry shortly")


def _reused() -> errors.IdempotencyKeyReused:
    return errors.IdempotencyKeyReused("this Idempotency-Key was used with another request; use a new key")


def _stored_answer(row: asyncpg.Record, fingerprint: bytes) -> Answer | None:
    """From the first statement of a money-moving request: 409 while another request with the
    key runs, 422 when the key was used for another request, the stored answer, or None."""
    if not row["locked"]:
        raise _in_progress()
    if row["request_hash"] is None:
        return None
    if bytes(row["request_hash"]) != fingerprint:
        raise _reused()
    return _replay(row["status"], row["body"], row["posted"])


def _replay(status: int, body: JSON | None, posted: JSON | None) -> Answer:
    """A stored answer: its body, or for a transfer the body built again from what the posting
    returned (the same function built the first answer from the same data)."""
    if posted is not None:
        return Answer(status, _view_of_posted(posted), replayed=True)
    assert body is not None, "idempotency_keys_one_answer"
    return Answer(status, body, replayed=True)


def _this_month() -> date:
    return datetime.now(UTC).date().replace(day=1)


def _lock_key(bucket: int, scope: str, key: str) -> int:
    digest = hashlib.sha256(f"{bucket}\x1f{scope}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _is_retryable(exc: BaseException) -> bool:
    cause = exc.__cause__ if isinstance(exc, ledger_errors.LedgerError) else exc
    if isinstance(cause, asyncpg.UniqueViolationError):
        # Another request with the same key committed first: the retry replays its answer.
        return bool(cause.constraint_name == "idempotency_keys_pkey")
    return isinstance(cause, asyncpg.DeadlockDetectedError | asyncpg.SerializationError)


# ---------------------------------------------------------------------------------------------
# Views: what the API shows of accounts, wallets and ledger transactions
# ---------------------------------------------------------------------------------------------


def _ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def account_view(account: AccountRow, wallets: list[WalletRow]) -> JSON:
    return {
        "id": account.id,
        "kind": account.kind.value,
        "tier": account.tier.value if account.tier else None,
        "name": account.name,
        "created_at": _ts(account.created_at),
        "wallets": [wallet_ref(w) for w in wallets],
    }


def wallet_ref(w: WalletRow) -> JSON:
    return {"id": w.id, "number": w.number, "currency": w.currency}


def _leg(account: str, amount: int, currency: str) -> JSON:
    try:
        wallet: str | None = wallet_of(account)
        purse: str | None = account.rpartition(":")[2]
    except ledger_errors.InvalidPosting:
        wallet, purse = None, None
    role = "user_wallet" if wallet else account.split(":")[2]
    return {
        "account": account,
        "wallet": wallet,
        "purse": purse,
        "role": role,
        "amount": amount,
        "currency": currency,
    }


def transfer_view(
    *,
    id: str,
    type_: str,
    reference: str,
    posted_at: datetime,
    legs: list[tuple[str, int, str]],
    metadata: dict[str, Any],
    refund_of: str | None,
) -> JSON:
    """A ledger transaction as a transfer: who paid, who got, how much, and every leg. The payer
    is the wallet whose legs sum below zero, the payee the one above (refunds included)."""
    shown = [_leg(a, amt, c) for a, amt, c in legs]
    per_wallet: dict[str, int] = {}
    for leg in shown:
        if leg["wallet"]:
            per_wallet[leg["wallet"]] = per_wallet.get(leg["wallet"], 0) + leg["amount"]
    payer = min(per_wallet, key=lambda w: per_wallet[w], default=None)
    payee = max(per_wallet, key=lambda w: per_wallet[w], default=None)
    promo_used = sum(-x["amount"] for x in shown if x["purse"] == "promo" and x["amount"] < 0)
    return {
        "id": id,
        "type": type_,
        "status": "posted",
        "from_wallet": payer,
        "to_wallet": payee,
        "amount": per_wallet.get(payee, 0) if payee else 0,
        "currency": legs[0][2] if legs else "TRY",
        "fee": int(metadata.get("fee", 0) or 0),
        "promo_used": promo_used if type_ == TxType.PAYMENT else 0,
        "reference": reference,
        "refund_of": refund_of,
        "posted_at": _ts(posted_at),
        "legs": shown,
        "expires_at": _promo_expiry(metadata),
    }


def _promo_expiry(metadata: dict[str, Any]) -> str | None:
    """A promo grant's expiry, from its ledger transaction's metadata."""
    expires_at = metadata.get("expires_at")
    return _ts(datetime.fromisoformat(expires_at)) if isinstance(expires_at, str) else None


def _view_of_post(
    result: PostResult,
    posting_type: TxType,
    ref: str,
    metadata: dict[str, Any],
    currency: str,
    refund_of: str | None = None,
) -> JSON:
    return transfer_view(
        id=result.id,
        type_=posting_type.value,
        reference=ref,
        posted_at=result.posted_at,
        legs=[(line.account, line.amount, currency) for line in result.lines],
        metadata=metadata,
        refund_of=refund_of,
    )


def _view_of_posted(posted: JSON) -> JSON:
    """A transfer's answer from what wallet.transfer returned and stored: the posting's result
    and the view's own inputs."""
    view = posted["view"]
    return _view_of_post(
        LedgerStore.post_answer(posted["result"]),
        TxType(view["type"]),
        view["ref"],
        view["metadata"],
        view["currency"],
    )


def _view_of_transaction(tx: TransactionView) -> JSON:
    return transfer_view(
        id=tx.id,
        type_=tx.type,
        reference=tx.ref,
        posted_at=tx.posted_at,
        legs=[(line.account, line.amount, line.currency) for line in tx.legs],
        metadata=tx.metadata,
        refund_of=tx.refund_of,
    )


# ---------------------------------------------------------------------------------------------
# The service
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransferItem:
    """One transfer as wallet.transfer_batch takes it: the key, what was decided on, the limit,
    the view's inputs and the posting."""

    bucket: int
    scope: str
    key: str
    lock: int
    fingerprint: bytes
    issuer: str
    subject: str
    src_account: str
    src_tier: Tier | None
    dst_bucket: int
    dst_account: str
    dst_tier: Tier | None
    month: date
    limit_kind: domain.LimitKind | None
    limit_lock: int
    currency: str
    amount: int
    limit: int | None
    view: JSON
    posting: Posting


class _Bounded(Generic[K, V]):
    """A dict of at most ``size`` entries; the oldest goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def put(self, key: K, value: V) -> None:
        if self.size <= 0:
            return
        self._items.pop(key, None)
        while len(self._items) >= self.size:
            del self._items[next(iter(self._items))]
        self._items[key] = value


class PartyCache:
    """The parties of recent transfers: source wallets by (wallet, caller), recipients by number.
    Only what the transfer's statement checks again may go stale here (membership, tiers);
    wallets, accounts, kinds, currencies and numbers never change."""

    def __init__(self, size: int) -> None:
        self.src: _Bounded[tuple[str, str, str], WalletAccess] = _Bounded(size)
        self.dst: _Bounded[tuple[int, str], WalletAccess] = _Bounded(size)

    def forget(self, src: tuple[str, str, str], dst: tuple[int, str]) -> None:
        self.src.pop(src)
        self.dst.pop(dst)


class WalletService:
    def __init__(
        self, pool: asyncpg.Pool, store: LedgerStore, fees: Fees, settings: WalletApiSettings
    ) -> None:
        self.pool = pool
        self.store = store
        self.fees = fees
        self.settings = settings
        self._parties = PartyCache(settings.party_cache_size)
        # Concurrent transfers share a statement and a commit; two of one source account never
        # share a batch (wallet.transfer_batch would answer "retry" to the second). One writer
        # drains; spares only beside a stalled batch (settings).
        spare_after_ms = settings.transfer_spare_after_ms
        self._transfers: Coalescer[TransferItem, JSON] = Coalescer(
            self._transfer_batch,
            writers=max(1, settings.transfer_writers),
            max_batch=max(1, settings.transfer_max_batch) if settings.transfer_writers > 0 else 1,
            conflict_key=lambda item: (item.bucket, item.src_account),
            spare_after_s=spare_after_ms / 1000 if spare_after_ms > 0 else None,
        )

    # -- transactions -------------------------------------------------------------------------

    async def _in_transaction(self, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
        """Run ``work`` in one transaction; retried on a deadlock or serialization failure. A
        ProblemError raised by ``work`` rolls everything back: a refusal writes nothing."""

        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    return await work(conn)
            except (ProblemError, asyncio.CancelledError):
                raise
            except ledger_errors.LedgerError as exc:
                if _is_retryable(exc) and attempt < RETRY_ATTEMPTS:
                    await asyncio.sleep(0.005 * attempt)
                    continue
                raise errors.from_ledger(exc) from exc
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                if _is_retryable(exc) and attempt < RETRY_ATTEMPTS:
                    await asyncio.sleep(0.005 * attempt)
                    continue
                log.warning("database error", error=repr(exc))
                raise errors.Unavailable("the database is not available; retry") from exc
        raise AssertionError("unreachable")

    async def _idempotent(
        self,
        bucket: int,
        caller: Caller,
        key: str,
        fingerprint: bytes,
        work: Callable[[asyncpg.Connection], Awaitable[Answer]],
    ) -> Answer:
        """The first answer for (bucket, caller, key), stored in the same transaction as what the
        request did; a repeat with the same request gets it back, with another request 422.

        "Still running" is detected with ``pg_try_advisory_xact_lock`` on a hash of the bucket,
        the caller and the key, taken first in the transaction: a second request with the key
        does not wait (a row lock or the unique index would make it wait for the first one's
        commit) but answers 409 at once, and the lock goes away with the first transaction,
        committed or not. After the first one commits, the record is visible to the next
        statement (READ COMMITTED), so a retry gets the stored answer. The lock and the read are
        one statement, whose snapshot may predate the first one's commit: then the insert of the
        record meets the first one's row (unique violation), everything rolls back, and the
        retry answers the stored answer. Refusals raise and roll
        back, so they are not stored: the key can be used again once the cause is fixed
        (SYSTEM.md: a refused movement leaves nothing behind)."""

        async def run(conn: asyncpg.Connection) -> Answer:
            begun = await conn.fetchrow(
                Q["idempotency_begin"], bucket, caller.scope, key, _lock_key(bucket, caller.scope, key)
            )
            stored = _stored_answer(begun, fingerprint)
            if stored is not None:
                return stored
            answer = await work(conn)
            await conn.execute(
                Q["idempotency_put"], bucket, caller.scope, key, fingerprint, answer.status, answer.body
            )
            return answer

        result: Answer = await self._in_transaction(run)
        return result

    # -- access ---------------------------------------------------------------------------------

    async def _own_wallet(
        self, db: asyncpg.Connection | asyncpg.Pool, caller: Caller, wallet_id: str
    ) -> WalletAccess:
        access = await Repo(db).wallet_with_access(
            domain.bucket_in(wallet_id), wallet_id, caller.issuer, caller.subject
        )
        if access is None or not access.member:
            raise errors.NotFound("no such wallet")
        return access

    async def _own_account(self, caller: Caller, account_id: str) -> AccountRow:
        bucket = domain.bucket_in(account_id)
        repo = Repo(self.pool)
        if not await repo.is_member(bucket, account_id, caller.issuer, caller.subject):
            raise errors.NotFound("no such account")
        account = await repo.account(bucket, account_id)
        if account is None:
            raise errors.NotFound("no such account")
        return account

    def _require_onboarding(self, caller: Caller) -> None:
        if not (caller.is_service_account and caller.azp == self.settings.onboarding_client):
            raise errors.OnboardingOnly(
                "only onboarding's client may open personal accounts and change tiers"
            )

    def _check_currency(self, currency: str) -> str:
        if currency not in self.settings.currencies:
            raise errors.UnsupportedCurrency(
                f"{currency} is not supported", currency=currency, supported=list(self.settings.currencies)
            )
        return currency

    # -- accounts ---------------------------------------------------------------------------------

    async def open_personal(self, caller: Caller, subject: str) -> tuple[JSON, bool]:
        """Onboarding opens a personal account for the customer ``subject`` (of the customer
        realm), who becomes its member; with a TRY wallet. At most one per person: opening it
        again answers the existing account (False: not created now)."""
        self._require_onboarding(caller)
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
            assert found is not None
            return await self._account_as_is(*found), False
        return await self._account_as_is(account_id, domain.bucket_in(account_id)), True

    async def open_business(self, name: str, *, operator: str) -> JSON:
        """An operator opens a business account (until the staff side exists), with a TRY wallet."""
        rules.check_text(name, "name")
        account_id = await self._open_account(
            kind=AccountKind.BUSINESS, tier=None, name=name, opened_by=operator, members=[]
        )
        assert account_id is not None
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

        await self._in_transaction(work)
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
        bucket = random_bucket()
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
            await self._in_transaction(work)
        except _AlreadyOpen:
            return None
        return account_id

    async def _add_wallet(
        self, conn: asyncpg.Connection, bucket: int, account_id: str, currency: str, *, owner: str
    ) -> WalletRow:
        wallet_id = f"{bucket:04d}:w:{new_id()}"
        await self.store.open_wallet(wallet_id, currency, owner=owner, conn=conn)
        for _ in range(5):
            number = domain.new_wallet_number(bucket)
            # A savepoint: a (rare) number collision retries without losing the transaction.
            try:
                async with conn.transaction():
                    await conn.execute(Q["insert_wallet"], bucket, wallet_id, account_id, currency, number)
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name == "wallets_number_unique":
                    continue
                raise
            found = await Repo(conn).wallet_of(bucket, account_id, currency)
            assert found is not None
            return found
        raise errors.Unavailable("could not allocate a wallet number; retry")

    async def _account_as_is(self, account_id: str, bucket: int) -> JSON:
        repo = Repo(self.pool)
        account = await repo.account(bucket, account_id)
        if account is None:
            raise errors.NotFound("no such account")
        return account_view(account, await repo.wallets_of(bucket, account_id))

    async def raise_tier(self, caller: Caller, account_id: str, tier: Tier) -> JSON:
        self._require_onboarding(caller)
        bucket = domain.bucket_in(account_id)

        async def work(conn: asyncpg.Connection) -> None:
            account = await Repo(conn).account(bucket, account_id, for_update=True)
            if account is None:
                raise errors.NotFound("no such account")
            if account.kind is not AccountKind.PERSONAL or account.tier is None:
                raise errors.NotPersonal("only a personal account has a tier")
            if domain.check_tier_raise(account.tier, tier):
                await conn.execute(Q["set_tier"], bucket, account_id, tier.value)

        await self._in_transaction(work)
        return await self._account_as_is(account_id, bucket)

    async def accounts(self, caller: Caller) -> list[JSON]:
        found = await Repo(self.pool).accounts_of(caller.issuer, caller.subject)
        return [await self._account_as_is(account_id, bucket) for account_id, bucket in found]

    async def account(self, caller: Caller, account_id: str) -> JSON:
        account = await self._own_account(caller, account_id)
        return account_view(account, await Repo(self.pool).wallets_of(account.bucket, account.id))

    async def open_wallet(self, caller: Caller, account_id: str, currency: str) -> tuple[JSON, bool]:
        """A wallet of another currency for an account of the caller (one per currency)."""
        self._check_currency(currency)
        account = await self._own_account(caller, account_id)

        async def work(conn: asyncpg.Connection) -> tuple[WalletRow, bool]:
            await Repo(conn).account(account.bucket, account.id, for_update=True)  # one opener at a time
            existing = await Repo(conn).wallet_of(account.bucket, account.id, currency)
            if existing is not None:
                return existing, False
            return await self._add_wallet(conn, account.bucket, account.id, currency, owner=account.id), True

        wallet, created = await self._in_transaction(work)
        return await self.wallet(caller, wallet.id), created

    # -- wallets ----------------------------------------------------------------------------------

    async def wallet(self, caller: Caller, wallet_id: str) -> JSON:
        access = await self._own_wallet(self.pool, caller, wallet_id)
        balance = await self._ledger(self.store.wallet_balance(wallet_id))
        return {
            **wallet_ref(access.wallet),
            "account_id": access.wallet.account_id,
            "cash": balance.cash,
            "promo": balance.promo,
            "held": balance.held,
            "available": balance.available,
        }

    async def statement(
        self, caller: Caller, wallet_id: str, *, purse: str, cursor: str | None, limit: int
    ) -> JSON:
        await self._own_wallet(self.pool, caller, wallet_id)
        statement = await self._ledger(
            self.store.statement(f"{wallet_id}:{purse}", cursor=cursor, limit=limit)
        )
        return {
            "wallet_id": wallet_id,
            "purse": purse,
            "lines": [
                {
                    "transaction_id": line.transaction_id,
                    "type": line.type,
                    "reference": line.ref,
                    "amount": line.amount,
                    "currency": line.currency,
                    "balance_after": line.balance_after,
                    "version": line.version,
                    "posted_at": _ts(line.posted_at),
                }
                for line in statement.lines
            ],
            "next_cursor": statement.next_cursor,
        }

    async def promos(self, caller: Caller, wallet_id: str) -> JSON:
        await self._own_wallet(self.pool, caller, wallet_id)
        batches = await self._ledger(self.store.promo_batches(wallet_id))
        return {
            "wallet_id": wallet_id,
            "batches": [
                {
                    "id": b.id,
                    "funded_by": b.funded_by,
                    "amount": b.amount,
                    "remaining": b.remaining,
                    "expires_at": _ts(b.expires_at),
                    "grant_transaction_id": b.grant_transaction_id,
                }
                for b in batches
            ],
        }

    async def _ledger(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except ledger_errors.LedgerError as exc:
            raise errors.from_ledger(exc) from exc
        except (asyncpg.PostgresError, OSError) as exc:
            raise errors.Unavailable("the database is not available; retry") from exc

    # -- money ------------------------------------------------------------------------------------

    async def transfer(
        self,
        caller: Caller,
        key: str | None,
        *,
        from_wallet: str,
        to_wallet_number: str,
        amount: int,
        currency: str,
        reference: str | None,
    ) -> Answer:
        """p2p, payment, B2P or B2B, by the kinds of the two accounts; one ledger transaction.

        One statement in the common case: the parties come from the cache (a statement to read
        them otherwise), and everything that writes is one call of wallet.transfer_batch,
        shared with the transfers that arrive at the same moment (migration 0005). That call
        checks again, under the key's lock, what was decided here from the cache (membership
        and tiers) and answers "stale" when it changed: then the parties are read again and
        the decision made again. A refusal at any point writes nothing."""
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(from_wallet)
        payload = {
            "from_wallet": from_wallet,
            "to_wallet_number": to_wallet_number,
            "amount": amount,
            "currency": currency,
            "reference": reference,
        }
        fingerprint = request_hash("transfer", payload)
        to_bucket, number = domain.parse_wallet_number(to_wallet_number)
        self._check_currency(currency)
        must_read = False
        for _ in range(TRANSFER_ATTEMPTS):
            src_key, dst_key = (from_wallet, caller.issuer, caller.subject), (to_bucket, number)
            src, dst = self._parties.src.get(src_key), self._parties.dst.get(dst_key)
            cached = not must_read and src is not None and dst is not None
            if not cached:
                read = await self._read_parties(
                    caller, key, fingerprint, bucket, from_wallet, to_bucket, number
                )
                if isinstance(read, Answer):
                    return read
                src, dst = read
            assert src is not None and dst is not None
            try:
                item = self._transfer_item(caller, key, fingerprint, src, dst, amount, currency, reference)
            except ProblemError:
                if not cached:
                    raise
                # Refused on what the cache knew: a tier may have risen since. Read and decide
                # again before refusing.
                self._parties.forget(src_key, dst_key)
                must_read = True
                continue
            answer = await self._transfers.submit(item)
            if "result" in answer:
                return Answer(201, _view_of_posted({"result": answer["result"], "view": item.view}))
            if answer.get("stale"):
                # Membership or a tier changed since the cache saw them: read and decide again.
                self._parties.forget(src_key, dst_key)
                must_read = True
                continue
            if answer.get("retry"):
                # Another transfer of this source shared the batch (the coalescer keeps them
                # apart, so this is rare): send it again as it is.
                continue
            return self._refused(item, answer)
        raise errors.Unavailable("the transfer could not be decided; retry")

    async def _read_parties(
        self,
        caller: Caller,
        key: str,
        fingerprint: bytes,
        bucket: int,
        from_wallet: str,
        to_bucket: int,
        number: str,
    ) -> Answer | tuple[WalletAccess, WalletAccess]:
        """Both parties, read (and cached for the next transfer); or the key's stored answer."""
        try:
            rows = await self.pool.fetch(
                Q["transfer_parties"],
                bucket,
                from_wallet,
                to_bucket,
                number,
                caller.issuer,
                caller.subject,
                caller.scope,
                key,
            )
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
            log.warning("database error", error=repr(exc))
            raise errors.Unavailable("the database is not available; retry") from exc
        stored = _stored_answer(rows[0], fingerprint)
        if stored is not None:
            return stored
        src = next((adapters.wallet_access(r) for r in rows if r["id"] is not None and r["is_source"]), None)
        dst = next((adapters.wallet_access(r, False) for r in rows if r["number"] == number), None)
        if src is None or not src.member:
            raise errors.NotFound("no such wallet")
        if dst is None:
            raise errors.RecipientNotFound("no wallet has this number")
        self._parties.src.put((from_wallet, caller.issuer, caller.subject), src)
        self._parties.dst.put((to_bucket, number), dst)
        return src, dst

    def _transfer_item(
        self,
        caller: Caller,
        key: str,
        fingerprint: bytes,
        src: WalletAccess,
        dst: WalletAccess,
        amount: int,
        currency: str,
        reference: str | None,
    ) -> TransferItem:
        """What may be moved, decided from both parties: the posting and what to check with it."""
        if dst.wallet.id == src.wallet.id:
            raise errors.SameWallet("a wallet cannot send to itself")
        if currency != src.wallet.currency or currency != dst.wallet.currency:
            raise errors.CurrencyMismatch(
                "both wallets must hold the request's currency",
                currency=currency,
                from_currency=src.wallet.currency,
                to_currency=dst.wallet.currency,
            )
        type_ = domain.transfer_type(src.kind, dst.kind)
        domain.check_may_send(src.kind, src.tier, type_)
        domain.check_may_receive(dst.kind, dst.tier)
        # A personal account's transfers count against its tier's monthly limit.
        kind = domain.limit_kind(type_) if src.kind is AccountKind.PERSONAL and src.tier else None
        ref = reference or f"{type_.value} to {dst.wallet.number}"
        if type_ is TxType.PAYMENT:
            posting = rules.payment(
                new_id(),
                src.wallet.id,
                dst.wallet.id,
                amount,
                currency,
                fee=self.fees.payment,
                actor=caller.actor,
                ref=ref,
            )
        else:
            posting = rules.transfer(
                new_id(),
                src.wallet.id,
                dst.wallet.id,
                amount,
                currency,
                actor=caller.actor,
                ref=ref,
                type_=type_,
            )
        bucket, account = src.wallet.bucket, src.wallet.account_id
        month = _this_month()
        return TransferItem(
            bucket=bucket,
            scope=caller.scope,
            key=key,
            lock=_lock_key(bucket, caller.scope, key),
            fingerprint=fingerprint,
            issuer=caller.issuer,
            subject=caller.subject,
            src_account=account,
            src_tier=src.tier,
            dst_bucket=dst.wallet.bucket,
            dst_account=dst.wallet.account_id,
            dst_tier=dst.tier,
            month=month,
            limit_kind=kind,
            # 0 when no limit applies (wallet.transfer_batch then takes no limit lock)
            limit_lock=_lock_key(bucket, f"limit:{account}", f"{month}:{kind}:{currency}") if kind else 0,
            currency=currency,
            amount=amount,
            limit=self.settings.monthly_limit(src.tier, kind) if kind and src.tier else None,
            view={"type": type_.value, "ref": ref, "metadata": posting.metadata, "currency": currency},
            posting=posting,
        )

    def _refused(self, item: TransferItem, answer: JSON) -> Answer:
        """An answer of wallet.transfer_batch other than posted, stale or retry."""
        if answer.get("in_progress"):
            raise _in_progress()
        if answer.get("reused"):
            raise _reused()
        if "stored" in answer:
            found = answer["stored"]
            return _replay(found["status"], found["body"], found["posted"])
        if "limit" in answer and item.limit_kind and item.src_tier:
            self._check_limit(
                item.src_tier, item.limit_kind, item.currency, item.amount, answer["limit"]["used"]
            )
        try:
            LedgerStore.post_answer(answer)  # a refusal: raises the ledger's error
        except ledger_errors.LedgerError as refused:
            raise errors.from_ledger(refused) from refused
        raise AssertionError(f"unexpected answer from wallet.transfer_batch: {answer}")

    async def _transfer_batch(self, items: Sequence[TransferItem]) -> list[JSON | BaseException]:
        """One call of wallet.transfer_batch: an answer per transfer. Retried whole after a
        deadlock or serialization failure; any other failure of a batch of many makes each
        transfer go alone, so one cannot take its neighbours down."""
        args = (
            [i.bucket for i in items],
            [i.scope for i in items],
            [i.key for i in items],
            [i.lock for i in items],
            [i.fingerprint for i in items],
            [i.issuer for i in items],
            [i.subject for i in items],
            [i.src_account for i in items],
            [i.src_tier for i in items],
            [i.dst_bucket for i in items],
            [i.dst_account for i in items],
            [i.dst_tier for i in items],
            [i.month for i in items],
            [i.limit_kind for i in items],
            [i.limit_lock for i in items],
            [i.currency for i in items],
            [i.amount for i in items],
            [i.limit for i in items],
            [i.view for i in items],
            self.store.batch_arguments([i.posting for i in items]),
        )
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                answers: list[JSON] = await self.pool.fetchval(Q["transfer_batch"], *args)
                return list(answers)
            except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError) as exc:
                if attempt == RETRY_ATTEMPTS:
                    return [errors.Unavailable("the database is busy; retry")] * len(items)
                log.info("transfer batch retried", error=repr(exc))
                await asyncio.sleep(0.005 * attempt)
            except asyncpg.PostgresError as exc:
                if len(items) > 1:
                    return [answer for item in items for answer in await self._transfer_batch([item])]
                return [errors.from_ledger(translate(exc))]
            except (OSError, asyncpg.InterfaceError) as exc:
                log.warning("database error", error=repr(exc))
                return [errors.Unavailable("the database is not available; retry")] * len(items)
        raise AssertionError("unreachable")

    def _check_limit(self, tier: Tier, kind: domain.LimitKind, currency: str, amount: int, used: int) -> None:
        limit = self.settings.monthly_limit(tier, kind)
        if used > limit:
            raise errors.MonthlyLimitExceeded(
                f"this {kind.value} would exceed the monthly limit of the {tier.value} tier",
                kind=kind.value,
                tier=tier.value,
                currency=currency,
                limit=limit,
                used=used - amount,
                remaining=max(0, limit - (used - amount)),
                amount=amount,
            )

    async def refund(
        self, caller: Caller, key: str | None, transfer_id: str, reference: str | None
    ) -> Answer:
        """The business that received a payment gives it back: all its legs negated, once."""
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(transfer_id)
        payload = {"transfer_id": transfer_id, "reference": reference}

        async def work(conn: asyncpg.Connection) -> Answer:
            original = await self._visible_transaction(caller, transfer_id, conn)
            payee = original.view["to_wallet"]
            if original.type != TxType.PAYMENT or original.mine.get(payee) is not AccountKind.BUSINESS:
                raise errors.NotRefundable(
                    "only a payment can be refunded, by the business that received it",
                    transfer_id=transfer_id,
                    transfer_type=original.type,
                )
            posting = rules.refund(original.tx, actor=caller.actor, ref=reference)
            result = await self.store.post(posting, conn=conn)
            if result.replayed:
                raise errors.AlreadyRefunded("this payment has been refunded already", refund_id=result.id)
            currency = original.tx.legs[0].currency
            return Answer(201, _view_of_post(result, TxType.REFUND, posting.ref, {}, currency, transfer_id))

        return await self._idempotent(bucket, caller, key, request_hash("refund", payload), work)

    async def promo_grant(
        self,
        caller: Caller,
        key: str | None,
        *,
        from_wallet: str,
        to_wallet_number: str,
        amount: int,
        currency: str,
        expires_at: datetime,
        reference: str | None,
    ) -> Answer:
        """A business gives promo money to a customer; what is left at expiry returns to it."""
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(from_wallet)
        payload = {
            "from_wallet": from_wallet,
            "to_wallet_number": to_wallet_number,
            "amount": amount,
            "currency": currency,
            "expires_at": expires_at.isoformat(),
            "reference": reference,
        }

        async def work(conn: asyncpg.Connection) -> Answer:
            src = await self._own_wallet(conn, caller, from_wallet)
            if src.kind is not AccountKind.BUSINESS:
                raise errors.TierNotAllowed("only a business grants promo money", operation="promo_grant")
            now = datetime.now(UTC)
            if not now + timedelta(minutes=1) <= expires_at <= now + timedelta(days=PROMO_MAX_DAYS):
                raise errors.InvalidRequest(
                    f"expires_at must be between a minute and {PROMO_MAX_DAYS} days from now",
                    field="expires_at",
                )
            to_bucket, number = domain.parse_wallet_number(to_wallet_number)
            dst = await Repo(conn).wallet_by_number(to_bucket, number)
            if dst is None:
                raise errors.RecipientNotFound("no wallet has this number")
            if dst.kind is not AccountKind.PERSONAL:
                raise errors.RecipientCannotReceive("promo money goes to personal accounts only")
            domain.check_may_receive(dst.kind, dst.tier)
            self._check_currency(currency)
            if currency != src.wallet.currency or currency != dst.wallet.currency:
                raise errors.CurrencyMismatch(
                    "both wallets must hold the request's currency", currency=currency
                )
            ref = reference or f"promo to {number}"
            posting = rules.promo_grant(
                new_id(),
                dst.wallet.id,
                amount,
                currency,
                expires_at=expires_at,
                actor=caller.actor,
                ref=ref,
                business=src.wallet.id,
            )
            # The promo batch lives in the customer's bucket, so the posting's home is there.
            result = await self.store.post(posting, conn=conn)
            return Answer(201, _view_of_post(result, TxType.PROMO_GRANT, ref, posting.metadata, currency))

        return await self._idempotent(bucket, caller, key, request_hash("promo", payload), work)

    # -- reading transfers --------------------------------------------------------------------------

    async def transfer_of(self, caller: Caller, transfer_id: str) -> JSON:
        return (await self._visible_transaction(caller, transfer_id, self.pool)).view

    async def _visible_transaction(
        self, caller: Caller, transfer_id: str, db: asyncpg.Connection | asyncpg.Pool
    ) -> _Visible:
        domain.bucket_in(transfer_id)
        try:
            tx = await self.store.transaction(transfer_id)
        except ledger_errors.AccountNotFound:
            raise errors.NotFound("no such transfer") from None
        except ledger_errors.LedgerError as exc:
            raise errors.from_ledger(exc) from exc
        view = _view_of_transaction(tx)
        wallets = sorted({leg["wallet"] for leg in view["legs"] if leg["wallet"]})
        mine = await Repo(db).member_wallets(
            [domain.bucket_in(w) for w in wallets], wallets, caller.issuer, caller.subject
        )
        if not mine:
            raise errors.NotFound("no such transfer")
        return _Visible(tx, view, tx.type, mine)

    # -- housekeeping -------------------------------------------------------------------------------

    async def purge_idempotency(self, *, batch: int = 1000, max_rounds: int = 100) -> int:
        cutoff = datetime.now(UTC) - timedelta(hours=self.settings.idempotency_retention_h)
        purged = 0
        for _ in range(max_rounds):
            status = await self.pool.execute(Q["idempotency_purge"], cutoff, batch)
            n = int(status.split()[-1])
            purged += n
            if n < batch:
                break
        return purged


@dataclass(frozen=True)
class _Visible:
    tx: TransactionView
    view: JSON
    type: str
    mine: dict[str, AccountKind]


class _AlreadyOpen(Exception):
    """The person's personal account was opened by a concurrent request."""
