"""What the API shows of accounts, wallets and ledger transactions: JSON-ready dicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from hiwallet import ledger
from hiwallet.ledger import PostResult, TransactionView, TxType
from hiwallet.wallet_api.adapters import AccountRow, WalletRow

JSON = dict[str, Any]


def ts(value: datetime) -> str:
    # asyncpg's times are in UTC already (its tzinfo is datetime.UTC itself): converting them
    # again was a fifth of ts()'s time, which a statement page calls 50 times. Formatted by
    # orjson (RFC 3339, "Z" for UTC): the same text as isoformat() with "+00:00" replaced (the
    # microseconds only when not 0; compared on 300,000 random times and zones), in a third of
    # its time: isoformat and the replace were 18 % of a statement page's samples in wallet-api
    # (py-spy, bench/read_bench.py, 2026-12-06).
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return orjson.dumps(value, option=orjson.OPT_UTC_Z)[1:-1].decode()


def account_view(account: AccountRow, wallets: list[WalletRow]) -> JSON:
    return {
        "id": account.id,
        "kind": account.kind.value,
        "tier": account.tier.value if account.tier else None,
        "name": account.name,
        "created_at": ts(account.created_at),
        "wallets": [wallet_ref(w) for w in wallets],
    }


def wallet_ref(w: WalletRow) -> JSON:
    return {"id": w.id, "number": w.number, "currency": w.currency}


def _leg(account: str, amount: int, currency: str) -> JSON:
    try:
        wallet: str | None = ledger.wallet_of(account)
        purse: str | None = account.rpartition(":")[2]
    except ledger.InvalidPosting:
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
        "posted_at": ts(posted_at),
        "legs": shown,
        "expires_at": _promo_expiry(metadata),
    }


def _promo_expiry(metadata: dict[str, Any]) -> str | None:
    """A promo grant's expiry, from its ledger transaction's metadata."""
    expires_at = metadata.get("expires_at")
    return ts(datetime.fromisoformat(expires_at)) if isinstance(expires_at, str) else None


def view_of_post(
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


def view_of_posted(posted: JSON) -> JSON:
    """A transfer's answer from what wallet.transfer returned and stored: the posting's result
    and the view's own inputs."""
    view = posted["view"]
    return view_of_post(
        ledger.Ledger.answer(posted["result"]),
        TxType(view["type"]),
        view["ref"],
        view["metadata"],
        view["currency"],
    )


def view_of_transaction(tx: TransactionView) -> JSON:
    return transfer_view(
        id=tx.id,
        type_=tx.type,
        reference=tx.ref,
        posted_at=tx.posted_at,
        legs=[(line.account, line.amount, line.currency) for line in tx.legs],
        metadata=tx.metadata,
        refund_of=tx.refund_of,
    )
