-- The outbox's statements (core/outbox.py). {table} is the outbox's (schema-qualified) name,
-- checked to be a plain identifier before it is put in.

-- name: enqueue
-- Text cast to jsonb: whatever jsonb codec the caller's connection has (the ledger's is orjson
-- on objects), a JSON text goes in as the document it is.
INSERT INTO {table} (message_id, exchange, routing_key, message_type, headers, body)
VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::text::jsonb)

-- name: claim
-- The due rows, oldest first (the order they were committed in, as far as ids tell), locked
-- until this transaction ends. SKIP LOCKED although one relay holds the advisory lock: if a
-- relay that lost its lock (its connection died mid-batch) still had a transaction open on
-- the server for a moment, the new leader skips those rows instead of waiting on them (or
-- failing on lock_timeout); they are not lost, only published by the next pass.
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
