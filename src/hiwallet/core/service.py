"""A deployable as a declaration: one builder turns a :class:`ServiceSpec` into the process's
lifespan, the same for every service.

A service declares what it is (its name, its database and role, the token issuers it accepts,
its messaging: the topology it declares, ``core.messaging.Messaging``, kept apart so that a
service without a broker imports no broker code) and, in ``setup``, what runs in it: its
consumers, relays, periodic jobs and gauges, the objects its routes use (on ``app.state``) and
what to close. The builder does the rest, in one order for every service:

start
    1. the pool, as the database's application role (``/ready``: ``database``);
    2. the token verifier of the declared issuers (``app.state.verifier``);
    3. the service's ``setup``: it registers its parts on the :class:`Runtime`;
    4. periodic jobs, gauges and one-off tasks (a bootstrap) start at once; the broker starts
       in the background, under the one broker-start policy (core.messaging): the process
       serves while RabbitMQ is away, the topology is declared as soon as it answers, and only
       then do the relays
       publish and the consumers consume (``/ready``: ``broker`` fails until then,
       ``consumers`` until every consumer consumes: an outbox keeps what is to be sent, a queue
       what is to be taken).
stop, in the reverse order
    1. the consumers take no new message and finish the one in hand (at most ``stop_timeout_s``);
    2. the background tasks are cancelled, the last started first;
    3. the broker is closed; what ``setup`` registered to close, the last first; the verifier;
       the pool.

A part that dies is never silent: each background task runs under :class:`Background`, which
logs a failure with its exception, starts the part again after a pause, and makes ``/ready``
fail (``background``) while any part is down: failed and waiting to start again, or ended on
its own while the process was not stopping (a defect: it is not started again).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import structlog
from fastapi import APIRouter, FastAPI

from hiwallet.core.auth import TokenVerifier, TrustedIssuer
from hiwallet.core.http.allowlist import ClientNetworks
from hiwallet.core.http.app import Lifespan, ReadyCheck, create_app
from hiwallet.core.http.lean import LeanRoute
from hiwallet.core.settings import Settings, get_settings

if TYPE_CHECKING:
    # Types only: asyncpg (and core.db, core.jobs with it) is loaded by the services that have a
    # database, when they open it, never by the front APIs and BFFs, which have none
    # (tests/test_deployables.py keeps it so).
    import asyncpg

    from hiwallet.core.jobs import PeriodicJob

__all__ = [
    "CONSUMER_STOP_TIMEOUT_S",
    "RESTART_DELAY_S",
    "Background",
    "BackgroundDown",
    "ConsumerPart",
    "DatabaseSpec",
    "Messaging",
    "OutboxSpec",
    "Part",
    "RelayPart",
    "RelaySettings",
    "Runtime",
    "ServiceSpec",
    "build_app",
    "service_lifespan",
]

log = structlog.get_logger(__name__)

# A background task that stopped on an error starts again after this long: long enough not to
# spin on a fault that persists (each start logs its traceback), short enough that a relay or a
# consumer is back within a second of the database or broker.
RESTART_DELAY_S = 1.0

# A consumer given this long to finish the message in hand at stop; past it, the message goes
# back to its queue with the channel (at least once: the consumer's processed events absorb it).
CONSUMER_STOP_TIMEOUT_S = 30.0


class BackgroundDown(Exception):
    """A background part of the process is not running (``/ready`` answers 503 with it)."""


class Part(Protocol):
    """What runs once the broker is there: a relay (core.outbox.Relay), a consumer."""

    async def run(self) -> None: ...


class ConsumerPart(Part, Protocol):
    """A consumer (core.consumer.Consumer): it says when it consumes, and stops taking."""

    @property
    def started(self) -> bool: ...

    async def stop(self) -> None: ...


class RelayPart(Part, Protocol):
    """An outbox's relay (core.outbox.Relay): a writer's hint wakes it (core.relay_hint)."""

    def wake(self) -> bool: ...


@dataclass(frozen=True)
class OutboxSpec:
    """An outbox a service's relay publishes: its table, the channel a commit's NOTIFY (or a
    hint) wakes the relay on, and the advisory lock that lets one instance's relay lead."""

    table: str
    channel: str
    lock_key: int


class RelaySettings(Protocol):
    """A service's relay settings: rows a pass takes, and how often it looks without a wake."""

    @property
    def relay_batch(self) -> int: ...

    @property
    def relay_poll_s(self) -> float: ...


