"""Signing keys: stored in the database, two published at a time, rotated without downtime.

States: ``next`` (published, not yet signing, so verifiers' caches already hold it), ``active``
(signs; exactly one, enforced by a unique index) and ``retired`` (published until the tokens it
signed have expired, then left out of the JWKS). :func:`ensure_keys` creates what is missing at
start; :func:`rotate_keys` promotes ``next`` (or a fresh key) and retires the active one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import asyncpg
from joserfc import jwt
from joserfc.jwk import RSAKey
from prometheus_client import CollectorRegistry, Gauge

from hiwallet.core.uow import in_transaction
from hiwallet.identity.sql import Q

ALGORITHM = "RS256"
# Serialises key changes between processes (a service starting while the CLI rotates).
_KEYS_LOCK = 0x68_69_6B_79  # "hiky"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    status: str
    key: RSAKey  # private for the active key; used only to sign


def _generate(bits: int) -> tuple[str, str, dict[str, Any]]:
    key = RSAKey.generate_key(bits, private=True)
    kid = key.thumbprint()
    public = dict(key.as_dict(private=False))
    public.update({"kid": kid, "use": "sig", "alg": ALGORITHM})
    pem = key.as_pem(private=True)
    return kid, pem.decode() if isinstance(pem, bytes) else str(pem), public


async def ensure_keys(pool: asyncpg.Pool, bits: int) -> None:
    """At least an active key, and a second published key (next, or a still-live retired one)."""

    async def work(conn: asyncpg.Connection) -> None:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _KEYS_LOCK)
        rows = await conn.fetch(Q["published_keys"])
        statuses = [r["status"] for r in rows]
        if "active" not in statuses:
            await _insert(conn, bits, "active")
        if len(rows) + ("active" not in statuses) < 2:
            await _insert(conn, bits, "next")

    await in_transaction(pool, work)


async def rotate_keys(pool: asyncpg.Pool, bits: int, publish_for_s: int) -> str:
    """Make ``next`` the signing key; keep the old one published for ``publish_for_s`` seconds
    (the longest a token it signed can live). Returns the new active kid."""

    async def work(conn: asyncpg.Connection) -> str:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _KEYS_LOCK)
        await conn.execute(Q["retire_active_key"], publish_for_s)
        promoted = await conn.fetchval(Q["promote_next_key"])
        if promoted is None:
            promoted = await _insert(conn, bits, "active")
        return str(promoted)

    return await in_transaction(pool, work)


async def _insert(conn: asyncpg.Connection, bits: int, status: str) -> str:
    kid, pem, public = _generate(bits)
    await conn.execute(Q["insert_key"], kid, pem, json.dumps(public), status)
    return kid


class KeyMetrics:
    """When the realm's signing key in use became active, for the alert that asks for a
    rotation (nothing rotates the key by itself: ``hiwallet identity rotate-keys``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.active_since = Gauge(
            "hiwallet_identity_signing_key_active_since_timestamp_seconds",
            "When the signing key in use became active (unix time; rotate it before it gets old)",
            registry=registry,
        )

    async def refresh(self, pool: asyncpg.Pool) -> None:
        since = await pool.fetchval(Q["active_key_since"])
        if since is not None:
            self.active_since.set(float(since))


class KeyRing:
    """The keys of one realm as this process sees them, reread every ``cache_s`` seconds."""

    def __init__(self, pool: asyncpg.Pool, cache_s: float) -> None:
        self.pool = pool
        self.cache_s = cache_s
        self._loaded_at = float("-inf")
        self._active: SigningKey | None = None
        self._public: list[dict[str, Any]] = []
        self._by_kid: dict[str, RSAKey] = {}

    async def _refresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._loaded_at < self.cache_s:
            return
        rows = await self.pool.fetch(Q["published_keys"])
        active = [r for r in rows if r["status"] == "active"]
        if not active:
            raise RuntimeError("no active signing key; run the service's start-up (ensure_keys)")
        row = active[0]
        self._active = SigningKey(row["kid"], "active", RSAKey.import_key(row["private_pem"]))
        self._public = [json.loads(r["public_jwk"]) for r in rows]
        self._by_kid = {k["kid"]: RSAKey.import_key(k) for k in self._public}
        self._loaded_at = time.monotonic()

    async def jwks(self) -> dict[str, Any]:
        await self._refresh()
        return {"keys": list(self._public)}

    async def sign(self, claims: dict[str, Any]) -> str:
        await self._refresh()
        if self._active is None:  # _refresh ensures a signing key; none means the key table broke
            raise RuntimeError("no active signing key after a refresh")
        header = {"alg": ALGORITHM, "typ": "JWT", "kid": self._active.kid}
        return jwt.encode(header, claims, self._active.key, algorithms=[ALGORITHM])

    async def public_key(self, kid: str) -> RSAKey | None:
        await self._refresh()
        if kid not in self._by_kid and time.monotonic() - self._loaded_at > 1.0:
            # Rotated by another process since the last read; at most one reread a second, so
            # made-up kids cannot turn every request into a database query.
            await self._refresh(force=True)
        return self._by_kid.get(kid)

    def invalidate(self) -> None:
        self._loaded_at = float("-inf")
