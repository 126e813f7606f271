-- withdrawal-orchestrator's named queries (core/queries.load_queries). The triggers of
-- migrations/withdrawal/0001_withdrawal.sql guard every write: a saga starts initiated and
-- moves only along withdrawal.allowed_transitions, each move leaves its history row, and the
-- outbox takes only the command the saga's state calls for.

-- name: request
-- POST /v1/withdrawals in one statement (migrations/withdrawal/0002): the key's try-lock, its
-- stored answer, or the saga, its first command and the answer. saga's columns are NULL unless
-- it was created.
SELECT r.locked, r.stored_hash, r.stored_status, r.stored_body, (r.saga).*
  FROM withdrawal.request($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                          $19, $20) AS r

-- name: saga
SELECT * FROM withdrawal.sagas WHERE id = $1

-- name: saga_for_update
-- The saga a review changes: locked until its transaction ends, so the review and a result (or
-- two reviews) change it one after the other.
SELECT * FROM withdrawal.sagas WHERE id = $1 FOR UPDATE

-- name: sagas_for_update
-- The sagas a batch of results changes, locked until its transaction ends, in id order: every
-- batch (and every single result, a batch of one) takes its locks in the same order, so two
-- batches naming the same sagas wait on each other, never deadlock. Each saga is a probe of
-- the primary key, locked as it is found, the ids taken in order (the nested loop keeps the
-- order of its outer side). OFFSET 0 keeps the probe from being flattened into a join: the
-- generic plan of "id = ANY" or of a join with the list, made while the table was young and
-- its statistics empty, scanned the whole table on every call, slower with every saga.
SELECT s.*
  FROM (SELECT DISTINCT unnest($1::text[]) AS id ORDER BY 1) AS i
 CROSS JOIN LATERAL (SELECT * FROM withdrawal.sagas WHERE id = i.id OFFSET 0 FOR UPDATE) AS s
 ORDER BY s.id

-- name: move_sagas
-- Changes of state in the arrays' order, one UPDATE each (migrations/withdrawal/0002): the
-- guard trigger refuses one the diagram does not have, the history trigger writes its row. The
-- columns a step learns are kept when the step learns nothing. The changed rows, in order.
SELECT * FROM withdrawal.move_sagas($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
                                    $7::text[], $8::text[], $9::text[], $10::text[])

-- name: republished
UPDATE withdrawal.sagas SET last_published_at = now(), republished = republished + 1 WHERE id = $1

-- name: stuck
-- The sagas that waited on their command's answer longer than $1 seconds, oldest publish
-- first, at most $2; locked, and those another transaction holds (a result being handled)
-- skipped: they are moving.
SELECT * FROM withdrawal.sagas
 WHERE state IN ('initiated', 'bank_transfer_pending', 'settling', 'compensating', 'cancelling')
   AND last_published_at < now() - make_interval(secs => $1)
 ORDER BY last_published_at
 LIMIT $2
   FOR UPDATE SKIP LOCKED

-- name: list_by_wallet
-- A wallet's withdrawals, newest first (ids are UUIDv7: time-ordered); $2 is the cursor (the
-- last id of the previous page) or NULL.
SELECT * FROM withdrawal.sagas
 WHERE wallet = $1 AND ($2::text IS NULL OR id < $2)
 ORDER BY id DESC
 LIMIT $3

-- name: under_review
SELECT * FROM withdrawal.sagas WHERE state = 'under_review' ORDER BY id LIMIT $1

-- name: under_review_after
-- The review's queue for staff, oldest first (ids are UUIDv7); $1 is the cursor (the last id of
-- the previous page) or NULL. The partial index sagas_under_review serves it.
SELECT * FROM withdrawal.sagas
 WHERE state = 'under_review' AND ($1::text IS NULL OR id > $1)
 ORDER BY id
 LIMIT $2

-- name: history
SELECT from_state, to_state, actor, at FROM withdrawal.transitions WHERE saga_id = $1 ORDER BY id

-- name: count_by_state
-- The gauges: how many sagas are in each state, and how long the oldest has been in it (what
-- the "withdrawal stuck" alert reads; one scan for both).
SELECT state, count(*) AS n,
       extract(epoch FROM now() - min(state_changed_at))::float8 AS oldest_s
  FROM withdrawal.sagas GROUP BY state
