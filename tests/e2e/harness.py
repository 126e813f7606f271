"""The end-to-end harness: the top-up path's real processes on free ports, each pointed by its
environment at fresh databases and at a RabbitMQ virtual host of its own, and the faults the
tests inflict on them (SIGKILL, a broker or database that stops answering).

Processes run as an operator runs them (``python -m hiwallet.cli run <name> --port N``), in a
session of their own (a kill takes their whole process group), logging to a file per process
that a failing test prints. Every wait polls a condition against a deadline; nothing sleeps to
synchronise.

RabbitMQ: the topology's names are fixed (``hiwallet.topups`` …), so a test run is isolated by
virtual host (``rabbitmqctl add_vhost``; about 1.5 s of a CPU per rabbitmqctl call here, so one
vhost per test module, its queues and exchanges deleted between tests over AMQP, which costs
milliseconds).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aio_pika
import httpx

from tests import waiting
from tests.faultproxy import FaultProxy

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
RABBITMQCTL_TIMEOUT_S = 60.0
AMQP_HOST, AMQP_PORT = "127.0.0.1", 5672
# The e2e tests wait through these (tests/waiting.py's), polling what they watch (SQL, HTTP, the
# management API) at most every POLL_S.
POLL_S = 0.05
until = functools.partial(waiting.until, interval_s=POLL_S)
stays = functools.partial(waiting.stays, interval_s=POLL_S)

# The fixed names (CONTRACT-10, "Names").
TOPUPS_EXCHANGE = "hiwallet.topups"
DEAD_LETTER_EXCHANGE = "hiwallet.dead-letters"
PARTITIONS = tuple(f"hiwallet.topups.p{i}" for i in range(4))
DEAD_LETTER_QUEUE = "hiwallet.topups.dead"

# The dev defaults both sides share (CONTRACT-10, "Settings"): the fakes sign with them and
# topup-webhook accepts them, so a test that posts a notification itself signs with these.
STRIPE_SECRET = "whsec_dev_stripe_fake_0123456789abcdef"
BANK_SECRET = "whsec_ZGV2LWJhbmstZmFrZS1zZWNyZXQtMDEyMzQ1Njc4OQ=="
STRIPE_API_KEY = "sk_test_hiwallet_dev"
ROTATED_STRIPE_SECRET = "whsec_e2e_rotated_secret_0123456789abcdef"
# A wire's sender, as the tests send it: personal data no log line may hold.
SENDER_NAME = "Ayşe Yılmaz"
SENDER_IBAN = "TR330006100519786457841326"
BANK_API_KEY = "bank_dev_key"


# ---------------------------------------------------------------------------------------------
# RabbitMQ: a virtual host per module, and the topology's objects removed between tests
# ---------------------------------------------------------------------------------------------


async def rabbitmqctl(*args: str, node: str | None = None) -> None:
    """``rabbitmqctl`` on the machine's node, or on ``node`` (the fault campaign's own)."""
    named = ("-n", node) if node else ()
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", *named, "-q", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), RABBITMQCTL_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {proc.returncode} {out.decode()[-500:]}")


async def add_vhost(name: str, node: str | None = None) -> None:
    await rabbitmqctl("add_vhost", name, node=node)
    await rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*", node=node)


async def delete_vhost(name: str, node: str | None = None) -> None:
    await rabbitmqctl("delete_vhost", name, node=node)


def amqp_url(vhost: str, port: int = AMQP_PORT) -> str:
    return f"amqp://guest:guest@{AMQP_HOST}:{port}/{quote(vhost, safe='')}"


async def clear_topology(vhost: str) -> None:
    """Delete the top-up topology's queues and exchanges in ``vhost`` (what a previous test left:
    messages, a consumer's state); each service declares them again when it starts."""
    connection = await aio_pika.connect(amqp_url(vhost), timeout=10)
    try:
        for queue in (*PARTITIONS, DEAD_LETTER_QUEUE):
            channel = await connection.channel()
            await channel.queue_delete(queue)
            await channel.close()
        for exchange in (TOPUPS_EXCHANGE, DEAD_LETTER_EXCHANGE):
            channel = await connection.channel()
            await channel.exchange_delete(exchange)
            await channel.close()
    finally:
        await connection.close()


