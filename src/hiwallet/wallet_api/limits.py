"""``GET /v1/accounts/{account_id}/limits``: what the account's tier allows this month and what
it used, per kind (transfers to people, payments to businesses) and per currency of its wallets.
Read only, for the account's members (the front APIs show it: "my tier and what it allows").

A module of its own (its route, its query file): the transfer path keeps the limits
(transfers.py); this only reads what it wrote."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter

from hiwallet.contracts.public import LimitOut, LimitsOut
from hiwallet.core.queries import load_queries
from hiwallet.wallet_api.access import own_account
from hiwallet.wallet_api.adapters import Repo
from hiwallet.wallet_api.domain import AccountKind, LimitKind
from hiwallet.wallet_api.retry import answered
from hiwallet.wallet_api.routes import _COMMON, ACCOUNT, AccountIdPath, CallerDep, ServiceDep

__all__ = ["LimitOut", "LimitsOut", "limits_router"]

Q = load_queries(Path(__file__).parent / "sql" / "limits.sql")


limits_router = APIRouter(prefix="/v1", responses=_COMMON)


@limits_router.get(f"/accounts/{ACCOUNT}/limits", response_model=LimitsOut, tags=["accounts"])
async def account_limits(account_id: AccountIdPath, who: CallerDep, svc: ServiceDep) -> Any:
    """The monthly limits of a personal account's tier and what it used of them (a business
    account has none: an empty list)."""
    account = await own_account(svc.pool, who, account_id)
    month = datetime.now(UTC).date().replace(day=1)
    limits: list[dict[str, Any]] = []
    if account.kind is AccountKind.PERSONAL and account.tier is not None:
        wallets = await answered(Repo(svc.pool).wallets_of(account.bucket, account.id))
        rows = await answered(svc.pool.fetch(Q["usage_of_month"], account.bucket, account.id, month))
        used = {(r["kind"], r["currency"]): int(r["used"]) for r in rows}
        for kind in LimitKind:
            for currency in sorted({w.currency for w in wallets}):
                allowed = svc.settings.monthly_limit(account.tier, kind)
                spent = used.get((kind.value, currency), 0)
                limits.append(
                    {
                        "kind": kind.value,
                        "currency": currency,
                        "limit_minor": allowed,
                        "used_minor": spent,
                        "remaining_minor": max(0, allowed - spent),
                    }
                )
    return {
        "account_id": account.id,
        "tier": account.tier.value if account.tier else None,
        "month": f"{month:%Y-%m}",
        "limits": limits,
    }
