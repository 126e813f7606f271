"""Signed webhook delivery, shared by the two fakes: retries, the test faults, the log of attempts.

An institution reports what happened by POSTing a signed notification to its customer's URL and
trying again, with backoff, until it gets a 2xx (bounded: so many attempts, a ceiling on the
wait). Each attempt is signed afresh (:data:`Signer` is given the attempt's own unix time), so a
late retry is not refused as stale. The body of a notification never changes between attempts.

The faults (:class:`Faults`, ``POST /_control/faults``) bend the next notifications for tests:
several copies at once, a delay, a drop (the "webhook that never arrives"), a reordering. Every
attempt is recorded (``GET /_control/deliveries``); a notification can be sent again
(``POST /_control/redeliver/{event_id}``), as a provider's dashboard does.

State is in memory and bounded (the fakes keep nothing across a restart): the attempt log and
the notifications that can be redelivered are the most recent ``max_log`` / ``max_kept``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import secrets
import string
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp
import structlog
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings

__all__ = [
    "Deliverer",
    "DeliverySettings",
    "Faults",
    "Notification",
    "Signer",
    "control_router",
    "iso_now",
    "random_id",
]

log = structlog.get_logger("hiwallet.fakes.delivery")

# httpcore looks for sniffio at every request; where it is not installed, that is an import that
# fails after searching the whole path each time (~0.3 ms a delivery). Say once that it is absent.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, length: int = 24) -> str:
    """An id in the providers' style: a type prefix and random base62 (``pi_3QxY…``)."""
    # One random integer cut into base62 digits (secrets.choice per character cost ~2 ms a payment).
    number = int.from_bytes(secrets.token_bytes(length))
    digits = []
    for _ in range(length):
        number, digit = divmod(number, 62)
        digits.append(_ALPHABET[digit])
    return prefix + "".join(digits)


