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