async def queue_depths(
    vhost: str, queues: tuple[str, ...] = (*PARTITIONS, DEAD_LETTER_QUEUE)
) -> dict[str, int]:
    """Messages ready in each queue (a passive declare; a missing queue counts -1)."""
    depths: dict[str, int] = {}
    connection = await aio_pika.connect(amqp_url(vhost), timeout=10)
    try:
        for name in queues:
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(name, passive=True)
                depths[name] = int(queue.declaration_result.message_count or 0)
                await channel.close()
            except aio_pika.exceptions.ChannelClosed:
                depths[name] = -1
    finally:
        await connection.close()
    return depths


async def dead_letters(vhost: str, limit: int = 100) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """The dead letters, read without consuming them (each rejected back to the queue)."""
    connection = await aio_pika.connect(amqp_url(vhost), timeout=10)
    found: list[aio_pika.abc.AbstractIncomingMessage] = []
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(DEAD_LETTER_QUEUE, passive=True)
        for _ in range(limit):
            message = await queue.get(no_ack=False, fail=False, timeout=5)
            if message is None:
                break
            found.append(message)
        # Closing the channel returns every unacknowledged one to the queue.
        await channel.close()
    finally:
        await connection.close()
    return found


class StallingProxy(FaultProxy):
    """A :class:`FaultProxy` that can also hold what its clients send (``stall_upstream``) while
    still passing what the server sends them: a consumer then receives a delivery and acts on
    it, but its ack never reaches the broker."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        super().__init__(upstream_host, upstream_port)
        self.upstream_stalled = asyncio.Event()
        self.upstream_stalled.set()  # set = flowing

    @contextlib.contextmanager
    def stall_upstream(self) -> Any:
        self.upstream_stalled.clear()
        try:
            yield
        finally:
            self.upstream_stalled.set()

    async def _before_passing(self, *, upstream: bool) -> None:
        if upstream:
            await self.upstream_stalled.wait()


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of ``pid`` in MB, from /proc (0 when gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0, 0.0
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


@dataclass
class Process:
    """One deployable, ``hiwallet run <name> --port N`` with ``env``; restartable."""

    name: str
    port: int
    env: dict[str, str]
    log_dir: Path
    args: tuple[str, ...] = ()
    # The fakes answer /health only (they have nothing to be ready for).
    ready_path: str = "/ready"
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    peak_rss_mb: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.proc.pid

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.name} is running already")
        self.starts += 1
        with self.log_path.open("ab") as sink:
            sink.write(f"--- start {self.starts} ---\n".encode())
            sink.flush()
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hiwallet.cli",
                    "run",
                    self.name,
                    "--port",
                    str(self.port),
                    *self.args,
                ],
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def ready(self) -> bool:
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                return (await http.get(f"{self.url}{self.ready_path}")).status_code == 200
        except httpx.HTTPError:
            return False

    async def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        async def check() -> bool:
            if not self.alive():
                raise AssertionError(
                    f"{self.name} exited ({self.proc and self.proc.returncode}):\n{self.tail()}"
                )
            return await self.ready()

        try:
            await until(check, timeout_s, f"{self.name} ready on :{self.port}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None

    def sample_rss(self) -> float:
        if self.proc is not None:
            self.peak_rss_mb = max(self.peak_rss_mb, rss_mb(self.proc.pid)[1])
        return self.peak_rss_mb

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process group (a SIGKILL: no clean-up of any kind runs)."""
        if self.proc is None:
            return
        self.sample_rss()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def wait_exit(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        if self.proc is None:
            return None
        proc = self.proc
        await until(lambda: proc.poll() is not None, timeout_s, f"{self.name} exited")
        return proc.returncode

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after the bound."""
        if not self.alive():
            return
        self.kill(signal.SIGTERM)
        try:
            await self.wait_exit()
        except AssertionError:
            self.kill(signal.SIGKILL)
            await self.wait_exit()

    async def crash(self) -> None:
        """kill -9, and wait until it is gone."""
        self.kill(signal.SIGKILL)
        await self.wait_exit()

    async def restart(self) -> None:
        await self.stop()
        self.start()
        await self.wait_ready()

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return f"--- {self.log_path} (last {lines} lines) ---\n" + "\n".join(text[-lines:])

    def log_holds(self, *needles: str) -> list[str]:
        """The lines of this process's output that hold any of ``needles`` (also as JSON
        escapes them)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        forms = {form for needle in needles for form in (needle, json.dumps(needle)[1:-1])}
        return [line[:300] for line in text.splitlines() if any(form in line for form in forms)]

    async def metrics(self) -> dict[str, float]:
        """The process's /metrics as {sample name with labels: value}."""
        async with httpx.AsyncClient(timeout=5) as http:
            text = (await http.get(f"{self.url}/metrics")).text
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    samples[name] = float(value)
        return samples


