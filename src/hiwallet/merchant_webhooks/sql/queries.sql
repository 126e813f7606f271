-- merchant-webhooks' statements (migrations/wallet/0016, docs/webhooks.md). Times are the
-- dispatcher's clock ($-parameters), never the server's: a test moves the clock through the
-- three-day schedule.

-- name: fan_out
-- The undispatched events, oldest first: one delivery for each endpoint of the event's business
-- that is enabled and subscribed (endpoint.disabled: every other enabled endpoint), and the
-- events marked dispatched, in one statement. One fan-out at a time across instances (the
-- transaction's advisory lock, $3; another instance skips the round), so deliveries are made
-- in the events' order.
WITH locked AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock($3) AS got
), ev AS MATERIALIZED (
    SELECT e.bucket, e.id, e.seq, e.type, e.resource_id, e.account_id
      FROM wallet.webhook_events e, locked
     WHERE locked.got AND e.dispatched_at IS NULL
     ORDER BY e.seq
     LIMIT $1
), made AS (
    INSERT INTO wallet.webhook_deliveries
        (bucket, id, endpoint_id, event_id, event_seq, event_type, resource_id, next_attempt_at,
         created_at, updated_at)
    SELECT ev.bucket, lpad(ev.bucket::text, 4, '0') || ':wd:' || gen_random_uuid(), p.id, ev.id,
           ev.seq, ev.type, ev.resource_id, $2, $2, $2
      FROM ev
      JOIN wallet.webhook_endpoints p ON p.bucket = ev.bucket AND p.account_id = ev.account_id
     WHERE p.enabled AND (ev.type = ANY (p.event_types) OR ev.type = 'endpoint.disabled')
     ORDER BY ev.seq
    ON CONFLICT ON CONSTRAINT webhook_deliveries_once DO NOTHING
    RETURNING 1
)
UPDATE wallet.webhook_events e
   SET dispatched_at = $2
  FROM ev
 WHERE e.bucket = ev.bucket AND e.id = ev.id
RETURNING (SELECT count(*) FROM made) AS deliveries

-- name: claim
-- Due deliveries of enabled endpoints whose earlier deliveries of the same resource (to the
-- same endpoint) are all done: claimed until the lease's end ($3), when another round (or
-- instance) may take them again if this one died before recording the attempt.
WITH due AS (
    SELECT d.bucket, d.id
      FROM wallet.webhook_deliveries d
      JOIN wallet.webhook_endpoints p ON p.bucket = d.bucket AND p.id = d.endpoint_id
     WHERE d.status = 'pending' AND d.next_attempt_at <= $1 AND p.enabled
       AND NOT EXISTS (SELECT 1 FROM wallet.webhook_deliveries o
                        WHERE o.bucket = d.bucket AND o.endpoint_id = d.endpoint_id
                          AND o.resource_id = d.resource_id AND o.status = 'pending'
                          AND o.event_seq < d.event_seq)
     ORDER BY d.next_attempt_at
     LIMIT $2
       FOR UPDATE OF d SKIP LOCKED
)
UPDATE wallet.webhook_deliveries d
   SET next_attempt_at = $3, updated_at = $1
  FROM due, wallet.webhook_events e, wallet.webhook_endpoints p
 WHERE d.bucket = due.bucket AND d.id = due.id
   AND e.bucket = d.bucket AND e.id = d.event_id
   AND p.bucket = d.bucket AND p.id = d.endpoint_id
RETURNING d.bucket, d.id, d.endpoint_id, d.event_id, d.attempts, e.type, e.payload,
          e.created_at AS event_created_at, p.url, p.secret_sealed, p.previous_secret_sealed,
          p.previous_secret_until

