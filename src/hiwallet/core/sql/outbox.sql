-- The outbox's statements (core/outbox.py). {table} is the outbox's (schema-qualified) name,
-- checked to be a plain identifier before it is put in.

-- name: enqueue
-- Text cast to jsonb: whatever jsonb codec the caller's connection has (the ledger's is orjson
-- on objects), a JSON text goes in as the document it is.
INSERT INTO {table} (message_id, exchange, routing_key, message_type, headers, body)
VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::text::jsonb)

-- name: enqueue_many
-- Many messages in one statement, as enqueue writes each: ids (and so the relay's order)
-- follow the arrays' order.
INSERT INTO {table} (message_id, exchange, routing_key, message_type, headers, body)
SELECT m.message_id, m.exchange, m.routing_key, m.message_type, m.headers::jsonb, m.body::jsonb
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
       WITH ORDINALITY AS m (message_id, exchange, routing_key, message_type, headers, body, ord)
 ORDER BY m.ord

-- name: claim
-- The due rows in id order (insertion order; two transactions may commit out of it, and the
-- later-committed smaller id is then simply taken by the next pass: only rows of one key
-- written one after the other keep their order on the broker), locked until this transaction
-- ends. SKIP LOCKED although only one relay holds the advisory lock:
-- the lock is what keeps a single publisher (and so the order); SKIP LOCKED is what keeps the
-- claim safe and non-blocking without relying on it. Anything else that locks an unsent row (a
-- second claimer with a wrong lock key, an operator's UPDATE in an open psql session) makes the
-- relay skip that row for this pass instead of waiting on it until lock_timeout, or publishing
-- the same rows as the other claimer at the same time. A skipped row is not lost: the next pass
-- takes it.
SELECT id, message_id, exchange, routing_key, message_type, headers::text AS headers, body::text AS body
  FROM {table}
 WHERE sent_at IS NULL
 ORDER BY id
 LIMIT $1
   FOR UPDATE SKIP LOCKED

-- name: mark_sent
UPDATE {table} SET sent_at = now() WHERE id = ANY($1::bigint[])

-- name: lag
-- Unsent rows and the age of the oldest (the partial index outbox_unsent holds only them).
SELECT count(*) AS unsent,
       coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 AS oldest_age_s
  FROM {table}
 WHERE sent_at IS NULL

-- name: purge_sent
-- One bounded batch of rows sent longer ago than $1 seconds: a short transaction and lock set
-- each, however much has piled up.
DELETE FROM {table}
 WHERE id IN (SELECT id FROM {table}
               WHERE sent_at IS NOT NULL AND sent_at < now() - make_interval(secs => $1)
               ORDER BY id
               LIMIT $2)

-- name: notify
-- The hint a writer sends after its commit (RelayHint), in a transaction of its own: a NOTIFY
-- takes the server's one notify-queue lock at commit, so it is sent by nobody's write
-- transaction and at most one at a time per process.
SELECT pg_notify($1, '')