# ---------------------------------------------------------------------------------------------
# Signing, as the providers do (for tests that post a notification themselves)
# ---------------------------------------------------------------------------------------------


def stripe_signature(body: bytes, secret: str = STRIPE_SECRET, at: int | None = None) -> str:
    t = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def standard_webhook_headers(
    body: bytes, secret: str = BANK_SECRET, msg_id: str | None = None, at: int | None = None
) -> dict[str, str]:
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    t = int(time.time()) if at is None else at
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{t}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(t),
        "webhook-signature": f"v1,{base64.b64encode(digest).decode()}",
    }


# ---------------------------------------------------------------------------------------------
# The fakes, from the test's side
# ---------------------------------------------------------------------------------------------


@dataclass
class Fake:
    """stripe-fake or bank-fake: pay, steer the next notifications, read what it delivered."""

    process: Process
    api_key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        async with httpx.AsyncClient(base_url=self.process.url, timeout=10) as http:
            response = await http.request(method, path, headers=self.auth, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    async def faults(self, **faults: Any) -> None:
        """``duplicate`` n, ``delay_s``, ``drop``, ``reorder``, ``once`` (CONTRACT-10)."""
        await self._call("POST", "/_control/faults", json=faults)

    async def deliveries(self) -> list[dict[str, Any]]:
        answer = await self._call("GET", "/_control/deliveries")
        return list(answer["data"] if isinstance(answer, dict) else answer)

    async def redeliver(self, event_id: str) -> None:
        await self._call("POST", f"/_control/redeliver/{event_id}")


class StripeFake(Fake):
    async def pay(self, wallet: str | None, amount: int, currency: str = "try") -> dict[str, Any]:
        form = {"amount": str(amount), "currency": currency}
        if wallet is not None:
            form["wallet"] = wallet
        answer: dict[str, Any] = await self._call("POST", "/v1/topups", data=form)
        return answer


class BankFake(Fake):
    async def wire(self, reference: str, amount: int, currency: str = "TRY", **extra: Any) -> dict[str, Any]:
        body = {
            "sender_name": SENDER_NAME,
            "sender_iban": SENDER_IBAN,
            "reference": reference,
            "amount_minor": amount,
            "currency": currency,
            **extra,
        }
        answer: dict[str, Any] = await self._call("POST", "/v1/topups", json=body)
        return answer


# ---------------------------------------------------------------------------------------------
# Children of a test, stopped whatever happens
# ---------------------------------------------------------------------------------------------


@dataclass
class Children:
    processes: list[Process] = field(default_factory=list)
    proxies: list[FaultProxy] = field(default_factory=list)

    async def close(self) -> None:
        for process in self.processes:
            process.kill(signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(AssertionError):
                await process.wait_exit()
        for proxy in self.proxies:
            await proxy.close()


def env_of(base: Mapping[str, str], **values: Any) -> dict[str, str]:
    """``base`` plus ``values`` as strings (lists as JSON, as pydantic-settings reads them)."""
    env = dict(base)
    for name, value in values.items():
        if value is None:
            env.pop(name, None)
        elif isinstance(value, list | dict):
            env[name] = json.dumps(value)
        else:
            env[name] = str(value)
    return env


async def post_stripe_event(url: str, event: dict[str, Any], secret: str = STRIPE_SECRET) -> int:
    """Deliver ``event`` to topup-webhook at ``url`` as Stripe does (signed now); the status."""
    body = json.dumps(event).encode()
    headers = {"Content-Type": "application/json", "Stripe-Signature": stripe_signature(body, secret)}
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{url}/v1/webhooks/topup/stripe", content=body, headers=headers)
    return response.status_code
