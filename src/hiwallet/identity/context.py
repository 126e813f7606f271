"""What every part of one realm's service shares, and the small helpers they all use."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from joserfc import jws, jwt
from joserfc.errors import JoseError

from hiwallet.identity.keys import ALGORITHM, KeyRing
from hiwallet.identity.passwords import Passwords
from hiwallet.identity.realm import RealmConfig
from hiwallet.identity.settings import IdentitySettings
from hiwallet.identity.sql import Q

# A verifier checks exp with this much slack; our own endpoints use the same.
LEEWAY_S = 30


@dataclass(frozen=True)
class Realm:
    """One realm's running service: its configuration, database, keys and hasher."""

    config: RealmConfig
    settings: IdentitySettings
    pool: asyncpg.Pool
    keys: KeyRing
    passwords: Passwords

    @property
    def name(self) -> str:
        return self.config.realm

    @property
    def issuer(self) -> str:
        return f"{self.settings.base_url(self.name).rstrip('/')}/realms/{self.name}"


@dataclass(frozen=True)
class User:
    id: str
    username: str
    email: str | None
    first_name: str | None
    last_name: str | None
    enabled: bool
    email_verified: bool
    password_hash: str | None
    required_actions: tuple[str, ...]
    totp_secret: str | None
    locked_until: datetime | None
    created_at: datetime

    @classmethod
    def from_record(cls, r: asyncpg.Record) -> User:
        return cls(
            id=r["id"],
            username=r["username"],
            email=r["email"],
            first_name=r["first_name"],
            last_name=r["last_name"],
            enabled=r["enabled"],
            email_verified=r["email_verified"],
            password_hash=r["password_hash"],
            required_actions=tuple(r["required_actions"]),
            totp_secret=r["totp_secret"],
            locked_until=r["locked_until"],
            created_at=r["created_at"],
        )

    def representation(self) -> dict[str, Any]:
        """Keycloak's UserRepresentation, without any credential."""
        rep: dict[str, Any] = {
            "id": self.id,
            "username": self.username,
            "enabled": self.enabled,
            "emailVerified": self.email_verified,
            "createdTimestamp": int(self.created_at.timestamp() * 1000),
            "requiredActions": list(self.required_actions),
            "totp": self.totp_secret is not None,
        }
        for key, value in (
            ("email", self.email),
            ("firstName", self.first_name),
            ("lastName", self.last_name),
        ):
            if value is not None:
                rep[key] = value
        return rep


def new_secret() -> str:
    """An unguessable token: 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


def token_hash(value: str) -> str:
    # Codes and refresh tokens are high-entropy, so a plain SHA-256 is enough to make a stolen
    # table useless; argon2 is for low-entropy secrets (passwords).
    return hashlib.sha256(value.encode()).hexdigest()


async def fetch_user(realm: Realm, user_id: str) -> User | None:
    row = await realm.pool.fetchrow(Q["user_by_id"], user_id)
    return User.from_record(row) if row else None


async def verify_own_token(realm: Realm, token: str) -> dict[str, Any] | None:
    """The claims of an access token this realm issued and that is still valid, else None."""
    if len(token) > 16_384:
        return None
    try:
        header = jws.extract_compact(token.encode("ascii")).headers()
        kid = header.get("kid")
        if header.get("alg") != ALGORITHM or not isinstance(kid, str):
            return None
        key = await realm.keys.public_key(kid)
        if key is None:
            return None
        claims = dict(jwt.decode(token, key, algorithms=[ALGORITHM]).claims)
    except (JoseError, ValueError, UnicodeError):
        return None
    exp = claims.get("exp")
    if claims.get("iss") != realm.issuer or claims.get("typ") != "Bearer":
        return None
    if not isinstance(exp, int) or exp <= time.time() - LEEWAY_S:
        return None
    return claims
