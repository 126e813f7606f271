-- topup-webhook's named queries (core/queries.load_queries). Everything that writes goes
-- through the functions of migrations/topup/0001_topup.sql (grants.sql: the application role
-- writes no table of this schema itself, but for the relay's outbox columns).

-- name: ingest
-- One notification: inbox, payment, outbox, in one statement (its own transaction).
SELECT topup.ingest($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, $14)

-- name: ingest_batch
-- Many notifications, each as ingest above, in one statement (one transaction, one commit): an
-- array per argument (the payloads as JSON text), the exchange once; an outcome per item.
SELECT topup.ingest_batch($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                          $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[],
                          $12::text[], $13, $14::text[])

-- name: recorded_payments
-- Which of these payments at a provider are recorded (the reconciliation leaves those alone).
SELECT provider_payment_id FROM topup.payments
 WHERE provider = $1 AND provider_payment_id = ANY ($2::text[])

-- name: purge_inbox
SELECT topup.purge_inbox(make_interval(days => $1), $2)

-- name: inbox_rows
-- Exact while the table is small, the planner's estimate once it is not (a count of millions
-- of rows every few seconds would be the database's busiest query).
SELECT CASE WHEN c.reltuples < 100000 THEN (SELECT count(*) FROM topup.inbox)
            ELSE c.reltuples::bigint END
  FROM pg_class c WHERE c.oid = 'topup.inbox'::regclass

-- name: payment
SELECT id, provider, provider_payment_id, wallet, reference, amount_minor, currency, reported_by,
       routes, created_at
  FROM topup.payments WHERE id = $1

-- name: record_settlement
-- A payout and its SettlementReported, once (migrations/topup/0005): true when recorded now.
SELECT topup.record_settlement($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb)

-- name: recorded_settlements
-- Which of these payouts of a provider are recorded (the importer reads only the others' lines).
SELECT payout_id FROM topup.settlements
 WHERE provider = $1 AND payout_id = ANY ($2::text[])
