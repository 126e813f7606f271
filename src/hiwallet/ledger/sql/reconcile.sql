-- The ledger's reads for reconciliation and the daily summary (hiwallet.ledger.reconcile).
-- What they find is reported, never fixed; the caller (hiwallet.reconciliation) keeps it.

-- name: balance_mismatches
-- Each account of one bucket whose stored balance is not the sum of its lines (verify checks
-- the stored balance against the last line's balance_after and the chain; this is the plain
-- sum, which a tampered balance row or a lost line both break).
SELECT a.id, a.role::text AS role, a.currency, a.balance, coalesce(s.total, 0)::bigint AS lines_total
  FROM ledger.accounts a
  LEFT JOIN (SELECT l.account_id, sum(l.amount) AS total FROM ledger.lines l
              WHERE l.bucket = $1 GROUP BY l.account_id) s ON s.account_id = a.id
 WHERE a.bucket = $1 AND a.balance <> coalesce(s.total, 0)
 ORDER BY a.id
 LIMIT $2

-- name: late_invoices
-- Months in which a provider paid top-ups out in the gross model (its fee not deducted: it bills
-- it) that no invoice for that month covers (an invoice's metadata names the month it bills,
-- `period`), once the month is over and the provider's due days after it have passed. Both
-- kinds of posting are the central bucket's (their home): one shard. $1/$2 each provider's due
-- days, $3 any other's, $4 now, $5 the central bucket, $6 the most rows (oldest month first).
WITH paid AS (
    SELECT t.metadata->>'provider' AS provider, l.currency,
           date_trunc('month', t.posted_at, 'UTC') AS month,
           count(DISTINCT t.id) AS payouts, sum(l.amount)::bigint AS gross
      FROM ledger.transactions t
      JOIN ledger.lines l ON l.bucket = t.bucket AND l.transaction_id = t.id
     WHERE t.bucket = $5 AND l.bucket = $5 AND t.type = 'settlement_topup'
       AND t.metadata->>'model' = 'gross'
       AND l.amount > 0 AND split_part(l.account_id, ':', 3) = 'clearing'
     GROUP BY 1, 2, 3
), invoiced AS (
    SELECT DISTINCT t.metadata->>'provider' AS provider, l.currency, t.metadata->>'period' AS period
      FROM ledger.transactions t
      JOIN ledger.lines l ON l.bucket = t.bucket AND l.transaction_id = t.id
     WHERE t.bucket = $5 AND l.bucket = $5 AND t.type = 'provider_invoice' AND t.metadata ? 'period'
), due AS (
    SELECT p.*, to_char(p.month AT TIME ZONE 'UTC', 'YYYY-MM') AS period,
           p.month + interval '1 month' + make_interval(days => coalesce(w.due_days, $3::int)) AS due_at
      FROM paid p
      LEFT JOIN unnest($1::text[], $2::int[]) AS w(provider, due_days) ON w.provider = p.provider
)
SELECT d.provider, d.currency, d.period, d.payouts, d.gross, d.due_at
  FROM due d
 WHERE d.due_at < $4::timestamptz
   AND NOT EXISTS (SELECT 1 FROM invoiced i
                    WHERE i.provider = d.provider AND i.currency = d.currency AND i.period = d.period)
 ORDER BY d.month, d.provider, d.currency
 LIMIT $6

-- name: unsettled_topups
-- citus: multi-shard read
-- Top-ups the provider has not paid out after its window. A top-up is clearing(provider) −amount
-- (in its wallet's bucket); a payout is a settlement_topup, clearing +gross (the central
-- clearing). Payouts are not matched to top-ups in the ledger (a settlement names a gross, not
-- its top-ups), so they are taken as paying the oldest top-ups first: per provider and
-- currency, a top-up is unsettled while the top-ups up to it add up to more than every payout
-- so far (`unsettled`: the part of it not covered). A refunded top-up is owed to nobody and
-- left out. $1/$2 each provider's window in seconds, $3 the window of any other, $4 now, $5
-- the most rows returned (oldest first).
-- TODO(settlement): once each payout's top-ups are known (the settlement import, issue 24),
-- match them exactly instead of oldest-first; hiwallet.reconciliation.checks calls this.
WITH topups AS (
    SELECT l.bucket, l.transaction_id, split_part(l.account_id, ':', 4) AS provider, l.currency,
           -l.amount AS amount, l.posted_at
      FROM ledger.lines l
     WHERE l.type = 'topup' AND l.amount < 0
       AND split_part(l.account_id, ':', 2) = 'sys' AND split_part(l.account_id, ':', 3) = 'clearing'
       AND NOT EXISTS (SELECT 1 FROM ledger.transactions r
                        WHERE r.bucket = l.bucket AND r.refund_of = l.transaction_id)
), settled AS (
    SELECT split_part(l.account_id, ':', 4) AS provider, l.currency, sum(l.amount) AS total
      FROM ledger.lines l
     WHERE l.type = 'settlement_topup'
       AND split_part(l.account_id, ':', 2) = 'sys' AND split_part(l.account_id, ':', 3) = 'clearing'
     GROUP BY 1, 2
), running AS (
    SELECT t.*, sum(t.amount) OVER (PARTITION BY t.provider, t.currency
                                    ORDER BY t.posted_at, t.transaction_id) AS through
      FROM topups t
)
SELECT r.transaction_id, r.provider, r.currency, r.amount, r.posted_at,
       least(r.amount, r.through - coalesce(s.total, 0))::bigint AS unsettled
  FROM running r
  LEFT JOIN settled s ON s.provider = r.provider AND s.currency = r.currency
  LEFT JOIN unnest($1::text[], $2::float8[]) AS w(provider, window_s) ON w.provider = r.provider
 WHERE r.through > coalesce(s.total, 0)
   AND r.posted_at < $4::timestamptz - make_interval(secs => coalesce(w.window_s, $3::float8))
 ORDER BY r.posted_at, r.transaction_id
 LIMIT $5

