"""The bare shape topup-webhook is measured against (bench/topup_bench.py): one FastAPI endpoint
on one uvicorn process (uvloop, httptools, as the services run) that only checks an HMAC-SHA256
over the raw body in constant time (Stripe's scheme: ``t=…,v1=…`` over ``t.body``) and inserts
a row (one autocommit INSERT through an asyncpg pool). No JSON parsing, no logging, no broker.

    python bench/bare_webhook.py PORT DSN SECRET
"""

from __future__ import annotations

import hashlib
import hmac
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import uvicorn
from fastapi import FastAPI, Request, Response

TABLE_SQL = """
CREATE TABLE IF NOT EXISTS bare_inbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider text NOT NULL,
    signature text NOT NULL,
    body bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
)
"""
INSERT_SQL = "INSERT INTO bare_inbox (provider, signature, body) VALUES ($1, $2, $3)"
POOL_MAX = 16


def create_app(dsn: str, secret: bytes) -> FastAPI:
    pool: asyncpg.Pool | None = None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        nonlocal pool
        pool = await asyncpg.create_pool(dsn, min_size=POOL_MAX, max_size=POOL_MAX)
        await pool.execute(TABLE_SQL)
        yield
        await pool.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/bare/{provider}")
    async def receive(provider: str, request: Request) -> Response:
        body = await request.body()
        header = request.headers.get("stripe-signature", "")
        parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
        expected = hmac.new(secret, parts.get("t", "").encode() + b"." + body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, parts.get("v1", "")):
            return Response(status_code=400)
        assert pool is not None
        await pool.execute(INSERT_SQL, provider, header, body)
        return Response(status_code=202)

    @app.get("/ready")
    async def ready() -> Response:
        return Response(status_code=200)

    return app


if __name__ == "__main__":
    port, dsn, secret = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
    uvicorn.run(
        create_app(dsn, secret),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )
