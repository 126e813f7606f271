"""The merchants' webhooks on wallet-api's side (docs/webhooks.md): the endpoints a member of a
business registers (URL checked against SSRF, a signing secret shown once and kept sealed),
rotated with an overlap, changed, disabled and deleted; the deliveries listed and replayed;
and the events of wallet-api's own movements, built here and written in the movement's
transaction (payment.received in wallet.transfer_batch's statement, payment.refunded and
promo.granted in the posting's). merchant-webhooks sends them."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from hiwallet.contracts import merchant_events as me
from hiwallet.core.egress import ForbiddenTarget, check_url, resolve_public
from hiwallet.core.ids import new_id
from hiwallet.core.queries import load_queries
from hiwallet.core.relay_hint import RelayHint
from hiwallet.core.sealing import KeyRing
from hiwallet.wallet_api import errors
from hiwallet.wallet_api.adapters import WalletRow
from hiwallet.wallet_api.domain import Caller
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_api.views import JSON, ts

__all__ = [
    "SECRET_BYTES",
    "Webhooks",
    "new_secret",
    "payment_received",
    "payment_refunded",
    "promo_granted",
]

W = load_queries(Path(__file__).parent / "sql" / "webhooks.sql")

# Standard Webhooks: whsec_ + base64 of 24 to 64 random bytes; 32 here.
SECRET_BYTES = 32
MAX_ATTEMPTS_SHOWN = 100


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


def _event(type_: str, resource_id: str, wallet: WalletRow, payload: JSON) -> JSON:
    """A wallet.webhook_events row of the business that owns ``wallet``."""
    return {
        "bucket": wallet.bucket,
        "id": me.event_id(type_, resource_id),
        "account_id": wallet.account_id,
        "type": type_,
        "resource_id": resource_id,
        "payload": {"account_id": wallet.account_id, "wallet_id": wallet.id, **payload},
    }


# What a merchant is told (docs/webhooks.md, "Payloads"): its own account and wallet, the
# transfer's id, the amount it received and the currency, and the reference the payment
# carries (what the payer wrote for the merchant, e.g. an order number). Nothing of the payer:
# no wallet, name or number (the merchant's own statement does not show them either).
def payment_received(
    transfer_id: str, transfer_type: str, payee: WalletRow, amount: int, currency: str, reference: str
) -> JSON:
    return _event(
        me.PAYMENT_RECEIVED,
        transfer_id,
        payee,
        {
            "transfer_id": transfer_id,
            "transfer_type": transfer_type,
            "amount_minor": amount,
            "currency": currency,
            "reference": reference,
        },
    )


def payment_refunded(
    transfer_id: str, refund_id: str, payee: WalletRow, amount: int, currency: str, reference: str
) -> JSON:
    # The resource is the payment: its refund is delivered after its payment.received.
    return _event(
        me.PAYMENT_REFUNDED,
        transfer_id,
        payee,
        {
            "transfer_id": transfer_id,
            "refund_id": refund_id,
            "amount_minor": amount,
            "currency": currency,
            "reference": reference,
        },
    )


def promo_granted(
    grant_id: str,
    granter: WalletRow,
    to_wallet_number: str,
    programme: str,
    amount: int,
    currency: str,
    expires_at: datetime,
    reference: str,
) -> JSON:
    # The customer's wallet number is the one the business itself gave in its request.
    return _event(
        me.PROMO_GRANTED,
        grant_id,
        granter,
        {
            "transfer_id": grant_id,
            "programme": programme,
            "to_wallet_number": to_wallet_number,
            "amount_minor": amount,
            "currency": currency,
            "expires_at": ts(expires_at),
            "reference": reference,
        },
    )


async def write_event(conn: asyncpg.Connection, event: JSON) -> None:
    """``event`` (one of the builders'), in ``conn``'s transaction."""
    await conn.execute(
        W["insert_event"],
        event["bucket"],
        event["id"],
        event["account_id"],
        event["type"],
        event["resource_id"],
        event["payload"],
    )


def _endpoint_id(bucket: int) -> str:
    return f"{bucket:04d}:we:{new_id()}"


def _bucket_of(identifier: str, kind: str) -> int:
    """The bucket at the head of an endpoint's or a delivery's id; not found when it is not one."""
    head, sep, rest = identifier.partition(":")
    if not (
        sep and len(head) == 4 and head.isdigit() and rest.startswith(f"{kind}:") and len(identifier) <= 64
    ):
        raise errors.NotFound(f"no such webhook {'endpoint' if kind == 'we' else 'delivery'}")
    return int(head)


def endpoint_view(row: asyncpg.Record, secret: str | None = None) -> JSON:
    view: JSON = {
        "id": row["id"],
        "account_id": row["account_id"],
        "url": row["url"],
        "event_types": list(row["event_types"]),
        "description": row["description"],
        "enabled": row["enabled"],
        "disabled_reason": row["disabled_reason"],
        "disabled_at": ts(row["disabled_at"]) if row["disabled_at"] else None,
        "failing_since": ts(row["failing_since"]) if row["failing_since"] else None,
        "previous_secret_until": ts(row["previous_secret_until"]) if row["previous_secret_until"] else None,
        "created_at": ts(row["created_at"]),
        "updated_at": ts(row["updated_at"]),
    }
    if secret is not None:
        view["secret"] = secret
    return view


def delivery_view(row: asyncpg.Record) -> JSON:
    return {
        "id": row["id"],
        "endpoint_id": row["endpoint_id"],
        "event_id": row["event_id"],
        "event_type": row["event_type"],
        "resource_id": row["resource_id"],
        "status": row["status"],
        "attempts": row["attempts"],
        "next_attempt_at": ts(row["next_attempt_at"]) if row["status"] == "pending" else None,
        "last_status_code": row["last_status_code"],
        "last_error": row["last_error"],
        "created_at": ts(row["created_at"]),
        "delivered_at": ts(row["delivered_at"]) if row["delivered_at"] else None,
    }


def _cursor(row: asyncpg.Record) -> str:
    raw = orjson.dumps([row["created_at"].isoformat(), row["id"]])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, last_id = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        at = datetime.fromisoformat(created)
        if not isinstance(last_id, str) or at.tzinfo is None:
            raise ValueError("not a cursor")
        return at, last_id
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise errors.InvalidCursor("the cursor is not one this service gave") from exc


class Webhooks:
    """The endpoints and deliveries of the businesses the caller is a member of."""

    def __init__(self, pool: asyncpg.Pool, settings: WalletApiSettings) -> None:
        self.pool = pool
        self.settings = settings
        self.keys = KeyRing.parse(settings.webhook_secret_keys.get_secret_value())

    def _now(self) -> datetime:
        return datetime.now(UTC)

    async def _checked_url(self, url: str) -> str:
        try:
            target = check_url(url)
            await resolve_public(
                target,
                allow_private=self.settings.webhook_allow_private_targets,
                timeout_s=self.settings.webhook_dns_timeout_s,
            )
        except ForbiddenTarget as exc:
            raise errors.WebhookUrlForbidden(str(exc), reason=exc.reason) from exc
        return url

    async def create(
        self,
        caller: Caller,
        account_id: str,
        url: str,
        event_types: Sequence[str],
        description: str | None,
    ) -> JSON:
        bucket = _account_bucket(account_id)
        # Who may first (a 404 says nothing of the URL), then the URL (outside a transaction:
        # its name is resolved), then the insert, the account's count checked again under it.
        await self._business(self.pool, caller, bucket, account_id)
        url = await self._checked_url(url)
        endpoint_id = _endpoint_id(bucket)
        secret = new_secret()
        sealed = self.keys.seal(secret.encode(), me.secret_place(endpoint_id))
        async with self.pool.acquire() as conn, conn.transaction():
            account = await self._business(conn, caller, bucket, account_id)
            if account["endpoints"] >= self.settings.webhook_max_endpoints_per_account:
                raise errors.TooManyEndpoints(
                    "the account has as many webhook endpoints as it may",
                    limit=self.settings.webhook_max_endpoints_per_account,
                )
            row = await conn.fetchrow(
                W["insert_endpoint"],
                bucket,
                endpoint_id,
                account_id,
                url,
                list(dict.fromkeys(event_types)),
                description,
                sealed,
                self._now(),
            )
        return endpoint_view(row, secret)

    async def _business(
        self, db: asyncpg.Pool | asyncpg.Connection, caller: Caller, bucket: int, account_id: str
    ) -> asyncpg.Record:
        account = await db.fetchrow(
            W["business_of_member"], bucket, account_id, caller.issuer, caller.subject
        )
        if account is None:
            raise errors.NotFound("no such account")
        if account["kind"] != "business":
            raise errors.NotABusiness("only a business registers webhook endpoints", operation="webhooks")
        return account

    async def endpoints(self, caller: Caller) -> list[JSON]:
        rows = await self.pool.fetch(
            W["endpoints_of_member"],
            caller.issuer,
            caller.subject,
            self.settings.webhook_max_endpoints_per_account * 64,
        )
        return [endpoint_view(r) for r in rows]

    async def endpoint(self, caller: Caller, endpoint_id: str) -> JSON:
        bucket = _bucket_of(endpoint_id, "we")
        row = await self.pool.fetchrow(
            W["endpoint_of_member"], bucket, endpoint_id, caller.issuer, caller.subject
        )
        if row is None:
            raise errors.NotFound("no such webhook endpoint")
        return endpoint_view(row)

    async def change(self, caller: Caller, endpoint_id: str, changes: dict[str, Any]) -> JSON:
        """``changes``: any of url, event_types, description, enabled (what the request set)."""
        bucket = _bucket_of(endpoint_id, "we")
        if "url" in changes:
            await self.endpoint(caller, endpoint_id)  # a 404 first, saying nothing of the URL
            changes["url"] = await self._checked_url(changes["url"])
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                W["endpoint_of_member_for_update"], bucket, endpoint_id, caller.issuer, caller.subject
            )
            if row is None:
                raise errors.NotFound("no such webhook endpoint")
            types = changes.get("event_types")
            row = await conn.fetchrow(
                W["update_endpoint"],
                bucket,
                endpoint_id,
                changes.get("url", row["url"]),
                list(dict.fromkeys(types)) if types is not None else row["event_types"],
                changes["description"] if "description" in changes else row["description"],
                changes.get("enabled", row["enabled"]),
                self._now(),
            )
        return endpoint_view(row)

    async def delete(self, caller: Caller, endpoint_id: str) -> None:
        bucket = _bucket_of(endpoint_id, "we")
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                W["endpoint_of_member_for_update"], bucket, endpoint_id, caller.issuer, caller.subject
            )
            if row is None:
                raise errors.NotFound("no such webhook endpoint")
            await conn.execute(W["delete_endpoint"], bucket, endpoint_id)

    async def rotate(self, caller: Caller, endpoint_id: str, overlap_s: float | None = None) -> JSON:
        """A new secret (shown once); the current one signs too until the overlap ends. A
        rotation during an overlap ends the earlier overlap: only the last two secrets sign."""
        bucket = _bucket_of(endpoint_id, "we")
        overlap = self.settings.webhook_rotation_overlap_s if overlap_s is None else overlap_s
        secret = new_secret()
        sealed = self.keys.seal(secret.encode(), me.secret_place(endpoint_id))
        now = self._now()
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                W["endpoint_of_member_for_update"], bucket, endpoint_id, caller.issuer, caller.subject
            )
            if row is None:
                raise errors.NotFound("no such webhook endpoint")
            keep = overlap > 0
            row = await conn.fetchrow(
                W["rotate_secret"],
                bucket,
                endpoint_id,
                row["secret_sealed"] if keep else None,
                now + timedelta(seconds=overlap) if keep else None,
                sealed,
                now,
            )
        return endpoint_view(row, secret)

    async def deliveries(
        self,
        caller: Caller,
        *,
        endpoint: str | None,
        event_type: str | None,
        status: str | None,
        cursor: str | None,
        limit: int,
    ) -> JSON:
        after_at, after_id = _read_cursor(cursor) if cursor else (None, None)
        limit = max(1, min(limit, self.settings.webhook_page_max))
        rows = await self.pool.fetch(
            W["deliveries_of_member"],
            caller.issuer,
            caller.subject,
            endpoint,
            event_type,
            after_at,
            after_id,
            status,
            limit + 1,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return {
            "deliveries": [delivery_view(r) for r in rows],
            "next_cursor": _cursor(rows[-1]) if more and rows else None,
        }

    async def delivery(self, caller: Caller, delivery_id: str) -> JSON:
        bucket = _bucket_of(delivery_id, "wd")
        row = await self.pool.fetchrow(
            W["delivery_of_member"], bucket, delivery_id, caller.issuer, caller.subject
        )
        if row is None:
            raise errors.NotFound("no such webhook delivery")
        attempts = await self.pool.fetch(W["attempts_of"], bucket, delivery_id, MAX_ATTEMPTS_SHOWN)
        return {
            **delivery_view(row),
            "event": {
                "type": row["event_type"],
                "timestamp": ts(row["event_created_at"]),
                "data": row["payload"],
            },
            "attempt_log": [
                {
                    "attempted_at": ts(a["attempted_at"]),
                    "status_code": a["status_code"],
                    "error": a["error"],
                    "duration_ms": a["duration_ms"],
                }
                for a in attempts
            ],
        }

    async def replay(self, caller: Caller, delivery_id: str, hint: RelayHint | None) -> JSON:
        bucket = _bucket_of(delivery_id, "wd")
        row = await self.pool.fetchrow(
            W["replay_delivery"], bucket, delivery_id, self._now(), caller.issuer, caller.subject
        )
        if row is None:
            raise errors.NotFound("no such webhook delivery")
        if hint is not None:
            hint.committed()
        return delivery_view(row)


def _account_bucket(account_id: str) -> int:
    head, sep, _ = account_id.partition(":")
    if not (sep and len(head) == 4 and head.isdigit()):
        raise errors.NotFound("no such account")
    return int(head)
