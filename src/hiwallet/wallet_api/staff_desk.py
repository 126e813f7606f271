"""What employees do in wallet-api that moves no money: find a customer, read their record
(accounts, members, wallets, balances, movements with who made each), open business
accounts and link merchant integrations to them (what ``hiwallet business`` does for a shell),
and raise a personal account to the Contracted tier on recorded evidence (``customer.contract``).

Membership is not asked (with ``customer.view`` an employee views any customer's record:
docs/architecture.md, "Tokens and realms"); the permission was checked before a method here is
called (contracts.staff).
Every read of a customer's record is logged with the employee as the actor and the ids read (no
personal data), so who looked at whom can be answered.
"""

from __future__ import annotations

import asyncpg
import structlog

from hiwallet import ledger
from hiwallet.wallet_api import domain, errors
from hiwallet.wallet_api.accounts import Accounts, counterparties
from hiwallet.wallet_api.adapters import Q, Repo
from hiwallet.wallet_api.domain import AccountKind
from hiwallet.wallet_api.identities import CustomerIdentities
from hiwallet.wallet_api.retry import answered, in_transaction
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.views import JSON, account_view, ts, wallet_ref

log = structlog.get_logger(__name__)

MAX_FOUND = 20


class StaffDesk:
    def __init__(
        self,
        pool: asyncpg.Pool,
        the_ledger: ledger.Ledger,
        settings: WalletApiSettings,
        identities: CustomerIdentities,
    ) -> None:
        self.pool = pool
        self.ledger = the_ledger
        self.settings = settings
        self.identities = identities
        self.accounts = Accounts(pool, the_ledger, settings)

    # -- finding a customer ---------------------------------------------------------------------

    async def find(
        self,
        actor: str,
        *,
        wallet_number: str | None = None,
        account_id: str | None = None,
        email: str | None = None,
    ) -> JSON:
        """The accounts found by exactly one of the three keys (none found: an empty list)."""
        given = [
            k
            for k, v in (("wallet_number", wallet_number), ("account_id", account_id), ("email", email))
            if v
        ]
        if len(given) != 1:
            raise errors.InvalidRequest(
                "give exactly one of wallet_number, account_id and email", field="query"
            )
        repo = Repo(self.pool)
        found: list[tuple[str, int]] = []
        if wallet_number:
            try:
                bucket, number = domain.parse_wallet_number(wallet_number)
            except (errors.InvalidWalletNumber, errors.RecipientNotFound):
                bucket, number = 0, ""
            wallet = await repo.wallet_by_number(bucket, number) if number else None
            if wallet is not None:
                found.append((wallet.wallet.account_id, wallet.wallet.bucket))
        elif account_id:
            try:
                bucket = domain.bucket_in(domain.path_id(account_id, "account"))
            except errors.NotFound:
                bucket = 0
            if bucket and await repo.account(bucket, account_id) is not None:
                found.append((account_id, bucket))
        elif email:
            for subject in await self.identities.subjects_by_email(email):
                found.extend(await repo.accounts_of(self.settings.customer_issuer, subject))
        found = list(dict.fromkeys(found))[:MAX_FOUND]
        log.info("staff searched customers", actor=actor, by=given[0], found=len(found))
        return {"accounts": [await self._record(account_id, bucket) for account_id, bucket in found]}

    # -- a customer's record --------------------------------------------------------------------

    async def account(self, actor: str, account_id: str) -> JSON:
        """An account with its members (and who added them), wallets and their balances."""
        bucket = domain.bucket_in(account_id)
        record = await self._record(account_id, bucket, balances=True)
        log.info("staff read account", actor=actor, account_id=account_id)
        return record

    async def statement(
        self, actor: str, wallet_id: str, *, purse: str, cursor: str | None, limit: int
    ) -> JSON:
        """A wallet's movements as its members see them, and who made each (``actor``: an
        employee is ``staff:<sub>``)."""
        bucket = domain.bucket_in(wallet_id)
        account_id = await Repo(self.pool).account_of_wallet(bucket, wallet_id)
        if account_id is None:
            raise errors.NotFound("no such wallet")
        account = f"{wallet_id}:{purse}"
        statement = await answered(self.ledger.statement(account, cursor=cursor, limit=limit))
        ids = sorted({line.transaction_id for line in statement.lines})
        actors = await answered(self.ledger.actors(account, ids))
        parties = await counterparties(self.pool, self.ledger, account, ids)
        log.info("staff read statement", actor=actor, wallet_id=wallet_id)
        return {
            "wallet_id": wallet_id,
            "account_id": account_id,
            "purse": purse,
            "lines": [
                {
                    "transaction_id": line.transaction_id,
                    "type": line.type,
                    "reference": line.ref,
                    "actor": actors.get(line.transaction_id),
                    "amount": line.amount,
                    "currency": line.currency,
                    "balance_after": line.balance_after,
                    "version": line.version,
                    "posted_at": ts(line.posted_at),
                    "counterparty": parties.get(line.transaction_id),
                }
                for line in statement.lines
            ],
            "next_cursor": statement.next_cursor,
        }

    async def _record(self, account_id: str, bucket: int, *, balances: bool = False) -> JSON:
        repo = Repo(self.pool)
        account = await repo.account(bucket, account_id)
        if account is None:
            raise errors.NotFound("no such account")
        wallets = await repo.wallets_of(bucket, account_id)
        view = account_view(account, wallets)
        view["opened_by"] = await repo.opened_by(bucket, account_id)
        view["members"] = [
            {
                "issuer": m["issuer"],
                "subject": m["subject"],
                "added_by": m["added_by"],
                "added_at": ts(m["created_at"]),
            }
            for m in await repo.members_of(bucket, account_id)
        ]
        if balances:
            shown = []
            for wallet in wallets:
                balance = await answered(self.ledger.wallet_balance(wallet.id))
                shown.append(
                    {
                        **wallet_ref(wallet),
                        "account_id": account_id,
                        "cash": balance.cash,
                        "promo": balance.promo_live,  # never expired promo, even before the job returned it
                        "held": balance.held,
                        "available": balance.available,
                    }
                )
            view["wallets"] = shown
        return view

    # -- the Contracted tier ----------------------------------------------------------------------

    async def contract(self, actor: str, account_id: str, evidence: str, reference: str) -> JSON:
        """Raise a personal account to the Contracted tier on the evidence the employee records
        (``evidence``: remote identity verification or a signed agreement; ``reference``: the
        evidence's own reference), once: the record (who, on what, from which tier, when) and
        the raise commit together. An account contracted already is answered as it is, its
        record unchanged (a tier only goes up; a second record is refused by the database)."""
        bucket = domain.bucket_in(account_id)

        async def work(conn: asyncpg.Connection) -> bool:
            # The account's row lock orders this against onboarding's raise of the same account.
            account = await Repo(conn).account(bucket, account_id, for_update=True)
            if account is None:
                raise errors.NotFound("no such account")
            if account.kind is not AccountKind.PERSONAL or account.tier is None:
                raise errors.NotPersonal("only a personal account has a tier")
            if not domain.check_tier_raise(account.tier, domain.Tier.CONTRACTED):
                return False  # contracted already
            await conn.execute(
                Q["insert_account_contract"],
                bucket,
                account_id,
                evidence,
                reference,
                account.tier.value,
                actor,
            )
            await conn.execute(Q["set_tier"], bucket, account_id, domain.Tier.CONTRACTED.value)
            return True

        raised = await in_transaction(self.pool, work)
        # The audit line: who raised whom, on which kind of evidence (its reference is in the
        # record, not in the log).
        log.info(
            "staff raised tier to contracted" if raised else "staff contract: contracted already",
            actor=actor,
            account_id=account_id,
            evidence=evidence,
        )
        view = await self._record(account_id, bucket)
        row = await self.pool.fetchrow(Q["account_contract"], bucket, account_id)
        view["contract"] = (
            None  # contracted before records were kept (onboarding's raise)
            if row is None
            else {
                "evidence": row["evidence"],
                "evidence_ref": row["evidence_ref"],
                "previous_tier": row["previous_tier"],
                "recorded_by": row["recorded_by"],
                "recorded_at": ts(row["recorded_at"]),
            }
        )
        return view

    # -- business accounts ----------------------------------------------------------------------

    async def open_business(self, actor: str, name: str) -> JSON:
        """A business account with a TRY wallet, opened by the employee (``opened_by``)."""
        opened = await self.accounts.open_business(name, operator=actor)
        log.info("staff opened business account", actor=actor, account_id=opened["id"])
        return await self._record(opened["id"], domain.bucket_in(opened["id"]))

    async def link(self, actor: str, account_id: str, *, client_id: str | None, subject: str | None) -> JSON:
        """A merchant integration (a client of the customer realm, as its service account)
        becomes a member of the business account; the employee is ``added_by``."""
        if (client_id is None) == (subject is None):
            raise errors.InvalidRequest("give exactly one of client_id and subject", field="client_id")
        bucket = domain.bucket_in(account_id)
        account = await Repo(self.pool).account(bucket, account_id)
        if account is None or account.kind is not AccountKind.BUSINESS:
            raise errors.NotFound("no such account")  # as a malformed id: no form leaks
        sub = subject or domain.service_account_subject(self.settings.customer_realm, str(client_id))
        await self.accounts.link(account_id, self.settings.customer_issuer, sub, operator=actor)
        log.info("staff linked a client to a business account", actor=actor, account_id=account_id)
        return await self._record(account_id, bucket)
