"""What the background parts of every service rely on: a connection of their own (core.db), as
the role, for the relays' and jobs' session locks."""

from __future__ import annotations

from hiwallet.core import db


async def test_a_dedicated_connection_is_the_role_with_the_pools_timeouts(wallet_db: str) -> None:
    connect = db.dedicated_connection(wallet_db, db.app_role("wallet"))
    conn = await connect()
    try:
        assert await conn.fetchval("SELECT current_user") == db.app_role("wallet")
        assert await conn.fetchval("SHOW lock_timeout") != "0"
    finally:
        await conn.close()
