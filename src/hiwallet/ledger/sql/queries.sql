-- The ledger's named queries. Every statement on a wallet-owned table names one bucket
-- (`bucket = $n`) or joins on equal buckets, so it routes to one shard on Citus.

-- name: post
-- ledger.post_batch of one posting, answered as ledger.post answers (a concurrent twin that
-- committed first is a replay); called directly, not through ledger.post, whose extra
-- PL/pgSQL call cost ~30 µs a posting when measured (migration 0008).
SELECT (ledger.post_batch(ARRAY[ROW($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)::ledger.posting_in],
                          true))[1]

-- name: post_batch
SELECT ledger.post_batch($1)

-- name: ensure_system_accounts
SELECT ledger.ensure_system_accounts($1, $2, $3)

-- name: open_account
-- An empty customer account; opening it again does nothing (migrations/wallet/0009).
SELECT ledger.open_account($1, $2, $3, $4, $5)

-- name: ensure_system_accounts_of
-- The system sub-accounts of each bucket of $1, in one statement.
SELECT ledger.ensure_system_accounts(b, $2, $3) FROM unnest($1::smallint[]) AS b

-- name: open_accounts
-- Many empty customer accounts, each as open_account opens it (migrations/wallet/0027).
SELECT ledger.open_accounts($1, $2, $3, $4, $5)

-- name: get_account
SELECT bucket, id, role, purse, currency, owner, balance, held, version
  FROM ledger.accounts WHERE bucket = $1 AND id = $2

-- name: get_accounts
SELECT bucket, id, role, purse, currency, owner, balance, held, version
  FROM ledger.accounts WHERE bucket = $1 AND id = ANY ($2::text[])

-- name: wallet_balance
-- A wallet's two accounts and, on its promo account, what its batches past their expiry still
-- hold (the expiry job has not returned it yet): shown balances leave it out, as the payment
-- path does (migration 0008: only batches with expires_at > now are spent). One statement, so
-- the balance and the expired part are read at one snapshot; the batches' bucket is the
-- account's (one shard).
SELECT a.bucket, a.id, a.role, a.purse, a.currency, a.owner, a.balance, a.held, a.version,
       CASE WHEN a.purse = 'promo' THEN
           (SELECT coalesce(sum(b.remaining), 0) FROM ledger.promo_batches b
             WHERE b.bucket = a.bucket AND b.account_id = a.id AND b.remaining > 0
               AND b.expires_at <= clock_timestamp())
       ELSE 0 END AS expired
  FROM ledger.accounts a WHERE a.bucket = $1 AND a.id = ANY ($2::text[])

-- name: system_balance
-- A system account's balance is the sum of its sub-accounts; a report, not a posting input.
-- citus: multi-shard read
SELECT coalesce(sum(balance), 0) FROM ledger.accounts
 WHERE role = $1 AND currency = $2 AND ($3::text IS NULL OR id LIKE '%:' || $3 || ':' || $2)

