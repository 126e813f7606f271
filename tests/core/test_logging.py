"""core.logging and the edge: JSON lines, the request id, the access line, the log of a 5xx
(with the SQLSTATE and constraint of a real PostgreSQL error), and what never reaches a log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
import structlog
from fastapi import APIRouter, FastAPI, Request, Response
from pydantic import BaseModel

from hiwallet.core import db
from hiwallet.core.http import (
    FastJSONResponse,
    LeanRoute,
    ServiceUnavailable,
    create_app,
    json_body,
    json_body_openapi,
)
from hiwallet.core.logging import _render, configure_logging, error_fields
from hiwallet.core.settings import get_settings
from tests import logscan

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzb21lb25lIn0.c2lnbmF0dXJlLXNlY3JldA"
SECRET_LOCAL = "hunter2-in-a-local"


class Item(BaseModel):
    name: str
    password: str


async def duplicate_key() -> None:
    """A real unique violation from PostgreSQL (a temporary table: nothing is left behind)."""
    conn = await asyncpg.connect(db.dsn_for("postgres", get_settings()))
    try:
        await conn.execute("CREATE TEMP TABLE t (id int CONSTRAINT t_id_unique UNIQUE)")
        await conn.execute("INSERT INTO t VALUES (1)")
        await conn.execute("INSERT INTO t VALUES (1)")
    finally:
        await conn.close()


class LedgerBroken(Exception):
    """As the ledger's internal errors: SQLSTATE and constraint as fields, the driver's error as
    the cause."""

    def __init__(self, sqlstate: str | None = None, constraint: str | None = None) -> None:
        super().__init__("the ledger refused a write")
        self.sqlstate = sqlstate
        self.constraint = constraint


def build(access_log: bool | None = True) -> FastAPI:
    app = create_app("log-test", max_body_bytes=1_000, access_log=access_log)
    lean = APIRouter(route_class=LeanRoute)

    @lean.post("/hot", openapi_extra=json_body_openapi(Item))
    async def hot(request: Request) -> Response:
        body = await json_body(request, Item)
        if body.name == "boom":
            raise RuntimeError("hot lane broke")
        return FastJSONResponse({"name": body.name}, status_code=201)

    app = create_app("log-test", max_body_bytes=1_000, access_log=access_log, hot_routes=lean.routes)
    app.include_router(lean)

    @app.post("/items/{item_id}")
    async def item(item_id: int, body: Item) -> dict[str, Any]:
        return {"id": item_id}

    @app.get("/db")
    async def database_error() -> None:
        secret_local = SECRET_LOCAL  # a local that must never reach a log
        try:
            await duplicate_key()
        except asyncpg.PostgresError as exc:
            raise LedgerBroken() from exc
        raise AssertionError(secret_local)

    @app.get("/ledger")
    async def ledger_error() -> None:
        raise LedgerBroken("HW011", "check_balanced")

    @app.get("/unavailable")
    async def unavailable() -> None:
        try:
            raise ConnectionResetError("the server went away")
        except ConnectionResetError as exc:
            raise ServiceUnavailable("retry with the same Idempotency-Key") from exc

    return app


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # raise_app_exceptions on: an error escaping the app (for the server to log a second
    # time) fails the test.
    transport = httpx.ASGITransport(app=build())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


def logged(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    err = capsys.readouterr().err
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def access_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == "request"]


HEX32 = r"^[0-9a-f]{32}$"


async def test_request_id_is_echoed_or_made_on_every_answer(client: httpx.AsyncClient) -> None:
    sent = await client.get("/health", headers={"X-Request-Id": "req-42.A_b"})
    assert sent.headers["x-request-id"] == "req-42.A_b"
    made = await client.get("/health")
    made_again = await client.get("/health")
    assert made.headers["x-request-id"] != made_again.headers["x-request-id"]
    for insane in (b"x" * 129, b"has space", b"tab\there", "é".encode(), b"nul\x00"):
        r = await client.get("/health", headers={"X-Request-Id": insane})
        assert r.headers["x-request-id"].encode() != insane
        assert len(r.headers["x-request-id"]) == 32
    # problem answers, the edge's 413, the hot lane, an unknown route, a 500
    answers = [
        await client.post("/items/1", json={"name": 1}),
        await client.post("/items/1", content=b"x" * 5_000, headers={"content-type": "application/json"}),
        await client.post("/hot", json={"name": "a", "password": "p"}),
        await client.post("/hot", json={"name": "boom", "password": "p"}),
        await client.get("/nowhere"),
        await client.get("/db"),
    ]
    assert [r.status_code for r in answers] == [422, 413, 201, 500, 404, 500]
    for r in answers:
        assert len(r.headers["x-request-id"]) == 32, r


async def test_one_access_line_per_request_with_the_route_template(
    client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    await client.post(
        "/items/12345",
        json={"name": "Ayşe Yılmaz", "password": "pw-in-a-body"},
        headers={"Authorization": f"Bearer {TOKEN}", "X-Request-Id": "abc", "Cookie": "s=cookie-v"},
    )
    await client.post(
        "/hot",
        json={"name": "n", "password": "pw-in-a-hot-body"},
        headers={"Authorization": f"Bearer {TOKEN}", "X-Request-Id": "def"},
    )
    lines = logged(capsys)
    first, second = access_lines(lines)
    assert first == {
        "timestamp": first["timestamp"],
        "level": "info",
        "service": "log-test",
        "event": "request",
        "method": "POST",
        "route": "/items/{item_id}",
        "status": 200,
        "duration_ms": first["duration_ms"],
        "request_id": "abc",
    }
    assert first["timestamp"].endswith("Z") and first["duration_ms"] >= 0
    assert (second["route"], second["status"], second["request_id"]) == ("/hot", 201, "def")
    text = json.dumps(lines, ensure_ascii=False)
    for secret in ("12345", "Ayşe", "pw-in-a-body", "pw-in-a-hot-body", TOKEN, "cookie-v", "Bearer"):
        assert secret not in text


async def test_the_access_log_can_be_switched_off(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIWALLET_ACCESS_LOG", "false")
    get_settings.cache_clear()
    try:
        app = build(access_log=None)  # from the setting
    finally:
        monkeypatch.delenv("HIWALLET_ACCESS_LOG")
        get_settings.cache_clear()
    capsys.readouterr()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        assert (await c.get("/health")).status_code == 200
        assert (await c.post("/hot", json={"name": "n", "password": "p"})).status_code == 201
    assert access_lines(logged(capsys)) == []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build()), base_url="http://test") as c:
        await c.get("/health")
    assert len(access_lines(logged(capsys))) == 1  # and on by default


def failures(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == "request failed"]


async def test_a_500_names_its_incident_and_logs_sqlstate_and_constraint_once_without_locals(
    client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    r = await client.get("/db")
    assert r.status_code == 500
    body = r.json()
    assert body == {
        "type": "https://hiwallet.dev/problems/internal-error",
        "title": "Internal server error",
        "status": 500,
        "instance": "/db",
        "incident": r.headers["x-request-id"],
    }
    assert "retry" not in r.text.lower()
    lines = logged(capsys)
    [failure] = failures(lines)
    assert failure["level"] == "error"
    assert failure["request_id"] == body["incident"]
    assert (failure["route"], failure["status"], failure["method"]) == ("/db", 500, "GET")
    assert failure["error"] == f"{__name__}.LedgerBroken"
    assert (failure["sqlstate"], failure["constraint"]) == ("23505", "t_id_unique")
    chain = failure["exception"]
    assert [c["type"] for c in chain] == [
        f"{__name__}.LedgerBroken",
        "asyncpg.exceptions.UniqueViolationError",
    ]
    assert chain[1]["message"] == "sqlstate 23505, constraint t_id_unique"  # not the row's values
    assert any(f["function"] == "database_error" for f in chain[0]["frames"])
    text = json.dumps(lines)
    assert SECRET_LOCAL not in text and "locals" not in text
    # exactly one traceback, and the access line of the same request
    assert sum("exception" in line for line in lines) == 1
    [access] = access_lines(lines)
    assert (access["status"], access["request_id"]) == (500, body["incident"])


async def test_5xx_answers_are_logged_at_error_with_the_fields_of_the_error(
    client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert (await client.get("/ledger")).status_code == 500
    assert (await client.get("/unavailable")).status_code == 503
    assert (await client.post("/hot", json={"name": "boom", "password": "p"})).status_code == 500
    ledger, unavailable, hot = failures(logged(capsys))
    assert (ledger["sqlstate"], ledger["constraint"], ledger["status"]) == ("HW011", "check_balanced", 500)
    assert unavailable["level"] == "error" and unavailable["status"] == 503
    assert unavailable["error"] == "hiwallet.core.http.problems.ServiceUnavailable"
    assert "exception" not in unavailable  # an answer of ours: no traceback
    assert (hot["route"], hot["error"]) == ("/hot", "builtins.RuntimeError")
    assert hot["exception"][0]["message"] == "hot lane broke"


async def test_lines_logged_during_a_request_carry_its_id(capsys: pytest.CaptureFixture[str]) -> None:
    app = create_app("log-test")
    log = structlog.get_logger("test")

    @app.get("/work")
    async def work() -> dict[str, str]:
        log.info("working", step=1)
        return {}

    capsys.readouterr()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        await c.get("/work", headers={"X-Request-Id": "carried"})
    log.info("after")
    lines = {line["event"]: line for line in logged(capsys)}
    assert lines["working"]["request_id"] == "carried" and lines["working"]["step"] == 1
    assert "request_id" not in lines["after"]


def test_stdlib_logging_is_the_same_json(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    capsys.readouterr()
    logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
    [line] = [line for line in logged(capsys) if line.get("logger") == "uvicorn.error"]
    assert line["level"] == "warning" and line["service"] == "tests"
    assert line["event"] == "Invalid HTTP request received." and line["timestamp"].endswith("Z")


def test_a_process_that_configured_nothing_logs_json_without_locals() -> None:
    code = (
        "import structlog, hiwallet.core.logging\n"
        "def f():\n"
        "    secret_local = 'hunter2'\n"
        "    raise ValueError('x')\n"
        "try:\n"
        "    f()\n"
        "except ValueError:\n"
        "    structlog.get_logger().exception('failed')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    [line] = [json.loads(x) for x in run.stderr.splitlines()]
    assert line["exception"][0]["type"] == "builtins.ValueError"
    assert "hunter2" not in run.stderr + run.stdout


async def test_error_fields_carry_sqlstate_and_constraint_never_the_message() -> None:
    """The fields a log line holds of an error (core.logging.error_fields): a database error's
    type, SQLSTATE and constraint, found through a wrapper too; never PostgreSQL's text, whose
    DETAIL quotes the row ("Key (id)=(1) already exists")."""
    with pytest.raises(asyncpg.UniqueViolationError) as caught:
        await duplicate_key()
    assert "(id)=(1)" in str(caught.value)  # what a repr()/str() field would have logged
    fields = error_fields(caught.value)
    assert fields == {"error": "UniqueViolationError", "sqlstate": "23505", "constraint": "t_id_unique"}
    try:
        raise RuntimeError("wrapped: Key (id)=(1)") from caught.value
    except RuntimeError as wrapper:
        assert error_fields(wrapper) == {**fields, "error": "RuntimeError"}
    assert error_fields(ValueError("ayse@example.com")) == {"error": "ValueError"}
    line = _render({"event": "failed", **error_fields(caught.value)}).decode()
    assert "(id)=(1)" not in line and "duplicate key" not in line


@pytest.fixture
def planted() -> Iterator[list[str]]:
    lines = [
        _render({"event": "login", "password": "hiwallet-demo"}).decode().strip(),
        _render({"event": "auth", "authorization": f"Bearer {TOKEN}"}).decode().strip(),
        _render({"event": "jwt", "token": TOKEN}).decode().strip(),
        _render({"event": "user", "email": "demo@hiwallet.dev"}).decode().strip(),
        _render({"event": "client", "secret": "dev-onboarding-secret"}).decode().strip(),
    ]
    yield lines


def test_the_run_scan_catches_a_planted_secret(planted: list[str]) -> None:
    """The control of the scan that ends every test run (tests/conftest.py)."""
    clean = _render({"event": "request", "service": "wallet-api", "route": "/v1/transfers"}).decode().strip()
    assert logscan.find_secrets(clean) == []
    found = logscan.find_secrets("\n".join([clean, *planted]))
    assert {line for _, line in found} == set(planted)
    assert {kind for kind, _ in found} == {"password", "bearer", "token", "e-mail", "client secret"}
    assert logscan.access_services(clean) == {"wallet-api"}


def test_the_run_log_file_receives_lines_of_this_process() -> None:
    """The session's file (HIWALLET_LOG_FILE) is where this process's lines go too."""
    path = get_settings().log_file
    assert path is not None and str(path) == os.environ["HIWALLET_LOG_FILE"]
    structlog.get_logger("test").info("marker line", marker="f00d")
    assert '"marker":"f00d"' in path.read_text()
    configure_logging("tests")  # idempotent: same file, nothing lost
    assert '"marker":"f00d"' in path.read_text()
