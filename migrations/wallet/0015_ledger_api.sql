-- The ledger's SQL interface: what a service's own SQL may name of the ledger, as
-- hiwallet.ledger.__all__ is what its Python may import (docs/ledger.md, "The SQL interface").
-- Every other object of the ledger schema is the ledger's business; its own code
-- (src/hiwallet/ledger/) and its own migrations name them, nobody else's SQL does
-- (tests/test_ledger_boundary.py). A service reads through a view here in the same statement as
-- its own tables, and posts through a function here in its own transaction: no round trip more
-- than naming the tables did.
--
-- The views are plain (not security_barrier, no function in them): the planner inlines them,
-- so a read through one is planned as the read of the table it was (the same index probes).
-- They run with their owner's privileges; grants.sql says who may read them.
CREATE SCHEMA ledger_api;

-- An account as a service decides on it: that it exists, and its currency (wallet-consumer's
-- top-ups check a wallet's cash account before posting; the ledger checks again when it posts).
CREATE VIEW ledger_api.accounts AS
SELECT a.bucket, a.id, a.currency
  FROM ledger.accounts a;

-- A transaction by its id (its home bucket and key, hiwallet.ledger.rules.transaction_id): what
-- it was and when (wallet-consumer's "was this payment credited already?"). The type as text:
-- the enum is the ledger's.
CREATE VIEW ledger_api.transactions AS
SELECT t.bucket, t.id, t.type::text AS type, t.ref, t.metadata, t.posted_at
  FROM ledger.transactions t;

-- The batched posting path (ledger.post_batch, migration 0008): the postings built by
-- Ledger.batch_arguments, an answer for each (Ledger.answer), a refusal leaving nothing and not
-- stopping the others; in the caller's transaction. PL/pgSQL, so that its call of
-- ledger.post_batch is a plan cached for the session: a SQL function that cannot be inlined
-- (grants.sql makes it SECURITY DEFINER, as every function a service may call that writes) is
-- planned again in every statement that calls it.
CREATE FUNCTION ledger_api.post_batch(p_postings ledger.posting_in[]) RETURNS jsonb[]
LANGUAGE plpgsql AS $$
BEGIN
    RETURN ledger.post_batch(p_postings);
END $$;