class Messaging(Protocol):
    """The broker side of a service (core.messaging.Messaging: the platform's one broker-start
    policy). Apart from this module so that a service with no broker imports no broker code."""

    def connect(self, settings: Settings, client_name: str) -> Any:
        """The service's connection to the broker, not yet opened (``Runtime.bus``)."""
        ...

    def relay(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        bus: Any,
        outbox: OutboxSpec,
        *,
        batch_size: int,
        poll_interval_s: float,
        min_pass_interval_s: float,
        on_published: Callable[[int], None] | None,
    ) -> RelayPart:
        """The relay of ``outbox`` to ``bus`` (core.outbox.Relay), on ``connect``'s connections."""
        ...

    def start(
        self, bus: Any, tasks: Background, checks: dict[str, ReadyCheck], then: Callable[[], None]
    ) -> None:
        """Open ``bus`` in the background (``/ready``: ``broker`` until it is there), then call
        ``then`` (which starts the relays and consumers)."""
        ...

    async def close(self, bus: Any) -> None: ...


P = TypeVar("P", bound=Part)
C = TypeVar("C", bound=ConsumerPart)


class Background:
    """Named background tasks, each kept running: a failure is logged with its exception and
    the task starts again after ``restart_delay_s``; a task that returns while the process is not
    stopping is a defect, logged at error level and not started again. :meth:`check` raises
    :class:`BackgroundDown` naming every part that is down; :meth:`stop` cancels them, the last
    started first."""

    def __init__(self, *, restart_delay_s: float = RESTART_DELAY_S) -> None:
        self.restart_delay_s = restart_delay_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._down: dict[str, str] = {}  # name -> why (the error's class, or "ended")
        self._stopping = False

    @property
    def names(self) -> list[str]:
        return list(self._tasks)

    def start(self, name: str, work: Callable[[], Awaitable[None]], *, forever: bool = True) -> None:
        """Run ``work`` as the part ``name``. ``forever``: it is meant to run for the process's
        life (returning is a defect); else it is done when it returns (and started again if it
        fails, like any part)."""
        if name in self._tasks:
            raise ValueError(f"a background task named {name!r} runs already")
        self._tasks[name] = asyncio.create_task(self._keep(name, work, forever), name=name)

    def task(self, name: str) -> asyncio.Task[None] | None:
        return self._tasks.get(name)

    async def _keep(self, name: str, work: Callable[[], Awaitable[None]], forever: bool) -> None:
        while True:
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping:
                    log.exception("background task failed while stopping", task=name)
                    return
                self._down[name] = type(exc).__name__
                log.exception("background task failed; starting it again", task=name,
                              restart_in_s=self.restart_delay_s)  # fmt: skip
                await asyncio.sleep(self.restart_delay_s)
                self._down.pop(name, None)
                continue
            if forever and not self._stopping:
                # Work that is meant to run for the process's life returned: a defect.
                self._down[name] = "ended"
                log.error("background task ended on its own", task=name)
            return

    def down(self) -> dict[str, str]:
        """The parts that are down, and why."""
        return dict(self._down)

    async def check(self) -> None:
        if self._down:
            raise BackgroundDown(", ".join(f"{n} ({why})" for n, why in sorted(self._down.items())))

    def stopping(self) -> None:
        """From now on a part that returns or fails is stopping, not down."""
        self._stopping = True

    async def stop(self) -> None:
        self._stopping = True
        for name in reversed(list(self._tasks)):
            task = self._tasks[name]
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # _keep logs its work's errors; this would be its own defect
                log.exception("background task failed while stopping", task=name)
        self._tasks.clear()


@dataclass(frozen=True)
class DatabaseSpec:
    """The service's database (its name: a test passes a clone) and the role it connects as."""

    name: str
    role: str
    pool_max_size: int | None = None
    # Run on each new connection of the pool (the ledger's codecs: ledger.init_connection).
    init: Callable[[asyncpg.Connection], Awaitable[None]] | None = None

    async def create_pool(
        self, settings: Settings | None = None, *, max_size: int | None = None
    ) -> asyncpg.Pool:
        """A pool on the database as the role: the service's own (the builder's), or a small
        one for a command or a test (``max_size``)."""
        from hiwallet.core import db

        return await db.create_pool(
            self.name,
            role=self.role,
            settings=settings or get_settings(),
            max_size=max_size or self.pool_max_size,
            init=self.init,
        )

    def dedicated(self, settings: Settings | None = None) -> Callable[[], Awaitable[asyncpg.Connection]]:
        """Connections of their own, as the role (a relay's session lock and LISTEN, each job
        round's lock: never a pooled one)."""
        from hiwallet.core import db

        return db.dedicated_connection(self.name, self.role, settings or get_settings())


