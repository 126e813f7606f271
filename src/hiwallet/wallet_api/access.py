"""Who may see what: the caller's own wallets, accounts and transfers, and the checks every use
case shares (onboarding's client, supported currencies)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from hiwallet import ledger
from hiwallet.ledger import TransactionView
from hiwallet.wallet_api import domain, errors
from hiwallet.wallet_api.adapters import AccountRow, Repo, WalletAccess
from hiwallet.wallet_api.domain import AccountKind, Caller
from hiwallet.wallet_api.retry import answered
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.views import JSON, view_of_transaction


async def own_wallet(db: asyncpg.Connection | asyncpg.Pool, caller: Caller, wallet_id: str) -> WalletAccess:
    access = await Repo(db).wallet_with_access(
        domain.bucket_in(wallet_id), wallet_id, caller.issuer, caller.subject
    )
    if access is None or not access.member:
        raise errors.NotFound("no such wallet")
    return access


async def own_wallet_balance(
    db: asyncpg.Connection | asyncpg.Pool, caller: Caller, wallet_id: str
) -> tuple[WalletAccess, ledger.WalletBalance]:
    """own_wallet and the wallet's balances, one round trip (the balances read at the snapshot
    of the membership check). Refused as the two reads were: not the caller's wallet, 404; the
    ledger without the wallet's accounts, the ledger's own refusal; the database out of reach,
    503 (``answered``)."""
    found = await answered(
        Repo(db).wallet_with_balance(domain.bucket_in(wallet_id), wallet_id, caller.issuer, caller.subject)
    )
    if found is None or not found[0].member:
        raise errors.NotFound("no such wallet")
    access, balance = found
    if balance is None:
        # What the ledger's wallet_balance raises for a wallet it does not hold, as answered()
        # would have handed it on.
        missing = ledger.AccountNotFound(f"no wallet {wallet_id}", account=wallet_id)
        raise errors.from_ledger(missing) or errors.NotFound("no such wallet")
    return access, balance


async def own_account(pool: asyncpg.Pool, caller: Caller, account_id: str) -> AccountRow:
    bucket = domain.bucket_in(account_id)
    repo = Repo(pool)
    if not await repo.is_member(bucket, account_id, caller.issuer, caller.subject):
        raise errors.NotFound("no such account")
    account = await repo.account(bucket, account_id)
    if account is None:
        raise errors.NotFound("no such account")
    return account


def require_onboarding(settings: WalletApiSettings, caller: Caller) -> None:
    if not (caller.is_service_account and caller.azp == settings.onboarding_client):
        raise errors.OnboardingOnly("only onboarding's client may open personal accounts and change tiers")


def check_currency(settings: WalletApiSettings, currency: str) -> str:
    if currency not in settings.currencies:
        raise errors.UnsupportedCurrency(
            f"{currency} is not supported", currency=currency, supported=list(settings.currencies)
        )
    return currency


@dataclass(frozen=True)
class Visible:
    """A ledger transaction as the caller may see it: the wallets of it that are theirs."""

    tx: TransactionView
    view: JSON
    type: str
    mine: dict[str, AccountKind]


async def visible_transaction(
    the_ledger: ledger.Ledger, caller: Caller, transfer_id: str, db: asyncpg.Connection | asyncpg.Pool
) -> Visible:
    domain.bucket_in(transfer_id)
    try:
        tx = await answered(the_ledger.transaction(transfer_id))
    except errors.NotFound:
        raise errors.NotFound("no such transfer") from None
    view = view_of_transaction(tx)
    wallets = sorted({leg["wallet"] for leg in view["legs"] if leg["wallet"]})
    mine = await Repo(db).member_wallets(
        [domain.bucket_in(w) for w in wallets], wallets, caller.issuer, caller.subject
    )
    if not mine:
        raise errors.NotFound("no such transfer")
    return Visible(tx, view, tx.type, mine)
