"""Password hashing with argon2id, off the event loop (it is deliberately slow)."""

from __future__ import annotations

import asyncio

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from hiwallet.identity.settings import IdentitySettings


class Passwords:
    def __init__(self, settings: IdentitySettings) -> None:
        self._hasher = PasswordHasher(
            time_cost=settings.argon2_time_cost,
            memory_cost=settings.argon2_memory_kib,
            parallelism=settings.argon2_parallelism,
        )
        self.max_length = settings.max_password_length
        # Verified against when the user does not exist, so that "no such user" takes as long
        # as "wrong password" and response times do not enumerate usernames.
        self._dummy = self._hasher.hash("not-a-real-password")

    async def hash(self, password: str) -> str:
        return await asyncio.to_thread(self._hasher.hash, password)

    async def verify(self, stored_hash: str | None, password: str) -> bool:
        if len(password) > self.max_length:
            return False
        return await asyncio.to_thread(self._verify, stored_hash or self._dummy, password)

    def _verify(self, stored_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(stored_hash, password)
        except (VerificationError, InvalidHashError):
            return False