def iso_now() -> str:
    """Now, UTC, ISO 8601 with microseconds and a ``Z``."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class DeliverySettings(BaseSettings):
    """What both fakes share: where and how they deliver. Each fake subclasses it with its own
    environment prefix (``STRIPE_FAKE_``, ``BANK_FAKE_``)."""

    # Retries until a 2xx: the first retry after retry_initial_s, doubling up to
    # retry_max_delay_s, at most retry_attempts attempts in all (then given up, recorded).
    retry_attempts: int = Field(default=8, ge=1, le=50)
    retry_initial_s: float = Field(default=0.5, gt=0, le=3600)
    retry_max_delay_s: float = Field(default=30.0, gt=0, le=86_400)
    # One attempt's HTTP timeout (connect + answer).
    delivery_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # "Moments later": the wait between accepting a payment and reporting it.
    notify_after_s: float = Field(default=0.1, ge=0, le=600)
    # Attempts in flight at once (the rest wait their turn).
    max_concurrent_deliveries: int = Field(default=16, ge=1, le=10_000)
    # A reordered notification with nothing after it to overtake it is sent after this long.
    reorder_hold_s: float = Field(default=5.0, ge=0, le=600)
    # Memory bounds: attempts remembered, notifications kept for redelivery, objects kept for
    # the listing endpoints.
    max_log: int = Field(default=10_000, ge=10)
    max_kept: int = Field(default=10_000, ge=10)


@dataclass(frozen=True)
class Notification:
    """One notification: ``event_id`` is what redelivery names (Stripe's ``evt_…``, the bank's
    ``msg_…`` which is also its ``webhook-id``); ``body`` is sent unchanged by every attempt."""

    event_id: str
    type: str
    url: str
    body: bytes


# (the notification, the attempt's unix time) -> the signature headers of that attempt
Signer = Callable[[Notification, int], Mapping[str, str]]

Outcome = Literal["delivered", "retry", "gave_up", "dropped"]


class Faults(BaseModel):
    """The faults applied to the next notifications (``POST /_control/faults``).

    - ``duplicate``: how many copies of each notification are sent, all at once (each its own
      retries and signature); 0 or 1 = one.
    - ``delay_s``: each notification waits this long before its first attempt (the others of
      its payment do not wait for it).
    - ``drop``: not sent at all (recorded as dropped; still in the listings, can be redelivered).
    - ``reorder``: the notifications of one payment are sent in reverse order; a payment with
      one notification is held back and sent after the next payment's (or after reorder_hold_s).
    - ``once``: the faults clear after the next payment whose notifications they touched;
      otherwise they stay until replaced (``POST`` ``{}`` or ``DELETE`` clears them).
    - ``types``: only notifications of these types are touched (default: every type).
    """

    model_config = ConfigDict(extra="forbid")

    duplicate: int = Field(default=0, ge=0, le=50)
    delay_s: float = Field(default=0.0, ge=0, le=600)
    drop: bool = False
    reorder: bool = False
    once: bool = True
    types: list[str] | None = None

    def active(self) -> bool:
        return self.duplicate > 1 or self.delay_s > 0 or self.drop or self.reorder

    def touches(self, notification: Notification) -> bool:
        return self.active() and (self.types is None or notification.type in self.types)


class Deliverer:
    """Sends notifications in the background; ``start`` and ``close`` within the app's lifespan."""

    def __init__(
        self,
        *,
        name: str,
        signer: Signer,
        settings: DeliverySettings,
        user_agent: str,
    ) -> None:
        self._name = name
        self._signer = signer
        self._settings = settings
        self._user_agent = user_agent
        self._faults = Faults()
        self._client: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(settings.max_concurrent_deliveries)
        self._tasks: set[asyncio.Task[None]] = set()
        self._log: deque[dict[str, Any]] = deque(maxlen=settings.max_log)
        self._kept: OrderedDict[str, Notification] = OrderedDict()
        self._held: list[Notification] = []
        self._held_timer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # aiohttp, not httpx: a fake bank or card provider calls back for every payment, and
        # httpx's client cost 5-10 times aiohttp's CPU a request on this machine (the services'
        # own hot client is httpx over aiohttp: hiwallet/core/http/client.py).
        self._client = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._settings.delivery_timeout_s),
            connector=aiohttp.TCPConnector(limit=self._settings.max_concurrent_deliveries),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- faults and the log ------------------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self._faults

    def set_faults(self, faults: Faults) -> None:
        self._faults = faults
        log.info("faults set", fake=self._name, **faults.model_dump())

    def attempts(self, event_id: str | None = None) -> list[dict[str, Any]]:
        return [dict(a) for a in self._log if event_id is None or a["event_id"] == event_id]

    def clear_log(self) -> None:
        self._log.clear()

    # -- sending -----------------------------------------------------------------------------

    def submit(self, batch: Sequence[Notification], faults: Faults | None = None) -> None:
        """Report one payment's notifications, in this order, after ``notify_after_s``: each
        one's first attempt waits for the previous one's (so the order is the order sent);
        retries go on independently. The current faults apply (and clear, if ``once``) unless
        ``faults`` are given: then those apply to this batch alone and the current ones are left
        as they are (a fake's per-object rules, which must not bend another test's
        notifications)."""
        for notification in batch:
            self._keep(notification)
        if faults is not None:
            # Its own faults: no reordering, and the notifications held back by the current
            # faults stay held (they wait for the next batch of those faults' kind).
            self._spawn(self._send_batch(list(batch), faults, self._settings.notify_after_s))
            return
        faults = self._faults
        touched = [n for n in batch if faults.touches(n)]
        if touched and faults.once:
            self._faults = Faults()
        order = list(batch)
        held_now: list[Notification] = []
        if touched and faults.reorder:
            if len(order) > 1:
                order.reverse()
            else:
                held_now, order = order, []
        released, self._held = self._held, held_now
        if released and self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None
        if held_now:
            self._held_timer = self._spawn(self._release_held_later())
        order.extend(released)
        self._spawn(self._send_batch(order, faults, self._settings.notify_after_s))

    def redeliver(self, event_id: str) -> bool:
        """Send a kept notification again (one copy, no faults, signed afresh)."""
        notification = self._kept.get(event_id)
        if notification is None:
            return False
        self._spawn(self._deliver(notification, copy=1, first=None))
        return True

    def _keep(self, notification: Notification) -> None:
        self._kept[notification.event_id] = notification
        while len(self._kept) > self._settings.max_kept:
            self._kept.popitem(last=False)

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _release_held_later(self) -> None:
        await asyncio.sleep(self._settings.reorder_hold_s)
        released, self._held = self._held, []
        self._held_timer = None
        if released:
            await self._send_batch(released, Faults(), 0.0)

    async def _send_batch(self, order: Sequence[Notification], faults: Faults, after_s: float) -> None:
        if after_s > 0:
            await asyncio.sleep(after_s)
        for notification in order:
            touched = faults.touches(notification)
            if touched and faults.drop:
                self._record(
                    notification,
                    copy=1,
                    attempt=0,
                    signed_at=None,
                    status=None,
                    error=None,
                    outcome="dropped",
                )
                log.info(
                    "notification dropped (fault)",
                    fake=self._name,
                    event_id=notification.event_id,
                    type=notification.type,
                )
                continue
            copies = max(1, faults.duplicate) if touched else 1
            if touched and faults.delay_s > 0:
                for copy in range(1, copies + 1):
                    self._spawn(self._deliver(notification, copy=copy, first=None, wait_s=faults.delay_s))
                continue
            # The copies' first attempts at once; the next notification after them.
            firsts = [asyncio.Event() for _ in range(copies)]
            for copy, first in enumerate(firsts, start=1):
                self._spawn(self._deliver(notification, copy=copy, first=first))
            for first in firsts:
                await first.wait()

    async def _deliver(
        self, notification: Notification, *, copy: int, first: asyncio.Event | None, wait_s: float = 0.0
    ) -> None:
        try:
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            settings = self._settings
            for attempt in range(1, settings.retry_attempts + 1):
                if attempt > 1:
                    delay = min(settings.retry_initial_s * 2 ** (attempt - 2), settings.retry_max_delay_s)
                    await asyncio.sleep(delay)
                delivered = await self._attempt(notification, copy, attempt)
                if first is not None:
                    first.set()
                    first = None
                if delivered:
                    return
        finally:
            if first is not None:  # cancelled before the first attempt answered
                first.set()

    async def _attempt(self, notification: Notification, copy: int, attempt: int) -> bool:
        if self._client is None:
            raise RuntimeError("the deliverer is not started")
        async with self._slots:
            signed_at = int(time.time())
            headers = {
                "Content-Type": "application/json; charset=utf-8",
                "User-Agent": self._user_agent,
                **self._signer(notification, signed_at),
            }
            status: int | None = None
            error: str | None = None
            try:
                async with self._client.post(
                    notification.url, data=notification.body, headers=headers, allow_redirects=False
                ) as response:
                    status = response.status
                    await response.read()  # the answer read to its end: the connection is kept
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = _error_name(exc)
        delivered = status is not None and 200 <= status < 300
        last = attempt >= self._settings.retry_attempts
        outcome: Outcome = "delivered" if delivered else ("gave_up" if last else "retry")
        self._record(
            notification,
            copy=copy,
            attempt=attempt,
            signed_at=signed_at,
            status=status,
            error=error,
            outcome=outcome,
        )
        log.info(
            "notification attempt",
            fake=self._name,
            event_id=notification.event_id,
            type=notification.type,
            copy=copy,
            attempt=attempt,
            status=status,
            error=error,
            outcome=outcome,
        )
        return delivered

    def _record(
        self,
        notification: Notification,
        *,
        copy: int,
        attempt: int,
        signed_at: int | None,
        status: int | None,
        error: str | None,
        outcome: Outcome,
    ) -> None:
        self._log.append(
            {
                "event_id": notification.event_id,
                "type": notification.type,
                "url": notification.url,
                "copy": copy,
                "attempt": attempt,
                "at": iso_now(),
                "signed_at": signed_at,
                "status": status,
                "error": error,
                "outcome": outcome,
            }
        )


