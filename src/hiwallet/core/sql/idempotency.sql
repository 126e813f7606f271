-- The idempotency store's statements (core/idempotency.py). {table} is the store's
-- (schema-qualified) table; {key_match} its key columns (the partition's, scope, key), each
-- equal to a parameter from $2 on; {columns} what an answer writes. The names are checked to
-- be plain identifiers before they are put in.

-- name: begin
-- Try, never wait: a second request with a key whose first request is still running is
-- answered 409 at once; and the stored answer, if any (core/idempotency.py says why in one
-- statement). One row, stored or not.
SELECT pg_try_advisory_xact_lock($1) AS locked, k.*
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN {table} k ON {key_match}

-- name: put
-- The answer's time is the clock's, not the transaction's start: the retention counts from
-- the answer.
INSERT INTO {table} ({columns}, created_at)
VALUES ({params}, clock_timestamp())

-- name: purge
-- One bounded batch of answers older than the retention ($1 seconds).
-- citus: multi-shard read (a periodic job's bounded delete of expired records)
DELETE FROM {table}
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM {table}
                          WHERE created_at < now() - make_interval(secs => $1) LIMIT $2))