@dataclass
class Runtime:
    """What ``setup`` is given: the app, the pool, the broker (when the service declares its
    messaging), a dedicated-connection factory (relays' and jobs' session locks), the ready
    checks, and the registration of the parts the builder runs and stops."""

    app: FastAPI
    settings: Settings
    pool: asyncpg.Pool | None
    broker: Any  # core.broker.Broker, when the service declares its messaging
    checks: dict[str, ReadyCheck]
    _connect: Callable[[], Awaitable[asyncpg.Connection]] | None
    messaging: Messaging | None = None
    consumers: list[tuple[str, ConsumerPart]] = field(default_factory=list)
    relays: list[tuple[str, Part]] = field(default_factory=list)
    jobs: list[tuple[str, Callable[[], Awaitable[None]]]] = field(default_factory=list)
    tasks: list[tuple[str, Callable[[], Awaitable[None]]]] = field(default_factory=list)
    closers: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)

    @property
    def db(self) -> asyncpg.Pool:
        if self.pool is None:
            raise RuntimeError("this service declares no database")
        return self.pool

    @property
    def bus(self) -> Any:
        """The service's core.broker.Broker."""
        if self.broker is None:
            raise RuntimeError("this service declares no messaging, so it has no broker")
        return self.broker

    def connect(self) -> Callable[[], Awaitable[asyncpg.Connection]]:
        if self._connect is None:
            raise RuntimeError("this service declares no database")
        return self._connect

    def consumer(self, name: str, consumer: C) -> C:
        """Consumes once the topology is declared; stopped first, finishing the message in hand."""
        self.consumers.append((name, consumer))
        return consumer

    def relay(self, name: str, relay: P) -> P:
        """Publishes once the topology is declared."""
        self.relays.append((name, relay))
        return relay

    def outbox_relay(
        self,
        outbox: OutboxSpec,
        settings: RelaySettings,
        *,
        on_published: Callable[[int], None] | None = None,
        min_pass_interval_s: float = 0.0,
        name: str = "relay",
    ) -> RelayPart:
        """The relay of the service's ``outbox`` to its broker, built alike for every service (its
        own dedicated connections, ``settings``' batch and poll, ``on_published`` counting what
        it sent) and registered as :meth:`relay`: it publishes once the topology is declared."""
        if self.messaging is None:
            raise RuntimeError("this service declares no messaging, so it has no relay")
        relay = self.messaging.relay(
            self.connect(),
            self.bus,
            outbox,
            batch_size=settings.relay_batch,
            poll_interval_s=settings.relay_poll_s,
            min_pass_interval_s=min_pass_interval_s,
            on_published=on_published,
        )
        return self.relay(name, relay)

    def job(self, job: PeriodicJob) -> PeriodicJob:
        """A periodic job (one round at a time across instances: its advisory lock)."""
        self.jobs.append((job.name, job.run_forever))
        return job

    def every(self, name: str, interval_s: float, work: Callable[[], Awaitable[None]]) -> None:
        """``work`` once every ``interval_s`` in every instance (gauges): a failed round is
        logged by its error's class; the next one tries again."""

        async def rounds() -> None:
            while True:
                started = time.monotonic()
                try:
                    await work()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the next round tries again
                    log.warning("background work failed", work=name, error=type(exc).__name__)
                await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))

        self.jobs.append((name, rounds))

    def task(self, name: str, work: Callable[[], Awaitable[None]]) -> None:
        """``work`` once, in the background, from the start (a bootstrap): done when it returns,
        started again if it fails."""
        self.tasks.append((name, work))

    def close(self, closer: Callable[[], Awaitable[Any]]) -> None:
        """Closed at stop, after the broker, the last registered first."""
        self.closers.append(closer)


@dataclass(frozen=True)
class ServiceSpec:
    """One deployable's declaration (see the module's docstring for what the builder does).

    The HTTP side, for :func:`build_app`: ``routers`` in order, the lean routes among them that
    take the ``hot_routes`` lane, the body limit, ``metrics``, called with the app before the
    routes are included (the service's own counters, on ``app.state``), and ``openapi``, called
    after, to complete the document (the models a lean route reads itself, a setting's values)."""

    name: str
    setup: Callable[[Runtime], Awaitable[None]]
    database: DatabaseSpec | None = None
    issuers: Callable[[], Sequence[TrustedIssuer]] | None = None
    messaging: Messaging | None = None
    consumer_stop_timeout_s: float = CONSUMER_STOP_TIMEOUT_S
    routers: Sequence[APIRouter] = ()
    hot_routes: Sequence[LeanRoute] = ()
    max_body_bytes: int = 1_000_000
    metrics: Callable[[FastAPI], None] | None = None
    openapi: Callable[[FastAPI], None] | None = None
    # The clients' networks the guarded paths accept (None or empty: every client).
    client_networks: ClientNetworks | None = None


