-- Reconciliation's own records (migrations/wallet/0019): findings and the daily summary.
-- Local tables (citus_tables.json): no bucket.

-- name: record_finding
-- A new finding, or the open one of the same kind and subject seen again (its details and
-- last_seen_at refreshed, found_at kept): the partial unique index makes two finders of one
-- discrepancy, at once or rounds apart, one open finding. created: whether it is new.
INSERT INTO wallet.reconciliation_findings AS f (id, kind, subject, details, found_at, last_seen_at)
VALUES ($1, $2, $3, $4::text::jsonb, $5, $5)
ON CONFLICT (kind, subject) WHERE status = 'open'
DO UPDATE SET details = EXCLUDED.details, last_seen_at = greatest(f.last_seen_at, EXCLUDED.last_seen_at)
RETURNING id, (xmax = 0) AS created

-- name: resolve_finding
-- Only an open one: a resolution is never rewritten (the trigger refuses it too).
UPDATE wallet.reconciliation_findings
   SET status = 'resolved', resolved_by = $2, resolution_note = $3, resolved_at = $4
 WHERE id = $1 AND status = 'open'
RETURNING *

-- name: resolve_not_found_again
-- The open findings of the kinds a round checked that the round did not find again ($2: the
-- subjects it found, per kind as 'kind' || chr(31) || 'subject'), closed by the round: the
-- discrepancy is gone (a top-up settled since, a balance put right). Their history stays.
UPDATE wallet.reconciliation_findings
   SET status = 'resolved', resolved_by = $3, resolution_note = $4, resolved_at = $5
 WHERE status = 'open' AND kind = ANY ($1::text[])
   AND NOT (kind || chr(31) || subject = ANY ($2::text[]))
   AND last_seen_at < $5
RETURNING kind

-- name: finding
SELECT * FROM wallet.reconciliation_findings WHERE id = $1

-- name: list_findings
-- One page by status (and kind, when $2 is not null), newest first; the cursor is the last
-- row's (found_at, id).
SELECT * FROM wallet.reconciliation_findings
 WHERE status = $1
   AND ($2::text IS NULL OR kind = $2)
   AND ($3::timestamptz IS NULL OR (found_at, id) < ($3, $4::text))
 ORDER BY found_at DESC, id DESC
 LIMIT $5

-- name: open_by_kind
SELECT kind, count(*) AS n FROM wallet.reconciliation_findings WHERE status = 'open' GROUP BY kind

-- name: business_wallets
-- Every business account's wallets: whose figures the daily summary keeps. (The ledger's
-- owner of a wallet is its wallet-api account.)
SELECT a.id AS account_id, w.id AS wallet_id
  FROM wallet.accounts a JOIN wallet.wallets w ON w.bucket = a.bucket AND w.account_id = a.id
 WHERE a.kind = 'business'
 ORDER BY a.id, w.id

-- name: upsert_summary
INSERT INTO wallet.daily_summary AS s (day, currency, account_id, transactions, volume_in_minor,
                                       volume_out_minor, fees_minor, computed_at)
SELECT * FROM unnest($1::date[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
                     $7::bigint[], $8::timestamptz[])
ON CONFLICT (day, currency, account_id) DO UPDATE
   SET transactions = EXCLUDED.transactions, volume_in_minor = EXCLUDED.volume_in_minor,
       volume_out_minor = EXCLUDED.volume_out_minor, fees_minor = EXCLUDED.fees_minor,
       computed_at = EXCLUDED.computed_at

-- name: read_summary
-- Days [$1, $2] of one account ($3), or of the totals ('').
SELECT day, currency, account_id, transactions, volume_in_minor, volume_out_minor, fees_minor, computed_at
  FROM wallet.daily_summary
 WHERE day BETWEEN $1 AND $2 AND account_id = $3
 ORDER BY day, currency

-- name: read_summary_all
-- Days [$1, $2] of every business and the totals (staff).
SELECT day, currency, account_id, transactions, volume_in_minor, volume_out_minor, fees_minor, computed_at
  FROM wallet.daily_summary
 WHERE day BETWEEN $1 AND $2
 ORDER BY day, currency, account_id
 LIMIT $3

-- name: bank_statements_since
-- The bank's statements from day $1 on (migrations/wallet/0021), by currency and day.
SELECT day, currency, opening_minor, closing_minor
  FROM wallet.bank_statements
 WHERE day >= $1
 ORDER BY currency, day

-- name: bank_statement_lines_since
-- Their movements, at most $2 (the round stops there and says it did not see everything).
SELECT day, currency, position, bank_reference, customer_reference, amount_minor, saga_id
  FROM wallet.bank_statement_lines
 WHERE day >= $1
 ORDER BY day, currency, position
 LIMIT $2

-- name: wires_of_payouts
-- The wires each of the bank's days settled (wallet-consumer's settlement, migration 0020):
-- a day's nostro line is their sum; the statement shows each.
SELECT payout_id, line_id, gross_minor
  FROM wallet.settled_topups
 WHERE provider = 'bank' AND payout_id = ANY ($1::text[])
