"""Money that staff move, and the promo programmes that let a business grant promo.

- platform-funded promo (``promo.staff``): promo_expense −, customer promo +, with an expiry;
  each employee's grants outside a campaign are capped per day;
- campaigns (``campaigns.view`` / ``campaigns.manage``): a budget that grants under the campaign
  take from in their own transaction (the budget row is locked and decremented; a CHECK refuses
  a negative remainder), so concurrent grants never overspend it;
- promo programmes: a business proposes (amount per customer, budget, expiry), an employee with
  ``promo.merchant_accept`` accepts or refuses once; the business's grants (POST /v1/promos) then
  spend the programme's budget as campaign grants spend a campaign's;
- goodwill credits (``credit.goodwill``): goodwill_expense −, customer cash +, with a reason and
  a per-employee daily ceiling; above the threshold the credit waits for a second, different
  employee's approval. A posted credit is never changed: a correction is another movement.
- provider invoices (``finance.invoices``): a provider's invoice paid from our bank account,
  provider_expense −amount, nostro +amount, keyed by (provider, invoice number): the same
  invoice entered twice, under any Idempotency-Key or by the operator's command, is one posting.

Every movement names the employee (``staff:<sub>``) as the ledger transaction's actor; the
customer sees it in their statement (type promo_grant or goodwill, with its reference).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from hiwallet import ledger
from hiwallet.contracts.staff import StaffMember
from hiwallet.core.http.idempotency import check_idempotency_key
from hiwallet.core.ids import derived_id, new_id
from hiwallet.core.queries import load_queries
from hiwallet.ledger import TxType
from hiwallet.wallet_api import domain, errors
from hiwallet.wallet_api.access import check_currency, own_wallet
from hiwallet.wallet_api.adapters import Repo, WalletAccess
from hiwallet.wallet_api.domain import AccountKind, Caller
from hiwallet.wallet_api.idempotency import Answer, idempotent, request_hash
from hiwallet.wallet_api.retry import in_transaction
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.views import JSON, ts, view_of_post

S = load_queries(Path(__file__).parent / "sql" / "staff.sql")

PROMO_MAX_DAYS = 366
MAX_PAGE = 200
GOODWILL = "goodwill"
PROMO = "promo"


_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def record_id(value: str, what: str) -> str:
    """A campaign's, programme's or credit's id from a path: a malformed one names nothing,
    the answer of a missing one (docs/wallet-api.md, the 404 rule)."""
    if not _ID.match(value):
        raise errors.NotFound(f"no such {what}")
    return value


def staff_caller(member: StaffMember) -> Caller:
    """The employee as the idempotency protocol's caller: keys are scoped to ``staff#<sub>``,
    apart from every customer's (whose scope is their issuer's URL and subject)."""
    return Caller("staff", member.subject, None, False)


def check_expiry(expires_at: datetime, *, until: datetime | None = None) -> None:
    now = datetime.now(UTC)
    latest = now + timedelta(days=PROMO_MAX_DAYS)
    if until is not None:
        latest = min(latest, until)
    if not now + timedelta(minutes=1) <= expires_at <= latest:
        raise errors.InvalidRequest(
            "expires_at must be at least a minute from now, within "
            f"{PROMO_MAX_DAYS} days and not after what it is granted under",
            field="expires_at",
        )


def _platform_grant_view(
    result: ledger.PostResult, ref: str, metadata: dict[str, Any], currency: str
) -> JSON:
    view = view_of_post(result, TxType.PROMO_GRANT, ref, metadata, currency)
    view["from_wallet"] = None  # the platform funds it: no wallet paid
    return view


def campaign_view(r: asyncpg.Record) -> JSON:
    return {
        "id": r["id"],
        "name": r["name"],
        "currency": r["currency"].strip(),
        "budget_minor": r["budget_minor"],
        "remaining_minor": r["remaining_minor"],
        "ends_at": ts(r["ends_at"]),
        "created_by": r["created_by"],
        "created_at": ts(r["created_at"]),
    }


def programme_view(r: asyncpg.Record) -> JSON:
    return {
        "id": r["id"],
        "account_id": r["account_id"],
        "wallet_id": r["wallet_id"],
        "name": r["name"],
        "currency": r["currency"].strip(),
        "amount_per_customer": r["amount_per_customer"],
        "budget_minor": r["budget_minor"],
        "remaining_minor": r["remaining_minor"],
        "expires_at": ts(r["expires_at"]),
        "status": r["status"],
        "proposed_by": r["proposed_by"],
        "proposed_at": ts(r["proposed_at"]),
        "decided_by": r["decided_by"],
        "decided_at": ts(r["decided_at"]) if r["decided_at"] else None,
        "decision_reason": r["decision_reason"],
    }


def goodwill_view(r: asyncpg.Record) -> JSON:
    return {
        "id": r["id"],
        "wallet": r["wallet_id"],
        "amount_minor": r["amount_minor"],
        "currency": r["currency"].strip(),
        "reason": r["reason"],
        "status": r["status"],
        "requested_by": r["requested_by"],
        "requested_at": ts(r["requested_at"]),
        "approved_by": r["approved_by"],
        "approved_at": ts(r["approved_at"]) if r["approved_at"] else None,
        "transaction_id": r["transaction_id"],
    }


def _page(rows: list[asyncpg.Record], limit: int) -> str | None:
    return str(rows[-1]["id"]) if len(rows) == limit else None


class StaffMoney:
    def __init__(self, pool: asyncpg.Pool, the_ledger: ledger.Ledger, settings: WalletApiSettings) -> None:
        self.pool = pool
        self.ledger = the_ledger
        self.settings = settings

    # -- shared ---------------------------------------------------------------------------------

    async def _recipient(
        self, conn: asyncpg.Connection, wallet_id: str, *, personal_only: bool
    ) -> WalletAccess:
        """The wallet staff move money to, whoever's it is (staff are members of none)."""
        found = await Repo(conn).wallet_with_access(domain.bucket_in(wallet_id), wallet_id, "", "")
        if found is None:
            raise errors.NotFound("no such wallet")
        if personal_only and found.kind is not AccountKind.PERSONAL:
            raise errors.RecipientCannotReceive("promo money goes to personal accounts only")
        domain.check_may_receive(found.kind, found.tier)
        return found

    async def _count_today(
        self,
        conn: asyncpg.Connection,
        member: StaffMember,
        kind: str,
        currency: str,
        amount: int,
        ceiling: int,
    ) -> int:
        day = datetime.now(UTC).date()
        used = await conn.fetchval(S["daily_usage_add"], member.actor, day, kind, currency, amount, ceiling)
        if used is None:
            before = await conn.fetchval(S["daily_usage_get"], member.actor, day, kind, currency) or 0
            raise errors.DailyCeilingExceeded(
                f"today's {kind} by this employee would pass the daily ceiling",
                ceiling=ceiling,
                used=before,
                amount=amount,
                currency=currency,
            )
        return int(used)

    # -- platform promo (promo.staff) -----------------------------------------------------------

    async def grant_promo(
        self,
        member: StaffMember,
        key: str | None,
        *,
        wallet: str,
        amount: int,
        currency: str,
        expires_at: datetime,
        reference: str | None,
    ) -> Answer:
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(wallet)
        payload = {
            "wallet": wallet,
            "amount": amount,
            "currency": currency,
            "expires_at": expires_at.isoformat(),
            "reference": reference,
        }

        async def work(conn: asyncpg.Connection) -> Answer:
            check_currency(self.settings, currency)
            check_expiry(expires_at)
            dst = await self._recipient(conn, wallet, personal_only=True)
            if dst.wallet.currency != currency:
                raise errors.CurrencyMismatch(
                    "the wallet does not hold the request's currency", currency=currency
                )
            await self._count_today(
                conn, member, PROMO, currency, amount, self.settings.staff_promo_daily_ceiling_minor
            )
            ref = reference or "promo from HiWallet"
            posting = self.ledger.promo_grant_posting(
                new_id(), wallet, amount, currency, expires_at=expires_at, actor=member.actor, ref=ref
            )
            result = await self.ledger.post(posting, conn=conn)
            return Answer(201, _platform_grant_view(result, ref, posting.metadata, currency))

        return await idempotent(
            self.pool, bucket, staff_caller(member), key, request_hash("staff-promo", payload), work
        )

    # -- campaigns (campaigns.view, campaigns.manage) -------------------------------------------

    async def create_campaign(
        self,
        member: StaffMember,
        key: str | None,
        *,
        name: str,
        currency: str,
        budget: int,
        ends_at: datetime,
    ) -> Answer:
        """A campaign (201); the same request under its key again answers that campaign, so a
        double submission makes one."""
        key = check_idempotency_key(key)
        payload = {"name": name, "currency": currency, "budget": budget, "ends_at": ends_at.isoformat()}

        async def work(conn: asyncpg.Connection) -> Answer:
            check_currency(self.settings, currency)
            if ends_at <= datetime.now(UTC):
                raise errors.InvalidRequest("ends_at must be in the future", field="ends_at")
            row = await conn.fetchrow(
                S["campaign_insert"], new_id(), name, currency, budget, ends_at, member.actor
            )
            return Answer(201, campaign_view(row))

        # The central bucket: a campaign is no wallet's (the idempotency record lives there).
        return await idempotent(
            self.pool,
            ledger.CENTRAL_BUCKET,
            staff_caller(member),
            key,
            request_hash("campaign", payload),
            work,
        )

    async def campaign(self, campaign_id: str) -> JSON:
        record_id(campaign_id, "campaign")
        row = await self.pool.fetchrow(S["campaign_get"], campaign_id)
        if row is None:
            raise errors.NotFound("no such campaign")
        return campaign_view(row)

    async def campaigns(self, *, cursor: str | None, limit: int) -> JSON:
        rows = await self.pool.fetch(S["campaigns_list"], cursor, limit)
        return {"campaigns": [campaign_view(r) for r in rows], "next_cursor": _page(rows, limit)}

    async def campaign_grant(
        self,
        member: StaffMember,
        key: str | None,
        campaign_id: str,
        *,
        wallet: str,
        amount: int,
        expires_at: datetime,
        reference: str | None,
    ) -> Answer:
        key = check_idempotency_key(key)
        record_id(campaign_id, "campaign")
        bucket = domain.bucket_in(wallet)
        payload = {
            "campaign": campaign_id,
            "wallet": wallet,
            "amount": amount,
            "expires_at": expires_at.isoformat(),
            "reference": reference,
        }

        async def work(conn: asyncpg.Connection) -> Answer:
            campaign = await conn.fetchrow(S["campaign_get"], campaign_id)
            if campaign is None:
                raise errors.NotFound("no such campaign")
            currency = campaign["currency"].strip()
            if campaign["ends_at"] <= datetime.now(UTC):
                raise errors.CampaignEnded("the campaign has ended", campaign=campaign_id)
            check_expiry(expires_at)
            dst = await self._recipient(conn, wallet, personal_only=True)
            if dst.wallet.currency != currency:
                raise errors.CurrencyMismatch(
                    "the wallet does not hold the campaign's currency", currency=currency
                )
            # The budget row, locked and decremented in this transaction: a concurrent grant
            # waits here and then sees what this one left.
            remaining = await conn.fetchval(S["campaign_spend"], campaign_id, amount)
            if remaining is None:
                raise errors.BudgetExhausted(
                    "the campaign's budget does not hold this amount", campaign=campaign_id, amount=amount
                )
            ref = reference or f"campaign {campaign['name']}"[:140]
            posting = self.ledger.promo_grant_posting(
                new_id(), wallet, amount, currency, expires_at=expires_at, actor=member.actor, ref=ref
            )
            result = await self.ledger.post(posting, conn=conn)
            await conn.execute(
                S["campaign_grant_insert"], campaign_id, result.id, wallet, amount, member.actor
            )
            view = _platform_grant_view(result, ref, posting.metadata, currency)
            return Answer(201, {**view, "campaign": campaign_id, "campaign_remaining_minor": remaining})

        return await idempotent(
            self.pool, bucket, staff_caller(member), key, request_hash("campaign-grant", payload), work
        )

    # -- promo programmes (a business proposes; promo.merchant_accept decides) ------------------

    async def propose_programme(
        self,
        caller: Caller,
        *,
        from_wallet: str,
        name: str,
        amount_per_customer: int,
        budget: int,
        expires_at: datetime,
    ) -> JSON:
        src = await own_wallet(self.pool, caller, from_wallet)
        if src.kind is not AccountKind.BUSINESS:
            raise errors.NotABusiness(
                "only a business proposes a promo programme", operation="promo_programme"
            )
        check_expiry(expires_at)
        if amount_per_customer > budget:
            raise errors.InvalidRequest(
                "amount_per_customer is larger than the budget", field="amount_per_customer"
            )
        row = await self.pool.fetchrow(
            S["programme_insert"],
            new_id(),
            src.wallet.bucket,
            src.wallet.account_id,
            src.wallet.id,
            name,
            src.wallet.currency,
            amount_per_customer,
            budget,
            expires_at,
            caller.actor,
        )
        return programme_view(row)

    async def programmes_of(self, caller: Caller) -> JSON:
        out: list[JSON] = []
        for account_id, bucket in await Repo(self.pool).accounts_of(caller.issuer, caller.subject):
            out.extend(
                programme_view(r)
                for r in await self.pool.fetch(S["programmes_of_account"], bucket, account_id)
            )
        return {"programmes": out}

    async def programme_of(self, caller: Caller, programme_id: str) -> JSON:
        record_id(programme_id, "programme")
        row = await self.pool.fetchrow(S["programme_get"], programme_id)
        if row is None or not await Repo(self.pool).is_member(
            row["bucket"], row["account_id"], caller.issuer, caller.subject
        ):
            raise errors.NotFound("no such programme")
        return programme_view(row)

    async def programmes(self, *, status: str | None, cursor: str | None, limit: int) -> JSON:
        rows = await self.pool.fetch(S["programmes_list"], status, cursor, limit)
        return {"programmes": [programme_view(r) for r in rows], "next_cursor": _page(rows, limit)}

    async def programme(self, programme_id: str) -> JSON:
        record_id(programme_id, "programme")
        row = await self.pool.fetchrow(S["programme_get"], programme_id)
        if row is None:
            raise errors.NotFound("no such programme")
        return programme_view(row)

    async def decide_programme(
        self, member: StaffMember, programme_id: str, *, accept: bool, reason: str | None
    ) -> JSON:
        """Accept or refuse, once. The same decision asked again answers the programme (a
        retried click); the other decision after one is taken is 409."""
        record_id(programme_id, "programme")
        status = "accepted" if accept else "refused"
        row = await self.pool.fetchrow(S["programme_decide"], programme_id, status, member.actor, reason)
        if row is not None:
            return programme_view(row)
        current = await self.pool.fetchrow(S["programme_get"], programme_id)
        if current is None:
            raise errors.NotFound("no such programme")
        if current["status"] == status:
            return programme_view(current)
        raise errors.AlreadyDecided(
            f"the programme was {current['status']} already", programme_status=current["status"]
        )

    async def spend_programme(
        self,
        conn: asyncpg.Connection,
        programme_id: str,
        *,
        business_wallet: str,
        customer_wallet: str,
        amount: int,
        expires_at: datetime | None,
    ) -> datetime:
        """A business's grant under its programme, in the grant's transaction: the programme
        accepted and the business's, before its expiry, within its budget and its amount per
        customer. Answers the grant's expiry (the programme's when none is asked for)."""
        row = await conn.fetchrow(S["programme_get"], programme_id)
        if row is None or row["wallet_id"] != business_wallet:
            raise errors.NotFound("no such programme for this wallet")
        if row["status"] != "accepted":
            raise errors.ProgrammeRequired(
                f"the programme is {row['status']}; promo is granted under an accepted one",
                programme=programme_id,
                programme_status=row["status"],
            )
        until: datetime = row["expires_at"]
        if until <= datetime.now(UTC) + timedelta(minutes=1):
            raise errors.ProgrammeRequired(
                "the programme has expired", programme=programme_id, programme_status="expired"
            )
        expires = expires_at or until
        check_expiry(expires, until=until)
        remaining = await conn.fetchval(S["programme_spend"], programme_id, amount)
        if remaining is None:
            raise errors.BudgetExhausted(
                "the programme's budget does not hold this amount", programme=programme_id, amount=amount
            )
        per_customer = row["amount_per_customer"]
        granted = await conn.fetchval(
            S["programme_receiver_add"], programme_id, customer_wallet, amount, per_customer
        )
        if granted is None:
            raise errors.CustomerAmountExceeded(
                "this customer would receive more than the programme's amount per customer",
                programme=programme_id,
                amount_per_customer=per_customer,
            )
        return expires

    # -- provider invoices (finance.invoices) ---------------------------------------------------

    async def enter_invoice(
        self,
        member: StaffMember,
        key: str | None,
        *,
        provider: str,
        invoice_number: str,
        amount: int,
        currency: str,
        period: str | None = None,
    ) -> Answer:
        """The provider's invoice for the month ``period`` (default: last month), paid from
        nostro (201); the same invoice again is the first answer (the ledger's key), another
        amount, currency or month under its number 409."""
        key = check_idempotency_key(key)
        # The request as given (no month: last month, as of the first try), so that a replay
        # in another month is still the same request.
        payload = {
            "provider": provider,
            "invoice": invoice_number,
            "amount": amount,
            "currency": currency,
            "period": period,
        }
        billed = billing_period(period, datetime.now(UTC))

        async def work(conn: asyncpg.Connection) -> Answer:
            check_currency(self.settings, currency)
            return Answer(
                201,
                await enter_provider_invoice(
                    self.ledger,
                    provider=provider,
                    invoice_number=invoice_number,
                    amount=amount,
                    currency=currency,
                    period=billed,
                    actor=member.actor,
                    conn=conn,
                ),
            )

        # The central bucket: an invoice is no wallet's (the idempotency record lives there).
        return await idempotent(
            self.pool,
            ledger.CENTRAL_BUCKET,
            staff_caller(member),
            key,
            request_hash("invoice", payload),
            work,
        )

    # -- goodwill credits (credit.goodwill) -----------------------------------------------------

    async def request_goodwill(
        self, member: StaffMember, key: str | None, *, wallet: str, amount: int, reason: str
    ) -> Answer:
        """At or below the threshold: posted now (201). Above: pending (202) until another
        employee approves. Either counts against the requester's daily ceiling at once."""
        key = check_idempotency_key(key)
        bucket = domain.bucket_in(wallet)
        payload = {"wallet": wallet, "amount": amount, "reason": reason}

        async def work(conn: asyncpg.Connection) -> Answer:
            dst = await self._recipient(conn, wallet, personal_only=False)
            currency = dst.wallet.currency
            await self._count_today(
                conn, member, GOODWILL, currency, amount, self.settings.goodwill_daily_ceiling_minor
            )
            row = await conn.fetchrow(
                S["goodwill_insert"], new_id(), bucket, wallet, currency, amount, reason, member.actor
            )
            if amount > self.settings.goodwill_approval_threshold_minor:
                return Answer(202, goodwill_view(row))
            return Answer(201, goodwill_view(await self._post_goodwill(conn, row, approver=None)))

        return await idempotent(
            self.pool, bucket, staff_caller(member), key, request_hash("goodwill", payload), work
        )

    async def _post_goodwill(
        self, conn: asyncpg.Connection, row: asyncpg.Record, *, approver: str | None
    ) -> asyncpg.Record:
        # Keyed by the credit: however often it is posted, it moves once.
        posting = self.ledger.goodwill_posting(
            f"goodwill:{derived_id('goodwill', row['id'])}",
            row["wallet_id"],
            row["amount_minor"],
            row["currency"].strip(),
            # the approver is who lets the money move; the requester is on the credit's record
            actor=approver or row["requested_by"],
            ref=f"goodwill: {row['reason']}"[:200],
        )
        result = await self.ledger.post(posting, conn=conn)
        posted: asyncpg.Record = await conn.fetchrow(S["goodwill_posted"], row["id"], result.id, approver)
        return posted

    async def approve_goodwill(self, member: StaffMember, credit_id: str) -> JSON:
        """The second pair of eyes: another employee posts a pending credit. Asked again once
        posted, it answers the credit (nothing moves twice: the posting is keyed by it)."""
        record_id(credit_id, "goodwill credit")

        async def work(conn: asyncpg.Connection) -> JSON:
            row = await conn.fetchrow(S["goodwill_get_for_update"], credit_id)
            if row is None:
                raise errors.NotFound("no such goodwill credit")
            if row["requested_by"] == member.actor:
                raise errors.SameEmployee("the employee who asked for a credit cannot approve it")
            if row["status"] == "posted":
                return goodwill_view(row)
            return goodwill_view(await self._post_goodwill(conn, row, approver=member.actor))

        result: JSON = await in_transaction(self.pool, work)
        return result

    async def goodwill(self, credit_id: str) -> JSON:
        record_id(credit_id, "goodwill credit")
        row = await self.pool.fetchrow(S["goodwill_get"], credit_id)
        if row is None:
            raise errors.NotFound("no such goodwill credit")
        return goodwill_view(row)

    async def goodwill_credits(self, *, status: str | None, cursor: str | None, limit: int) -> JSON:
        rows = await self.pool.fetch(S["goodwill_list"], status, cursor, limit)
        return {"goodwill_credits": [goodwill_view(r) for r in rows], "next_cursor": _page(rows, limit)}


