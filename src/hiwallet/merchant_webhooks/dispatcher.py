"""The dispatcher: events fanned out to deliveries, due deliveries claimed, sent, recorded.

A round (:meth:`Dispatcher.round`, the tests' step; the process pumps the same steps without
waiting for a batch's attempts: :meth:`Dispatcher.pump`), at the clock's ``now``:

1. fan-out: undispatched events, oldest first, become one delivery per subscribed enabled
   endpoint (one statement; one instance at a time);
2. claim: due deliveries (``FOR UPDATE SKIP LOCKED``, at most ``batch_size``) whose endpoint is
   enabled and whose earlier deliveries of the same resource to the same endpoint are done (in
   order per resource), leased until ``now + lease_s``;
3. send them, at most ``concurrency`` at once, each to an address checked again (SSRF: the name
   may resolve elsewhere today; the connection's own resolution refuses a private address as
   well: core.egress.PublicResolver), signed in the
   Standard Webhooks scheme with the endpoint's secret and, during a rotation's overlap, the
   previous one too;
4. record every attempt and each delivery's next step (delivered; again after the schedule's
   delay with jitter; failed once the schedule is spent), then each endpoint's failure streak,
   and disable an endpoint that has failed for ``disable_after_s`` (an ``endpoint.disabled``
   event tells the business's other endpoints), in one transaction.

A process that dies between 3 and 4 loses nothing: the lease ends and the delivery is sent again
(at least once; receivers deduplicate by ``webhook-id``, the event's id).

:meth:`Dispatcher.run` runs rounds for the process's life: woken by ``pg_notify`` (the writers'
commits), or every ``poll_interval_s``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import structlog

from hiwallet.contracts.merchant_events import ENDPOINT_DISABLED, NOTIFY_CHANNEL, event_id, secret_place
from hiwallet.core.egress import ForbiddenTarget, PublicResolver, check_url, resolve_public
from hiwallet.core.http.client import AiohttpTransport
from hiwallet.core.jobs import in_batches
from hiwallet.core.queries import load_queries
from hiwallet.core.sealing import KeyRing, Unopenable
from hiwallet.core.timeouts import within
from hiwallet.merchant_webhooks.settings import MerchantWebhooksSettings

__all__ = ["FAN_OUT_LOCK_KEY", "Attempt", "Dispatcher", "next_delay_s", "sign"]

log = structlog.get_logger(__name__)

Q = load_queries(Path(__file__).parent / "sql" / "queries.sql")

# One fan-out at a time in hiwallet_wallet (advisory locks are per database; wallet-api's
# purge is "hwai", wallet-consumer's "hwwr" and "hwwp").
FAN_OUT_LOCK_KEY = 0x6877_6D66  # "hwmf"
# One retention round at a time (PeriodicJob's session lock).
PURGE_LOCK_KEY = 0x6877_6D70  # "hwmp"

Clock = Callable[[], float]
CHECK_TTL_S = 10.0
CHECK_CACHE_SIZE = 10_000


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One Standard Webhooks signature: ``v1,`` + base64(HMAC-SHA256(key, id.timestamp.body)),
    the key being the secret's bytes after ``whsec_``."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def next_delay_s(attempt: int, schedule: Sequence[float], jitter: float, rng: random.Random) -> float | None:
    """How long after failed attempt number ``attempt`` (1-based) the next one comes: the
    schedule's delay times 1 to 1 + ``jitter`` (so receivers coming back are not hit by every
    sender at once, and never sooner than the schedule says); None once the schedule is spent."""
    if attempt > len(schedule):
        return None
    return schedule[attempt - 1] * (1.0 + jitter * rng.random())


@dataclass(frozen=True)
class Attempt:
    """What one attempt did (recorded for each)."""

    bucket: int
    delivery_id: str
    endpoint_id: str
    ok: bool
    status_code: int | None
    error: str | None
    duration_ms: int
    attempted_at: datetime


class Dispatcher:
    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: MerchantWebhooksSettings,
        *,
        clock: Clock = time.time,
        rng: random.Random | None = None,
        client: httpx.AsyncClient | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.keys = KeyRing.parse(settings.secret_keys.get_secret_value())
        # httpx's API over aiohttp's pool (core.http.AiohttpTransport: a fifth of httpx's own
        # pool's CPU a request); its resolver refuses private addresses at connection time.
        self.client = client or httpx.AsyncClient(
            transport=AiohttpTransport(
                max_connections=settings.concurrency,
                max_response_bytes=settings.max_response_bytes,
                resolver=None if settings.allow_private_targets else PublicResolver,
            ),
            timeout=httpx.Timeout(settings.request_timeout_s, connect=settings.connect_timeout_s),
            follow_redirects=False,  # a redirect could lead anywhere, past the SSRF check
            trust_env=False,
        )
        # host -> (until, the refusal or None): the check before each call, kept as long as
        # aiohttp keeps a resolution (its DNS cache, 10 s).
        self._checked: dict[str, tuple[float, ForbiddenTarget | None]] = {}
        self._own_client = client is None
        self.on_attempt = on_attempt or (lambda _attempt: None)
        self.wake = asyncio.Event()
        self.rounds = 0
        self._inflight: set[asyncio.Task[None]] = set()
        self._done: list[tuple[asyncpg.Record, Attempt]] = []
        self._ended = asyncio.Event()

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    # -- one round ---------------------------------------------------------------------------------

    async def fan_out(self, now: datetime) -> int:
        """Events made into deliveries; the number of events dispatched."""
        rows = await self.pool.fetch(Q["fan_out"], self.settings.fan_out_batch, now, FAN_OUT_LOCK_KEY)
        return len(rows)

    async def claim(self, now: datetime, size: int | None = None) -> list[asyncpg.Record]:
        lease_end = now + timedelta(seconds=self.settings.lease_s)
        size = self.settings.batch_size if size is None else size
        rows: list[asyncpg.Record] = await self.pool.fetch(Q["claim"], now, size, lease_end)
        return rows

    async def purge(self) -> int:
        """Events past the retention, with their deliveries and attempts, deleted in batches of
        ``purge_batch`` (each its own short statement: no long transaction, no lock held for a
        round), at most ``purge_max_batches`` a round; the number of events deleted."""
        before = self.now() - timedelta(days=self.settings.retention_days)

        async def batch() -> int:
            status = await self.pool.execute(Q["purge"], before, self.settings.purge_batch)
            return int(status.split()[-1])  # "DELETE n"

        return await in_batches(
            batch, batch=self.settings.purge_batch, max_batches=self.settings.purge_max_batches
        )

    async def round(self) -> bool:
        """One round; True when there may be more to do at once: a full fan-out, or any
        delivery claimed (its outcome may free the next delivery of its resource)."""
        self.rounds += 1
        now = self.now()
        fanned = await self.fan_out(now)
        claimed = await self.claim(now)
        if claimed:
            attempts = await self.send_all(claimed)
            await self.record(claimed, attempts)
        return fanned >= self.settings.fan_out_batch or bool(claimed)

    async def pump(self) -> bool:
        """What the process runs (:meth:`run`): fan out, claim as many as there is room for in
        flight (``concurrency``) and start their attempts without waiting for them; the
        recorder (:meth:`_recorder`) records them as they end, beside it. A slow receiver holds
        only its own attempts, never the others', and recording never delays the next event's
        claim. True when there may be more at once."""
        now = self.now()
        fanned = await self.fan_out(now)
        room = min(self.settings.batch_size, self.settings.concurrency - len(self._inflight))
        claimed = await self.claim(now, room) if room > 0 else []
        for row in claimed:
            task = asyncio.create_task(self._attempt(row))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        return fanned >= self.settings.fan_out_batch or (room > 0 and len(claimed) >= room)

    async def _attempt(self, row: asyncpg.Record) -> None:
        attempt = await self.send(row)
        self._done.append((row, attempt))
        self._ended.set()

    async def _recorder(self) -> None:
        """Records the attempts that ended, a batch at a time, then wakes the pump (a recorded
        delivery may free the next one of its resource). A failed recording is logged: its
        deliveries are sent again once their lease ends (at least once)."""
        while True:
            await self._ended.wait()
            self._ended.clear()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("recording webhook attempts failed; they are sent again after their lease")
            self.wake.set()

    async def flush(self) -> None:
        """Record the attempts that ended (in one transaction). If it fails, they are sent again
        once their lease ends (at least once)."""
        if not self._done:
            return
        done, self._done = self._done, []
        await self.record([row for row, _ in done], [attempt for _, attempt in done])

    async def send_all(self, claimed: Sequence[asyncpg.Record]) -> list[Attempt]:
        limit = asyncio.Semaphore(max(1, self.settings.concurrency))

        async def one(row: asyncpg.Record) -> Attempt:
            async with limit:
                return await self.send(row)

        return list(await asyncio.gather(*(one(r) for r in claimed)))

    def _secrets(self, row: asyncpg.Record, now: datetime) -> list[str]:
        place = secret_place(row["endpoint_id"])
        secrets = [self.keys.open(row["secret_sealed"], place).decode()]
        until = row["previous_secret_until"]
        if row["previous_secret_sealed"] is not None and until is not None and until > now:
            secrets.append(self.keys.open(row["previous_secret_sealed"], place).decode())
        return secrets

    async def _check(self, url: str) -> None:
        """The SSRF rule again before the call (the name may resolve elsewhere today)."""
        target = check_url(url)
        key = f"{target.host}:{target.port}"
        cached = self._checked.get(key)
        monotonic = time.monotonic()
        if cached is None or cached[0] < monotonic:
            refusal: ForbiddenTarget | None = None
            try:
                await resolve_public(
                    target,
                    allow_private=self.settings.allow_private_targets,
                    timeout_s=self.settings.dns_timeout_s,
                )
            except ForbiddenTarget as exc:
                refusal = exc
            if len(self._checked) > CHECK_CACHE_SIZE:
                self._checked.clear()
            cached = self._checked[key] = (monotonic + CHECK_TTL_S, refusal)
        if cached[1] is not None:
            raise cached[1]

    async def send(self, row: asyncpg.Record) -> Attempt:
        """One attempt of one delivery; never raises (its failure is the attempt's outcome)."""
        now = self.now()
        started = time.perf_counter()
        code: int | None = None
        error: str | None = None
        try:
            body = orjson.dumps(
                {
                    "type": row["type"],
                    "timestamp": row["event_created_at"].astimezone(UTC).isoformat().replace("+00:00", "Z"),
                    "data": _object(row["payload"]),
                }
            )
            timestamp = int(now.timestamp())
            signatures = " ".join(sign(s, row["event_id"], timestamp, body) for s in self._secrets(row, now))
            headers = {
                "content-type": "application/json",
                "user-agent": self.settings.user_agent,
                "webhook-id": row["event_id"],
                "webhook-timestamp": str(timestamp),
                "webhook-signature": signatures,
            }
            await self._check(row["url"])
            response = await self.client.post(row["url"], content=body, headers=headers)
            code = response.status_code  # a receiver's answer is its status; its body is ignored
            if not 200 <= code < 300:
                error = f"status {code}"
        except ForbiddenTarget as exc:
            error = f"forbidden-target:{exc.reason}"
        except httpx.TimeoutException as exc:
            error = f"timeout:{type(exc).__name__}"
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        except Unopenable:
            error = "secret-unopenable"  # the key ring is not wallet-api's: an operator's fault
            log.error("webhook secret does not open", endpoint=row["endpoint_id"])
        except Exception as exc:  # one delivery's defect is its attempt's failure, not the round's
            error = type(exc).__name__
            log.exception("webhook attempt failed", delivery=row["id"])
        duration_ms = int((time.perf_counter() - started) * 1000)
        attempt = Attempt(
            row["bucket"], row["id"], row["endpoint_id"], error is None, code, error, duration_ms, now
        )
        self.on_attempt(attempt)
        return attempt

    async def record(self, claimed: Sequence[asyncpg.Record], attempts: Sequence[Attempt]) -> None:
        now = self.now()
        statuses: list[str] = []
        next_at: list[datetime | None] = []
        schedule = self.settings.retry_schedule_s
        for row, attempt in zip(claimed, attempts, strict=True):
            if attempt.ok:
                statuses.append("delivered")
                next_at.append(None)
                continue
            delay = next_delay_s(row["attempts"] + 1, schedule, self.settings.retry_jitter, self.rng)
            statuses.append("pending" if delay is not None else "failed")
            next_at.append(attempt.attempted_at + timedelta(seconds=delay) if delay is not None else None)
        # Per endpoint: a success in this round ends its failure streak; else it fails since the
        # round's first attempt (if no streak runs yet).
        streaks: dict[tuple[int, str], tuple[bool, datetime]] = {}
        for attempt in attempts:
            key = (attempt.bucket, attempt.endpoint_id)
            ok, at = streaks.get(key, (False, attempt.attempted_at))
            streaks[key] = (ok or attempt.ok, min(at, attempt.attempted_at))
        failing = [k for k, (ok, _) in streaks.items() if not ok]
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                Q["record"],
                [a.bucket for a in attempts],
                [a.delivery_id for a in attempts],
                statuses,
                [a.status_code for a in attempts],
                [a.error for a in attempts],
                [a.duration_ms for a in attempts],
                [a.attempted_at for a in attempts],
                next_at,
            )
            await conn.execute(
                Q["endpoint_streaks"],
                [k[0] for k in streaks],
                [k[1] for k in streaks],
                [ok for ok, _ in streaks.values()],
                [at for _, at in streaks.values()],
            )
            if failing:
                disabled = await conn.fetch(
                    Q["disable_failing"],
                    [k[0] for k in failing],
                    [k[1] for k in failing],
                    now - timedelta(seconds=self.settings.disable_after_s),
                    now,
                )
                for endpoint in disabled:
                    await conn.execute(
                        Q["insert_notice"],
                        endpoint["bucket"],
                        event_id(ENDPOINT_DISABLED, f"{endpoint['id']}@{now.isoformat()}"),
                        endpoint["account_id"],
                        endpoint["id"],
                        orjson.dumps(
                            {
                                "account_id": endpoint["account_id"],
                                "endpoint_id": endpoint["id"],
                                "url": endpoint["url"],
                                "reason": "failing",
                                "failing_since": endpoint["failing_since"].isoformat(),
                                "disabled_at": now.isoformat(),
                            }
                        ).decode(),
                        now,
                    )
                    log.warning("webhook endpoint disabled: failing", endpoint=endpoint["id"])
        if failing:
            self.wake.set()  # an endpoint.disabled notice to fan out

    # -- for the process's life ------------------------------------------------------------------

    async def run(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> None:
        """Rounds until cancelled: at once while there is more, else on a writer's pg_notify or
        after ``poll_interval_s``. A failed round raises (the service's Background logs it and
        starts the dispatcher again after a pause)."""
        conn = await self._listen(connect)
        recorder = asyncio.create_task(self._recorder())
        try:
            while True:
                if conn.is_closed():
                    # The LISTEN connection was lost (a restarted or failed-over server, a
                    # terminated backend): without it the dispatcher would only poll. Listen
                    # again; a failure raises and the service's Background restarts the
                    # dispatcher after a pause. A notice sent meanwhile was lost: look now.
                    log.warning("webhook listener connection lost; listening again")
                    conn = await self._listen(connect)
                    self.wake.set()
                self.wake.clear()
                more = await self.pump()
                if not more:
                    with contextlib.suppress(TimeoutError):
                        await within(self.wake.wait(), self.settings.poll_interval_s)
        finally:
            # What is in flight is left to its lease (sent again by whoever runs next).
            recorder.cancel()
            for task in list(self._inflight):
                task.cancel()
            self._done.clear()
            with contextlib.suppress(Exception):
                await conn.close()

    async def _listen(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> asyncpg.Connection:
        conn = await connect()
        try:
            await conn.add_listener(NOTIFY_CHANNEL, self._notified)
            # Its loss wakes the loop at once (it would otherwise notice only at the next poll).
            conn.add_termination_listener(self._notified)
        except BaseException:
            conn.terminate()
            raise
        return conn

    def _notified(self, *_args: object) -> None:
        self.wake.set()


def _object(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str | bytes) else value