-- name: record
-- Each attempt's outcome: the delivery's state and the attempt itself (a delivery deleted with
-- its endpoint meanwhile is skipped).
WITH r AS (
    SELECT * FROM unnest($1::smallint[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[],
                         $7::timestamptz[], $8::timestamptz[])
        AS r (bucket, id, status, code, error, duration_ms, attempted_at, next_at)
), upd AS (
    UPDATE wallet.webhook_deliveries d
       SET status = r.status, attempts = d.attempts + 1,
           next_attempt_at = coalesce(r.next_at, d.next_attempt_at),
           last_status_code = r.code, last_error = r.error, updated_at = r.attempted_at,
           delivered_at = CASE WHEN r.status = 'delivered' THEN r.attempted_at ELSE d.delivered_at END
      FROM r
     WHERE d.bucket = r.bucket AND d.id = r.id
    RETURNING d.bucket, d.id
)
INSERT INTO wallet.webhook_attempts (bucket, delivery_id, attempted_at, status_code, error, duration_ms)
SELECT r.bucket, r.id, r.attempted_at, r.code, r.error, r.duration_ms
  FROM r JOIN upd ON upd.bucket = r.bucket AND upd.id = r.id

-- name: endpoint_streaks
-- Each endpoint's failure streak: ended by a success, started by a failure; rows that would
-- not change are not written (a healthy endpoint's row is left alone).
UPDATE wallet.webhook_endpoints p
   SET failing_since = CASE WHEN h.ok THEN NULL ELSE h.at END
  FROM unnest($1::smallint[], $2::text[], $3::boolean[], $4::timestamptz[]) AS h (bucket, id, ok, at)
 WHERE p.bucket = h.bucket AND p.id = h.id
   AND ((h.ok AND p.failing_since IS NOT NULL) OR (NOT h.ok AND p.failing_since IS NULL))

-- name: disable_failing
-- The endpoints among these whose every attempt has failed since before $3: disabled.
UPDATE wallet.webhook_endpoints p
   SET enabled = false, disabled_reason = 'failing', disabled_at = $4, updated_at = $4
  FROM unnest($1::smallint[], $2::text[]) AS h (bucket, id)
 WHERE p.bucket = h.bucket AND p.id = h.id
   AND p.enabled AND p.failing_since <= $3
RETURNING p.bucket, p.id, p.account_id, p.url, p.failing_since

-- name: insert_notice
-- endpoint.disabled, told to the business's other enabled endpoints by the next fan-out.
INSERT INTO wallet.webhook_events (bucket, id, account_id, type, resource_id, payload, created_at)
VALUES ($1, $2, $3, 'endpoint.disabled', $4, $5, $6)
ON CONFLICT ON CONSTRAINT webhook_events_pkey DO NOTHING

-- name: backlog
SELECT (SELECT count(*) FROM wallet.webhook_events WHERE dispatched_at IS NULL) AS undispatched,
       (SELECT count(*) FROM wallet.webhook_deliveries WHERE status = 'pending') AS pending

-- name: purge
-- At most $2 events created before $1, dispatched and with nothing pending, deleted with their
-- deliveries (and, by the cascade, their attempts). SKIP LOCKED: an event another instance's
-- round is deleting is left to it. The event's foreign key from its deliveries is checked at the
-- statement's end, when both are gone.
WITH old AS MATERIALIZED (
    SELECT e.bucket, e.id
      FROM wallet.webhook_events e
     WHERE e.dispatched_at IS NOT NULL AND e.created_at < $1
       AND NOT EXISTS (SELECT 1 FROM wallet.webhook_deliveries d
                        WHERE d.bucket = e.bucket AND d.event_id = e.id AND d.status = 'pending')
     ORDER BY e.created_at
     LIMIT $2
       FOR UPDATE OF e SKIP LOCKED
), gone AS (
    DELETE FROM wallet.webhook_deliveries d
     USING old
     WHERE d.bucket = old.bucket AND d.event_id = old.id
)
DELETE FROM wallet.webhook_events e
 USING old
 WHERE e.bucket = old.bucket AND e.id = old.id
