-- Verification queries (hiwallet ledger verify). Per-bucket checks name one bucket.

-- name: buckets
-- citus: multi-shard read
-- Buckets with anything to check: an account that moved or holds something, a line, a hold or
-- a promo batch. An untouched account (version 0, balance 0, nothing held, no hash) with no
-- line, hold or batch is consistent by definition.
SELECT bucket FROM ledger.accounts
 WHERE version <> 0 OR balance <> 0 OR held <> 0 OR last_hash <> '\x'::bytea
UNION SELECT bucket FROM ledger.lines
UNION SELECT bucket FROM ledger.holds
UNION SELECT bucket FROM ledger.promo_batches
ORDER BY bucket

-- name: line_problems
-- Each line against the previous line of its account: versions without gaps, balances that
-- add up, and a hash over the line's content and the previous line's hash.
WITH l AS (
    SELECT l.*, lag(version) OVER w AS prev_version, lag(balance_after) OVER w AS prev_balance,
           lag(hash) OVER w AS prev_hash
      FROM ledger.lines l
     WHERE bucket = $1
    WINDOW w AS (PARTITION BY account_id ORDER BY version)
)
SELECT account_id, version,
       CASE
         WHEN version <> coalesce(prev_version, 0) + 1
           THEN 'version follows ' || coalesce(prev_version, 0) || ' (a line is missing)'
         WHEN balance_after <> coalesce(prev_balance, 0) + amount
           THEN 'balance_after ' || balance_after || ' but the lines add up to ' || (coalesce(prev_balance, 0) + amount)
         ELSE 'hash does not match its content and the previous line (altered)'
       END AS problem
  FROM l
 WHERE version <> coalesce(prev_version, 0) + 1
    OR balance_after <> coalesce(prev_balance, 0) + amount
    OR hash <> ledger.line_hash(coalesce(prev_hash, '\x'::bytea), account_id, version, transaction_id,
                                amount, currency, balance_after, type::text, ref, posted_at)
 ORDER BY account_id, version

-- name: orphan_problems
-- Lines whose account or transaction part is not there. Index probes per line (sub-plans),
-- not a join, so that stale statistics cannot turn it into a nested loop over the bucket.
SELECT l.account_id, l.version,
       CASE WHEN NOT EXISTS (SELECT 1 FROM ledger.accounts a WHERE a.bucket = l.bucket AND a.id = l.account_id)
            THEN 'names no account' ELSE 'names no transaction part ' || l.transaction_id END AS problem
  FROM ledger.lines l
 WHERE l.bucket = $1
   AND (NOT EXISTS (SELECT 1 FROM ledger.accounts a WHERE a.bucket = l.bucket AND a.id = l.account_id)
        OR NOT EXISTS (SELECT 1 FROM ledger.transactions t WHERE t.bucket = l.bucket AND t.id = l.transaction_id))

-- name: account_problems
-- The stored balance, version and hash of each account against its last line; a customer's
-- balance never below zero.
SELECT a.id,
       CASE
         WHEN a.version <> coalesce(last.version, 0)
           THEN 'version ' || a.version || ' but the last line is v' || coalesce(last.version, 0)
         WHEN a.balance <> coalesce(last.balance_after, 0)
           THEN 'balance ' || a.balance || ' but the lines add up to ' || coalesce(last.balance_after, 0)
         WHEN a.last_hash <> coalesce(last.hash, '\x'::bytea)
           THEN 'hash chain head does not match the last line'
         ELSE 'customer balance ' || a.balance || ' below zero'
       END AS problem
  FROM ledger.accounts a
  LEFT JOIN LATERAL (
        SELECT version, balance_after, hash FROM ledger.lines l
         WHERE l.bucket = a.bucket AND l.account_id = a.id ORDER BY version DESC LIMIT 1
  ) last ON true
 WHERE a.bucket = $1
   AND (a.version <> coalesce(last.version, 0)
        OR a.balance <> coalesce(last.balance_after, 0)
        OR a.last_hash <> coalesce(last.hash, '\x'::bytea)
        OR (a.role = 'user_wallet' AND a.balance < 0))

-- name: hold_problems
SELECT a.id, a.held, coalesce(h.pending, 0) AS pending
  FROM ledger.accounts a
  LEFT JOIN (SELECT account_id, sum(amount) AS pending FROM ledger.holds
              WHERE bucket = $1 AND status = 'pending' GROUP BY account_id) h ON h.account_id = a.id
 WHERE a.bucket = $1 AND a.held <> coalesce(h.pending, 0)

-- name: promo_problems
SELECT a.id, a.balance, coalesce(p.remaining, 0) AS remaining
  FROM ledger.accounts a
  LEFT JOIN (SELECT account_id, sum(remaining) AS remaining FROM ledger.promo_batches
              WHERE bucket = $1 GROUP BY account_id) p ON p.account_id = a.id
 WHERE a.bucket = $1 AND a.purse = 'promo' AND a.balance <> coalesce(p.remaining, 0)

-- name: part_problems
-- Parts that must balance by themselves (transit legs on).
SELECT l.transaction_id, l.currency, sum(l.amount) AS total
  FROM ledger.lines l
  JOIN ledger.transactions t ON t.bucket = l.bucket AND t.id = l.transaction_id
 WHERE l.bucket = $1 AND t.parts_balanced
 GROUP BY l.transaction_id, l.currency
HAVING sum(l.amount) <> 0

-- name: bucket_counts
SELECT (SELECT count(*) FROM ledger.accounts WHERE bucket = $1) AS accounts,
       (SELECT count(*) FROM ledger.lines WHERE bucket = $1) AS lines,
       (SELECT count(*) FROM ledger.transactions WHERE bucket = $1 AND bucket = home_bucket) AS transactions

-- name: unbalanced_transactions
-- citus: multi-shard read
-- Global: a whole transaction over all its parts. On Citus this may see a half-committed 2PC;
-- recheck a failure after a few seconds (docs/ledger-citus.md).
SELECT transaction_id, currency, sum(amount) AS total
  FROM ledger.lines
 GROUP BY transaction_id, currency
HAVING sum(amount) <> 0

-- name: currency_totals
-- citus: multi-shard read
SELECT currency, sum(balance) AS total FROM ledger.accounts GROUP BY currency HAVING sum(balance) <> 0