-- name: currencies_to_sweep
-- citus: multi-shard read (the sweep job's currencies: those whose sub-accounts hold something)
SELECT DISTINCT currency FROM ledger.accounts
 WHERE role = ANY ($1::ledger.account_role[]) AND bucket <> 0 AND balance <> 0
 ORDER BY currency

-- name: sub_accounts_to_sweep
-- citus: multi-shard read (the sweep job's work list; each sweep then posts per bucket)
SELECT bucket, id, balance, version FROM ledger.accounts
 WHERE role = $1 AND currency = $2 AND bucket <> 0 AND balance <> 0 AND id LIKE $3
 ORDER BY bucket

-- name: statement
SELECT account_id, version, transaction_id, type, ref, amount, currency, balance_after, posted_at
  FROM ledger.lines
 WHERE bucket = $1 AND account_id = $2 AND version > $3
 ORDER BY version
 LIMIT $4

-- name: transaction_home
SELECT id, home_bucket, buckets, type, actor, ref, refund_of, metadata, posted_at
  FROM ledger.transactions WHERE bucket = $1 AND id = $2

-- name: transaction_lines
SELECT account_id, version, transaction_id, type, ref, amount, currency, balance_after, posted_at
  FROM ledger.lines
 WHERE bucket = ANY ($1::smallint[]) AND transaction_id = $2
 ORDER BY bucket, account_id, version

-- name: lines_exist
-- Whether each (bucket, account, transaction) has a line, in the arrays' order: one probe of
-- lines_by_transaction each (a transaction's few lines in the pair's own bucket), for a caller
-- that checks many postings at once. citus: multi-shard read (the pairs' buckets; each probe
-- names its bucket). Written so that no plan but that probe fits: the account compared after
-- the probe, not in it (with it, the generic plan, made while the table was young, walked the
-- account's lines instead); a LATERAL, not an EXISTS (whose generic plan hashed the whole of
-- ledger.lines on every call), nor "bucket = ANY ($1)" (every line of the buckets read): each
-- of those slower with every line posted.
SELECT coalesce(l.found, false) AS found
  FROM unnest($1::smallint[], $2::text[], $3::text[]) WITH ORDINALITY
       AS p (bucket, account_id, transaction_id, ord)
  CROSS JOIN LATERAL (SELECT bool_or(account_id = p.account_id) AS found FROM ledger.lines
                       WHERE bucket = p.bucket AND transaction_id = p.transaction_id) AS l
 ORDER BY p.ord

-- name: actors
-- Who posted these transactions, read in one bucket: a transaction has a row in each bucket it
-- touches (ledger.post), so the bucket of a statement's account holds every one of its lines'.
SELECT id, actor FROM ledger.transactions WHERE bucket = $1 AND id = ANY ($2::text[])

-- name: counterparties
-- The other customer wallets each of these transactions of $2's statement moved money with: the
-- transaction's row in $2's bucket ($1) lists every bucket it touched, and in each its lines are
-- found by lines_by_transaction (a transaction's few lines). Wallet accounts only (no fee,
-- clearing or promo-expense leg), and none of $2's own wallet ($3: its purses' prefix).
SELECT t.id AS transaction_id, l.account_id
  FROM ledger.transactions t
 CROSS JOIN LATERAL unnest(t.buckets) AS b (bucket)
  JOIN ledger.lines l ON l.bucket = b.bucket AND l.transaction_id = t.id
  JOIN ledger.accounts a ON a.bucket = l.bucket AND a.id = l.account_id
 WHERE t.bucket = $1 AND t.id = ANY ($4::text[])
   AND a.role = 'user_wallet' AND l.account_id <> $2 AND NOT starts_with(l.account_id, $3)
 ORDER BY t.id, l.account_id

-- name: refund_of
SELECT id FROM ledger.transactions WHERE bucket = $1 AND refund_of = $2 AND bucket = home_bucket

-- name: balance_as_of
SELECT balance_after FROM ledger.lines
 WHERE bucket = $1 AND account_id = $2 AND posted_at <= $3
 ORDER BY posted_at DESC, version DESC
 LIMIT 1

-- name: daily_balances
-- The account's balance at the end of each UTC day from $3 to $4: its last line posted before the
-- day's end, one backward probe of lines_by_time a day (30 days, 30 probes); 0 before its first.
SELECT d.day::date AS day,
       coalesce((SELECT l.balance_after FROM ledger.lines l
                  WHERE l.bucket = $1 AND l.account_id = $2
                    AND l.posted_at < (d.day + interval '1 day') AT TIME ZONE 'UTC'
                  ORDER BY l.posted_at DESC, l.version DESC
                  LIMIT 1), 0) AS balance
  FROM generate_series($3::date::timestamp, $4::date::timestamp, interval '1 day') AS d (day)
 ORDER BY d.day

-- name: promo_batches
SELECT id, account_id, funder_account, funded_by, amount, remaining, expires_at, grant_transaction_id
  FROM ledger.promo_batches
 WHERE bucket = $1 AND account_id = $2
 ORDER BY expires_at, id

-- name: expired_promo_batches
-- citus: multi-shard read (the expiry job's work list; each expiry then posts in one bucket)
SELECT b.id, b.account_id, b.expire_to_account, a.currency
  FROM ledger.promo_batches b
  JOIN ledger.accounts a ON a.bucket = b.bucket AND a.id = b.account_id
 WHERE b.remaining > 0 AND b.expires_at <= $1
 ORDER BY b.expires_at, b.bucket, b.id
 LIMIT $2

-- name: place_hold
SELECT ledger.place_hold($1, $2, $3, $4)

-- name: release_hold
SELECT ledger.release_hold($1, $2, $3)
