-- wallet-api's statements of the merchants' webhooks (wallet_api/webhooks.py,
-- migrations/wallet/0016). Every read of an endpoint or a delivery joins the caller's
-- membership of its account: what the caller may not see is not found.

-- name: business_of_member
-- The business account, if the caller is its member; and how many endpoints it has.
SELECT a.bucket, a.id, a.kind,
       (SELECT count(*) FROM wallet.webhook_endpoints p
         WHERE p.bucket = a.bucket AND p.account_id = a.id) AS endpoints
  FROM wallet.accounts a
  JOIN wallet.members m ON m.bucket = a.bucket AND m.account_id = a.id
 WHERE a.bucket = $1 AND a.id = $2 AND m.issuer = $3 AND m.subject = $4

-- name: insert_endpoint
INSERT INTO wallet.webhook_endpoints
    (bucket, id, account_id, url, event_types, description, secret_sealed, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
RETURNING *

-- name: endpoints_of_member
SELECT p.* FROM wallet.webhook_endpoints p
  JOIN wallet.members m ON m.bucket = p.bucket AND m.account_id = p.account_id
 WHERE m.issuer = $1 AND m.subject = $2
 ORDER BY p.created_at, p.id
 LIMIT $3

-- name: endpoint_of_member
SELECT p.* FROM wallet.webhook_endpoints p
  JOIN wallet.members m ON m.bucket = p.bucket AND m.account_id = p.account_id
 WHERE p.bucket = $1 AND p.id = $2 AND m.issuer = $3 AND m.subject = $4

-- name: endpoint_of_member_for_update
SELECT p.* FROM wallet.webhook_endpoints p
  JOIN wallet.members m ON m.bucket = p.bucket AND m.account_id = p.account_id
 WHERE p.bucket = $1 AND p.id = $2 AND m.issuer = $3 AND m.subject = $4
   FOR UPDATE OF p

-- name: update_endpoint
-- A member's change: the URL, the event types, the description, enabled. Enabling clears the
-- reason it was disabled and the failure streak (a fresh start); disabling records the member.
UPDATE wallet.webhook_endpoints
   SET url = $3, event_types = $4, description = $5, enabled = $6,
       disabled_reason = CASE WHEN $6 THEN NULL WHEN enabled THEN 'member' ELSE disabled_reason END,
       disabled_at = CASE WHEN $6 THEN NULL WHEN enabled THEN $7 ELSE disabled_at END,
       failing_since = CASE WHEN $6 AND NOT enabled THEN NULL ELSE failing_since END,
       updated_at = $7
 WHERE bucket = $1 AND id = $2
RETURNING *

-- name: rotate_secret
UPDATE wallet.webhook_endpoints
   SET previous_secret_sealed = $3, previous_secret_until = $4, secret_sealed = $5, updated_at = $6
 WHERE bucket = $1 AND id = $2
RETURNING *

-- name: delete_endpoint
DELETE FROM wallet.webhook_endpoints WHERE bucket = $1 AND id = $2

-- name: insert_event
-- A merchant's event, in the transaction of its movement (payment.refunded, promo.granted).
INSERT INTO wallet.webhook_events (bucket, id, account_id, type, resource_id, payload, created_at)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp())

-- name: deliveries_of_member
-- The caller's deliveries, newest first, after the cursor ($5, $6: created_at and id of the
-- last one seen), filtered by endpoint, event type and status when given.
SELECT d.bucket, d.id, d.endpoint_id, d.event_id, d.event_type, d.resource_id, d.status,
       d.attempts, d.next_attempt_at, d.last_status_code, d.last_error, d.created_at,
       d.updated_at, d.delivered_at
  FROM wallet.webhook_deliveries d
  JOIN wallet.webhook_endpoints p ON p.bucket = d.bucket AND p.id = d.endpoint_id
  JOIN wallet.members m ON m.bucket = p.bucket AND m.account_id = p.account_id
 WHERE m.issuer = $1 AND m.subject = $2
   AND ($3::text IS NULL OR d.endpoint_id = $3)
   AND ($4::text IS NULL OR d.event_type = $4)
   AND ($7::text IS NULL OR d.status = $7)
   AND ($5::timestamptz IS NULL OR (d.created_at, d.id) < ($5, $6))
 ORDER BY d.created_at DESC, d.id DESC
 LIMIT $8

-- name: delivery_of_member
SELECT d.bucket, d.id, d.endpoint_id, d.event_id, d.event_type, d.resource_id, d.status,
       d.attempts, d.next_attempt_at, d.last_status_code, d.last_error, d.created_at,
       d.updated_at, d.delivered_at, e.payload, e.created_at AS event_created_at
  FROM wallet.webhook_deliveries d
  JOIN wallet.webhook_events e ON e.bucket = d.bucket AND e.id = d.event_id
  JOIN wallet.webhook_endpoints p ON p.bucket = d.bucket AND p.id = d.endpoint_id
  JOIN wallet.members m ON m.bucket = p.bucket AND m.account_id = p.account_id
 WHERE d.bucket = $1 AND d.id = $2 AND m.issuer = $3 AND m.subject = $4

-- name: attempts_of
SELECT attempted_at, status_code, error, duration_ms FROM wallet.webhook_attempts
 WHERE bucket = $1 AND delivery_id = $2
 ORDER BY n
 LIMIT $3

-- name: replay_delivery
-- Sent again: pending, due now, its schedule from the start; the same event (webhook-id).
UPDATE wallet.webhook_deliveries d
   SET status = 'pending', attempts = 0, next_attempt_at = $3, updated_at = $3
  FROM wallet.webhook_endpoints p, wallet.members m
 WHERE d.bucket = $1 AND d.id = $2
   AND p.bucket = d.bucket AND p.id = d.endpoint_id
   AND m.bucket = p.bucket AND m.account_id = p.account_id AND m.issuer = $4 AND m.subject = $5
RETURNING d.bucket, d.id, d.endpoint_id, d.event_id, d.event_type, d.resource_id, d.status,
          d.attempts, d.next_attempt_at, d.last_status_code, d.last_error, d.created_at,
          d.updated_at, d.delivered_at

-- name: notify
SELECT pg_notify($1, '')
