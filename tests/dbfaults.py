"""Real database failures on demand, for the tests of how errors are classified.

A trigger on ``ledger.transactions`` fails any posting whose reference is ``fault:<SQLSTATE>``
with that SQLSTATE, raised by PostgreSQL itself (an invariant trigger's HW011, an unknown HW099,
a data error, a deadlock's 40P01 ...); ``fault-once:<SQLSTATE>`` fails once only, the first
time after :func:`rearm` (a sequence counts: it survives the rollback), so that a retry succeeds;
every ``fault:<SQLSTATE>`` firing is counted the same way (:func:`fired`: how many attempts met
it); ``fault:terminate`` kills the posting's own backend, as a server restart does. Installed as the
owner, in a test's own database only.
"""

from __future__ import annotations

import asyncpg

from hiwallet.core import db

_INSTALL = """
CREATE SEQUENCE public.test_fault_once;
CREATE SEQUENCE public.test_fault_fired;
CREATE FUNCTION public.test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ref = 'fault:terminate' THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
        PERFORM pg_sleep(5);  -- the termination strikes here
    ELSIF NEW.ref LIKE 'fault-once:%' THEN
        IF nextval('public.test_fault_once') = 1 THEN
            RAISE EXCEPTION 'injected failure %', NEW.ref USING ERRCODE = substr(NEW.ref, 12);
        END IF;
    ELSIF NEW.ref LIKE 'fault:%' THEN
        PERFORM nextval('public.test_fault_fired');
        RAISE EXCEPTION 'injected failure %', NEW.ref USING ERRCODE = substr(NEW.ref, 7),
            CONSTRAINT = 'test_fault';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_fault BEFORE INSERT ON ledger.transactions
    FOR EACH ROW EXECUTE FUNCTION public.test_fault();
"""


async def install(database: str) -> None:
    conn = await asyncpg.connect(db.dsn_for(database))
    try:
        await conn.execute(_INSTALL)
    finally:
        await conn.close()


async def rearm(database: str) -> None:
    """The next ``fault-once:`` posting fails again (once)."""
    conn = await asyncpg.connect(db.dsn_for(database))
    try:
        await conn.execute("SELECT setval('public.test_fault_once', 1, false)")
    finally:
        await conn.close()


async def fired_once(database: str) -> bool:
    """Whether the ``fault-once:`` failure fired since it was armed (and then let one pass)."""
    conn = await asyncpg.connect(db.dsn_for(database))
    try:
        return bool(await conn.fetchval("SELECT last_value >= 2 FROM public.test_fault_once"))
    finally:
        await conn.close()


async def fired(database: str) -> int:
    """How many times a ``fault:<SQLSTATE>`` failure fired since :func:`install`."""
    conn = await asyncpg.connect(db.dsn_for(database))
    try:
        row = await conn.fetchrow("SELECT last_value, is_called FROM public.test_fault_fired")
        return int(row["last_value"]) if row["is_called"] else 0
    finally:
        await conn.close()
