-- The consumer's statements (core/consumer.py). {table} is processed_events' (schema-qualified)
-- name, checked to be a plain identifier before it is put in.

-- name: claim_event
-- First of the message's transaction. A concurrent insert of the same message (a redelivery
-- to another consumer while the first still holds it) waits for the first to commit or roll
-- back: then it is a repeat (no row) or new (this one), never both handled.
INSERT INTO {table} (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING true

-- name: store_outcome
UPDATE {table} SET outcome = $3::text::jsonb WHERE consumer = $1 AND message_id = $2

-- name: probe
SELECT 1

-- name: claim_events
-- First of a batch's transaction: one statement claims every message of the batch and returns
-- the ids that are new (the others are repeats: processed before). A message twice in one
-- batch is claimed once (DO NOTHING skips the second row of the same statement). As for
-- claim_event, a concurrent claim of one of these ids waits for this transaction.
INSERT INTO {table} (consumer, message_id)
SELECT $1, m FROM unnest($2::text[]) AS m
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING message_id

-- name: store_outcomes
UPDATE {table} AS t
   SET outcome = o.outcome::jsonb
  FROM unnest($2::text[], $3::text[]) AS o (message_id, outcome)
 WHERE t.consumer = $1 AND t.message_id = o.message_id
