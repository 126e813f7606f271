"""Password hashing with argon2id, off the event loop (it is deliberately slow), a bounded number at once.

Each hash or verification holds ``argon2_memory_kib`` (19 MiB by default; 64 MiB before 2026-12-05)
for its duration, so the number running at once is what sets the process's peak memory: four at
once took identity to 344 MB at 64 MiB. A hash made under other parameters still verifies (they
are in the hash); a sign-in that proves it stores the password again under today's
(:meth:`Passwords.needs_rehash`). At most ``argon2_max_concurrent_hashes`` run at once; a
request waits at most ``argon2_slot_wait_s`` for a slot, then is answered 503 with
``Retry-After`` (retryable: nothing was done).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from prometheus_client import CollectorRegistry, Counter, Gauge

from hiwallet.identity.errors import PasswordHashingBusy
from hiwallet.identity.settings import IdentitySettings

__all__ = ["Passwords"]

T = TypeVar("T")


class Passwords:
    def __init__(self, settings: IdentitySettings, registry: CollectorRegistry | None = None) -> None:
        self._hasher = PasswordHasher(
            time_cost=settings.argon2_time_cost,
            memory_cost=settings.argon2_memory_kib,
            parallelism=settings.argon2_parallelism,
        )
        self.max_length = settings.max_password_length
        self.max_concurrent = settings.argon2_max_concurrent_hashes
        self.slot_wait_s = settings.argon2_slot_wait_s
        # Admission: a slot is taken before the work is handed to a thread and given back only
        # when the thread is done with it (or the work was cancelled before it started), never
        # when the waiting request goes away: a cancelled request's hash still holds its memory.
        self._slots = asyncio.Semaphore(self.max_concurrent)
        # The pool has exactly as many threads as slots: a second bound, so that not even a
        # slot released early could run more hashes at once than the setting says.
        self._pool = ThreadPoolExecutor(self.max_concurrent, thread_name_prefix="argon2")
        self._lock = threading.Lock()  # guards running/peak_running, written from the threads
        self.running = 0
        # The most hashes that ever ran at once in this process: the tests' seam (the gauge
        # below is what operators see).
        self.peak_running = 0
        self._running_gauge = Gauge(
            "hiwallet_identity_password_hashes_running",
            "argon2 hashes and verifications running now (each holds argon2_memory_kib)",
            registry=registry,
        )
        self._refused = Counter(
            "hiwallet_identity_password_hashes_refused",
            "Requests answered 503 because no argon2 slot became free within argon2_slot_wait_s",
            registry=registry,
        )
        # Verified against when the user does not exist, so that "no such user" takes as long
        # as "wrong password" and response times do not enumerate usernames.
        self._dummy = self._hasher.hash("not-a-real-password")

    async def hash(self, password: str) -> str:
        return await self._bounded(self._hasher.hash, password)

    def needs_rehash(self, stored_hash: str) -> bool:
        """Whether ``stored_hash`` was made under other parameters than today's (cheap: it only
        reads the hash's header)."""
        try:
            return self._hasher.check_needs_rehash(stored_hash)
        except InvalidHashError:
            return False

    async def verify(self, stored_hash: str | None, password: str) -> bool:
        if len(password) > self.max_length:
            return False
        return await self._bounded(self._verify, stored_hash or self._dummy, password)

    async def close(self) -> None:
        """At shutdown: work not started is dropped; a hash running finishes in its thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _bounded(self, fn: Callable[..., T], *args: str) -> T:
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can time out an acquire that had
            # already succeeded and leak the slot.
            async with asyncio.timeout(self.slot_wait_s):
                await self._slots.acquire()
        except TimeoutError:
            self._refused.inc()
            raise PasswordHashingBusy(
                "too many sign-ins at once; retry in a moment", headers={"Retry-After": "1"}
            ) from None
        loop = asyncio.get_running_loop()
        try:
            work = self._pool.submit(self._run, fn, *args)
        except BaseException:
            self._slots.release()
            raise
        work.add_done_callback(lambda _: loop.call_soon_threadsafe(self._slots.release))
        return await asyncio.wrap_future(work)

    def _run(self, fn: Callable[..., T], *args: str) -> T:
        with self._lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        self._running_gauge.inc()
        try:
            return fn(*args)
        finally:
            self._running_gauge.dec()
            with self._lock:
                self.running -= 1

    def _verify(self, stored_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(stored_hash, password)
        except (VerificationError, InvalidHashError):
            return False
