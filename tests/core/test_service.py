"""The builder of a deployable (core.service): its background parts are never silent (a part
that fails is logged with its exception, makes /ready fail until it runs again; one that ends on
its own stays down), and it stops in order (consumers, tasks, what setup registered, the
pool). The orchestrator runs on it against real RabbitMQ and PostgreSQL (tests/withdrawals)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import structlog
from fastapi import FastAPI

from hiwallet.core import db
from hiwallet.core.broker import Topology
from hiwallet.core.http import ReadyCheck, create_app
from hiwallet.core.messaging import Messaging
from hiwallet.core.outbox import Relay
from hiwallet.core.service import (
    Background,
    BackgroundDown,
    DatabaseSpec,
    OutboxSpec,
    Runtime,
    ServiceSpec,
    service_lifespan,
)
from hiwallet.core.settings import get_settings
from tests.waiting import until


async def test_a_failing_part_is_logged_down_then_back() -> None:
    tasks = Background(restart_delay_s=0.2)
    attempts = 0
    failed = asyncio.Event()
    back = asyncio.Event()

    async def flaky() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            failed.set()
            raise ConnectionResetError("gone")
        back.set()
        await asyncio.Event().wait()  # runs for the process's life

    with structlog.testing.capture_logs() as logs:
        tasks.start("relay", flaky)
        await asyncio.wait_for(failed.wait(), 5)
        await until(lambda: tasks.down(), 5, "the relay down")
        with pytest.raises(BackgroundDown, match=r"relay \(ConnectionResetError\)"):
            await tasks.check()
        await asyncio.wait_for(back.wait(), 5)
        await tasks.check()  # running again: ready
        await tasks.stop()
    [entry] = [e for e in logs if e["event"] == "background task failed; starting it again"]
    assert entry["task"] == "relay" and entry["log_level"] == "error" and entry["exc_info"] is True


async def test_a_part_that_ends_on_its_own_stays_down_and_stopping_is_not_an_end() -> None:
    tasks = Background()
    ended = asyncio.Event()

    async def quits() -> None:
        ended.set()

    async def runs() -> None:
        await asyncio.Event().wait()

    with structlog.testing.capture_logs() as logs:
        tasks.start("consumer", quits)
        tasks.start("gauges", runs)
        tasks.start("declare", quits, forever=False)  # one-shot work: done, not down
        await asyncio.wait_for(ended.wait(), 5)
        await until(lambda: tasks.down(), 5, "the consumer down")
        assert tasks.down() == {"consumer": "ended"}
        with pytest.raises(BackgroundDown, match="consumer"):
            await tasks.check()
        await tasks.stop()
    assert [e["task"] for e in logs if e["event"] == "background task ended on its own"] == ["consumer"]


def _app(spec: ServiceSpec) -> FastAPI:
    checks: dict[str, ReadyCheck] = {}
    return create_app(spec.name, ready_checks=checks, lifespan=service_lifespan(spec, checks))


async def test_a_dead_job_makes_the_process_unready_and_the_stop_is_ordered(wallet_db: str) -> None:
    order: list[str] = []
    dying = asyncio.Event()

    async def setup(rt: Runtime) -> None:
        async def job() -> None:
            await rt.db.fetchval("SELECT 1")  # the pool is there, as the application role
            dying.set()
            raise RuntimeError("the job's defect")

        rt.every("gauges", 60.0, _forever)
        rt.jobs.append(("sweep", job))
        rt.close(lambda: _record(order, "first registered"))
        rt.close(lambda: _record(order, "last registered"))

    spec = ServiceSpec(
        "builder-test", setup, database=DatabaseSpec(wallet_db, db.app_role("wallet"), pool_max_size=2)
    )
    app = _app(spec)
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        await asyncio.wait_for(dying.wait(), 5)
        ready = await until(lambda: _unready(client), 5, "/ready answering 503")
        assert ready.json()["checks"] == {"background": "unavailable"}
        pool = app.state.pool
    assert order == ["last registered", "first registered"]
    assert pool.is_closing()


async def test_a_one_off_task_starts_again_after_a_failure_and_is_done_when_it_returns() -> None:
    attempts = 0
    done = asyncio.Event()

    async def bootstrap() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionRefusedError("the realm is away")
        done.set()

    async def setup(rt: Runtime) -> None:
        rt.task("bootstrap", bootstrap)

    app = _app(ServiceSpec("builder-test", setup))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        await asyncio.wait_for(done.wait(), 5)
        await asyncio.sleep(0.05)
        ready = await client.get("/ready")  # done: not a part that ended on its own
        assert (ready.status_code, ready.json()["checks"]) == (200, {"background": "ok"})
    assert attempts == 2


async def test_relays_or_consumers_without_messaging_are_refused_at_start() -> None:
    async def setup(rt: Runtime) -> None:
        rt.relays.append(("relay", object()))  # type: ignore[arg-type]

    app = _app(ServiceSpec("builder-test", setup))
    with pytest.raises(RuntimeError, match="declares no messaging"):
        async with app.router.lifespan_context(app):
            pass


async def test_an_outbox_relay_is_built_from_its_declaration_and_registered() -> None:
    """Runtime.outbox_relay: the service's outbox and relay settings, its dedicated connections
    and broker, registered to publish once the topology is declared; none without messaging."""

    async def connect() -> Any:
        raise AssertionError("built, not run")

    class RelaySettings:
        relay_batch = 7
        relay_poll_s = 0.5

    broker, counted = object(), lambda n: None
    outbox = OutboxSpec("svc.outbox", "svc_outbox", 0x7465_7374)
    rt = Runtime(FastAPI(), get_settings(), None, broker, {}, connect, Messaging(Topology((), ())))
    relay = rt.outbox_relay(outbox, RelaySettings(), on_published=counted, min_pass_interval_s=0.02)
    assert isinstance(relay, Relay) and rt.relays == [("relay", relay)]
    assert (relay.table, relay.channel, relay.lock_key) == ("svc.outbox", "svc_outbox", 0x7465_7374)
    assert (relay.batch_size, relay.poll_interval_s, relay.min_pass_interval_s) == (7, 0.5, 0.02)
    assert relay._broker is broker and relay._connect is connect and relay._on_published is counted
    plain = Runtime(FastAPI(), get_settings(), None, broker, {}, connect, Messaging(Topology((), ())))
    assert plain.outbox_relay(outbox, RelaySettings(), name="events").min_pass_interval_s == 0
    assert plain.relays[0][0] == "events"

    without = Runtime(FastAPI(), get_settings(), None, None, {}, connect)
    with pytest.raises(RuntimeError, match="declares no messaging"):
        without.outbox_relay(outbox, RelaySettings())
    assert without.relays == []


async def _unready(client: httpx.AsyncClient) -> httpx.Response | None:
    answer = await client.get("/ready")
    return answer if answer.status_code == 503 else None


async def _forever() -> None:
    await asyncio.Event().wait()


async def _record(order: list[str], what: str) -> None:
    order.append(what)
