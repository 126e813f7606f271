-- bank-adapter's and bank-webhook's named queries (core/queries.load_queries). Everything that
-- writes goes through the functions of migrations/bank/0001_bank.sql (grants.sql: the
-- application role writes no table of this schema itself, but for the relay's outbox columns
-- and the consumer's processed_events).

-- name: transfer
SELECT command_id, saga_id, amount_minor, currency, destination_iban, state, bank_reference, reason,
       requested_at, outcome_at, outcome_source
  FROM bank.transfers WHERE command_id = $1

-- name: transfers
-- A batch's commands' transfers, one probe of the key each, in one round trip (the batch path's
-- lookup: handler.TransferHandler.batch).
SELECT command_id, saga_id, amount_minor, currency, destination_iban, state, bank_reference, reason,
       requested_at, outcome_at, outcome_source
  FROM bank.transfers WHERE command_id = ANY ($1::text[])

-- name: record_transfer
-- The bank accepted the transfer ($6, its reference) or refused the request ($6 NULL, $7 why).
-- $10: the trace context its outcome's announcement carries (core.tracing; '{}' when off).
SELECT bank.record_transfer($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)

-- name: record_transfers
-- A batch's new transfers, each recorded as record_transfer records one, in one statement
-- (bank.record_transfers, migrations/bank/0006: their references' locks first, in one order),
-- the answers in the arrays' order. $9: the exchange; $10: each one's trace context.
SELECT bank.record_transfers($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
                             $7::text[], $8::text[], $9, $10::text[]::jsonb[])

-- name: republish_outcome
SELECT bank.republish_outcome($1, $2, $3)

-- name: receive_callback
SELECT bank.receive_callback($1, $2, $3, $4::jsonb, $5, $6, $7)

-- name: receive_callbacks
-- Concurrent callbacks in one statement and one commit (bank.receive_callbacks, migrations/bank/
-- 0006: the references' locks first, in one order; then each as receive_callback keeps one, in
-- the arrays' order), an answer each in that order. The bodies as JSON text (cast there).
SELECT bank.receive_callbacks($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7)

-- name: reconcile_transfer
SELECT bank.reconcile_transfer($1, $2, $3, $4, $5)

-- name: stale_pending
-- The reconciliation's work: transfers pending since before $1 seconds ago, oldest first.
SELECT command_id, bank_reference, requested_at
  FROM bank.transfers
 WHERE state = 'pending' AND requested_at < now() - make_interval(secs => $1)
 ORDER BY requested_at
 LIMIT $2

-- name: transfers_by_state
SELECT state, count(*)::bigint AS n FROM bank.transfers GROUP BY state

-- name: purge_inbox
-- Retention: applied callbacks received more than $1 hours ago, at most $2 of them (0002).
SELECT bank.purge_inbox(make_interval(hours => $1), $2)

-- name: record_statement
-- A day's statement and its SettlementReported, once (migrations/bank/0004): true when recorded now.
SELECT bank.record_statement($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb)

-- name: recorded_statements
-- Which of these days' statements are recorded (the importer reads only the others).
SELECT day FROM bank.statements WHERE day = ANY ($1::date[])

-- name: sagas_of_references
-- The withdrawal sagas of these transfers, by the bank's reference (the statement's debits).
SELECT bank_reference, saga_id FROM bank.transfers WHERE bank_reference = ANY ($1::text[])