def _error_name(exc: BaseException) -> str:
    """What the attempt log calls a failed attempt: the names it has always used (httpx's),
    whichever client sent it."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "ConnectTimeout"
    if isinstance(exc, TimeoutError):
        return "ReadTimeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "ConnectError"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "RemoteProtocolError"  # the receiver hung up, or its answer broke off
    if isinstance(exc, aiohttp.ClientResponseError):
        return "RemoteProtocolError"  # an answer that is not HTTP
    return "ReadError"


def control_router(deliverer: Callable[[], Deliverer]) -> APIRouter:
    """``/_control/…``: the faults, the attempt log, redelivery (for tests; no authentication:
    a fake listens on the loopback)."""
    router = APIRouter(prefix="/_control", tags=["control"])

    @router.get("/faults")
    async def get_faults() -> Faults:
        return deliverer().faults

    @router.post("/faults")
    async def set_faults(faults: Faults) -> Faults:
        deliverer().set_faults(faults)
        return faults

    @router.delete("/faults")
    async def clear_faults() -> Faults:
        deliverer().set_faults(Faults())
        return Faults()

    @router.get("/deliveries")
    async def deliveries(event_id: str | None = None) -> dict[str, Any]:
        return {"data": deliverer().attempts(event_id)}

    @router.delete("/deliveries", status_code=204)
    async def clear_deliveries() -> None:
        deliverer().clear_log()

    @router.post("/redeliver/{event_id}", status_code=202)
    async def redeliver(event_id: str) -> dict[str, Any]:
        if not deliverer().redeliver(event_id):
            raise HTTPException(404, f"no notification {event_id}")
        return {"event_id": event_id, "scheduled": True}

    return router
