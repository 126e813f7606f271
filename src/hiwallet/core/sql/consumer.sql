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
-- Each claimed row found by a probe of the primary key (LATERAL, OFFSET 0), then updated where
-- the probe found it (its ctid; the rows are this transaction's own, nobody else's to move).
-- The plain join with the list got a generic plan, made while the table was young and without
-- statistics, that read every row of the consumer for every batch: slower with every message.
WITH claimed AS (
    SELECT p.ctid AS row_id, o.outcome
      FROM unnest($2::text[], $3::text[]) AS o (message_id, outcome)
     CROSS JOIN LATERAL (SELECT ctid FROM {table}
                          WHERE consumer = $1 AND message_id = o.message_id OFFSET 0) AS p
)
UPDATE {table} AS t
   SET outcome = claimed.outcome::jsonb
  FROM claimed
 WHERE t.ctid = claimed.row_id