-- name: day_of_wallets
-- citus: multi-shard read
-- One day's lines [$4, $5) on the accounts named ($1 buckets, $2 account ids, $3 their owners),
-- per owner and currency: the transactions (a payment from cash and promo is one), what came
-- in and went out, and the fees of those transactions (their revenue legs, in whichever bucket).
-- Index probes on lines_by_time per account.
WITH mine AS (
    SELECT w.owner, l.bucket, l.transaction_id, l.currency, l.amount
      FROM unnest($1::smallint[], $2::text[], $3::text[]) AS w(bucket, account_id, owner)
      JOIN ledger.lines l ON l.bucket = w.bucket AND l.account_id = w.account_id
                         AND l.posted_at >= $4 AND l.posted_at < $5
), fees AS (
    SELECT m.owner, m.currency, sum(r.amount) AS fees
      FROM (SELECT DISTINCT owner, bucket, transaction_id, currency FROM mine) m
      JOIN ledger.transactions p ON p.bucket = m.bucket AND p.id = m.transaction_id
      JOIN ledger.lines r ON r.bucket = ANY (p.buckets) AND r.transaction_id = m.transaction_id
                         AND split_part(r.account_id, ':', 2) = 'sys'
                         AND split_part(r.account_id, ':', 3) = 'revenue'
     GROUP BY 1, 2
)
SELECT m.owner, m.currency, count(DISTINCT m.transaction_id) AS transactions,
       coalesce(sum(m.amount) FILTER (WHERE m.amount > 0), 0)::bigint AS volume_in,
       coalesce(-sum(m.amount) FILTER (WHERE m.amount < 0), 0)::bigint AS volume_out,
       coalesce(max(f.fees), 0)::bigint AS fees
  FROM mine m
  LEFT JOIN fees f ON f.owner = m.owner AND f.currency = m.currency
 GROUP BY m.owner, m.currency

-- name: day_totals
-- citus: multi-shard read
-- One day's lines [$1, $2) on every wallet (a wallet's account ids are <bucket>:w:<id>:<purse>),
-- per currency, and the fees taken that day (every revenue leg). A scan of the day's lines:
-- ledger.lines has no index on the time alone (lines_by_time leads with the account).
WITH wallets AS (
    SELECT l.currency, count(DISTINCT l.transaction_id) AS transactions,
           coalesce(sum(l.amount) FILTER (WHERE l.amount > 0), 0)::bigint AS volume_in,
           coalesce(-sum(l.amount) FILTER (WHERE l.amount < 0), 0)::bigint AS volume_out
      FROM ledger.lines l
     WHERE l.posted_at >= $1 AND l.posted_at < $2 AND split_part(l.account_id, ':', 2) = 'w'
     GROUP BY l.currency
), fees AS (
    SELECT l.currency, sum(l.amount)::bigint AS fees
      FROM ledger.lines l
     WHERE l.posted_at >= $1 AND l.posted_at < $2
       AND split_part(l.account_id, ':', 2) = 'sys' AND split_part(l.account_id, ':', 3) = 'revenue'
     GROUP BY l.currency
)
SELECT coalesce(w.currency, f.currency) AS currency, coalesce(w.transactions, 0) AS transactions,
       coalesce(w.volume_in, 0) AS volume_in, coalesce(w.volume_out, 0) AS volume_out,
       coalesce(f.fees, 0) AS fees
  FROM wallets w FULL JOIN fees f ON f.currency = w.currency

-- name: nostro_movements
-- The nostro's lines (central only: one account, one shard) posted since $3, in posting order
-- (lines_by_time), at most $4: reconciliation's side of the bank's statement.
SELECT l.transaction_id, l.type::text AS type, l.ref, l.amount, l.posted_at
  FROM ledger.lines l
 WHERE l.bucket = $1 AND l.account_id = $2 AND l.posted_at >= $3
 ORDER BY l.posted_at, l.version
 LIMIT $4