def build_app(
    spec: ServiceSpec,
    *,
    settings: Settings | None = None,
    verifier: TokenVerifier | None = None,
    background: bool = True,
) -> FastAPI:
    """The process's app: the platform's HTTP factory (problem+json, the edge, /health, /ready,
    /metrics), the builder's lifespan, the service's metrics and routes (see
    :func:`service_lifespan` for ``verifier`` and ``background``)."""
    checks: dict[str, ReadyCheck] = {}
    app = create_app(
        spec.name,
        ready_checks=checks,
        lifespan=service_lifespan(spec, checks, settings=settings, verifier=verifier, background=background),
        max_body_bytes=spec.max_body_bytes,
        hot_routes=spec.hot_routes,
        client_networks=spec.client_networks,
    )
    if spec.metrics is not None:
        spec.metrics(app)
    for router in spec.routers:
        app.include_router(router)
    if spec.openapi is not None:
        spec.openapi(app)
    return app


def service_lifespan(
    spec: ServiceSpec,
    checks: dict[str, ReadyCheck],
    *,
    settings: Settings | None = None,
    verifier: TokenVerifier | None = None,
    background: bool = True,
) -> Lifespan:
    """The lifespan of ``spec``'s app, filling ``checks`` (the app's ready checks) as it starts.

    ``verifier`` stands in for the declared issuers' (tests; not closed here). ``background=False``
    runs ``setup`` but starts none of its consumers, relays and jobs, and connects no broker
    (tests that drive them by hand)."""
    core = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool: asyncpg.Pool | None = None
        connect: Callable[[], Awaitable[asyncpg.Connection]] | None = None
        if spec.database is not None:
            pool = await spec.database.create_pool(core)
            connect = spec.database.dedicated(core)
            ready_pool = pool

            async def database_ready() -> None:
                await ready_pool.fetchval("SELECT 1")

            checks["database"] = database_ready
            app.state.pool = pool
        own_verifier: TokenVerifier | None = None
        if verifier is not None:
            app.state.verifier = verifier
        elif spec.issuers is not None:
            app.state.verifier = own_verifier = TokenVerifier(spec.issuers())
        broker = (
            spec.messaging.connect(core, spec.name) if spec.messaging is not None and background else None
        )
        runtime = Runtime(app, core, pool, broker, checks, connect, spec.messaging)
        tasks = Background()
        try:
            await spec.setup(runtime)
            if background:
                _start(spec, runtime, tasks, checks)
            yield
        finally:
            checks.clear()
            await _stop(spec, runtime, tasks)
            if own_verifier is not None:
                await own_verifier.aclose()
            if pool is not None:
                await pool.close()
            log.info("stopped", service=spec.name)

    return lifespan


def _start(spec: ServiceSpec, runtime: Runtime, tasks: Background, checks: dict[str, ReadyCheck]) -> None:
    for name, work in runtime.jobs:
        tasks.start(name, work)
    for name, work in runtime.tasks:
        tasks.start(name, work, forever=False)
    broker = runtime.broker
    if broker is not None and spec.messaging is not None:

        def start_parts() -> None:
            for name, relay in runtime.relays:
                tasks.start(name, relay.run)
            for name, consumer in runtime.consumers:
                tasks.start(name, consumer.run)

        spec.messaging.start(broker, tasks, checks, start_parts)
        if runtime.consumers:
            consumers = runtime.consumers

            async def consuming() -> None:
                waiting = [name for name, c in consumers if not c.started]
                if waiting:
                    raise BackgroundDown(f"not consuming yet: {', '.join(waiting)}")

            checks["consumers"] = consuming
    elif runtime.relays or runtime.consumers:
        raise RuntimeError(f"{spec.name} runs relays or consumers but declares no messaging")
    checks["background"] = tasks.check


async def _stop(spec: ServiceSpec, runtime: Runtime, tasks: Background) -> None:
    # The consumers first: no new message, the one in hand finished (their tasks return once
    # they have shut down; the rest is cancelled with the other tasks).
    tasks.stopping()
    for _, consumer in runtime.consumers:
        await consumer.stop()
    running = [t for name, _ in runtime.consumers if (t := tasks.task(name)) is not None]
    if running:
        await asyncio.wait(running, timeout=spec.consumer_stop_timeout_s)
    await tasks.stop()
    if runtime.broker is not None and spec.messaging is not None:
        await spec.messaging.close(runtime.broker)
    for closer in reversed(runtime.closers):
        try:
            await closer()
        except Exception:  # the others are still closed; this one is logged, not hidden
            log.exception("closing failed", service=spec.name)