def invoice_key(provider: str, invoice_number: str) -> str:
    """The ledger key of a provider's invoice: what it is for, whoever enters it and however often."""
    return f"invoice:{derived_id('provider-invoice', provider, invoice_number)}"


def billing_period(given: str | None, now: datetime) -> str:
    """The month an invoice bills: ``given`` (YYYY-MM, checked by the caller's model), or the
    month before ``now`` (providers bill in arrears); never a month that has not begun."""
    this_month = f"{now.year:04d}-{now.month:02d}"
    if given is None:
        last = (now.replace(day=1) - timedelta(days=1)).date()
        return f"{last.year:04d}-{last.month:02d}"
    if given > this_month:  # YYYY-MM sorts as the months do
        raise errors.InvalidRequest("an invoice cannot bill a month that has not begun", field="period")
    return given


async def enter_provider_invoice(
    the_ledger: ledger.Ledger,
    *,
    provider: str,
    invoice_number: str,
    amount: int,
    currency: str,
    period: str,
    actor: str,
    conn: asyncpg.Connection | None = None,
) -> JSON:
    """provider_expense −amount, nostro +amount under the invoice's key (the staff endpoint's
    and the operator command's one path), for the month ``period`` (reconciliation's late
    invoices); the invoice entered before with other content is
    :class:`errors.InvoiceEnteredOtherwise`."""
    try:
        result = await the_ledger.provider_invoice(
            invoice_key(provider, invoice_number),
            provider,
            currency,
            amount=amount,
            actor=actor,
            ref=f"invoice {provider} {invoice_number}"[:200],
            period=period,
            conn=conn,
        )
    except ledger.TransactionIdReused as exc:
        # Entered before by someone else (the actor is part of what the ledger compares): the
        # same invoice if its amount and currency are, answered with that posting.
        first = await the_ledger.transaction(
            f"{ledger.CENTRAL_BUCKET:04d}:{invoice_key(provider, invoice_number)}"
        )
        nostro = [
            leg for leg in first.legs if leg.account == ledger.system_account(ledger.Role.NOSTRO, currency)
        ]
        if (
            first.type != TxType.PROVIDER_INVOICE
            or [leg.amount for leg in nostro] != [amount]
            or first.metadata.get("period", period) != period
        ):
            raise errors.InvoiceEnteredOtherwise(
                "this invoice was entered before with another amount, currency or month",
                provider=provider,
                invoice_number=invoice_number,
            ) from exc
        transaction_id, posted_at = first.id, first.posted_at
    else:
        transaction_id, posted_at = result.id, result.posted_at
    return {
        "transaction_id": transaction_id,
        "provider": provider,
        "invoice_number": invoice_number,
        "amount_minor": amount,
        "currency": currency,
        "period": period,
        "posted_at": ts(posted_at),
    }
